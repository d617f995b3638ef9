// The values a Jinja template computes with: Python's None/bool/int/float/str/list/tuple/dict, jinja2's Undefined,
// namespace() objects and callables (macros, bound methods, globals), with Python's printing and comparison rules.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya::jinja {

struct Value;
struct Renderer;

// Positional and keyword arguments of a call.
struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
    std::string name;
    std::function<Value(Renderer &, CallArgs &)> fn;
    // A method that would mutate its object: the immutable sandbox refuses to call it (SecurityError).
    bool unsafe = false;
};

struct DictData;

struct Value {
    enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s; // a String's text; an Undefined's message, raised when it is used ("'x' is undefined")
    std::shared_ptr<std::vector<Value>> list;
    std::shared_ptr<DictData> dict; // Dict and Namespace
    std::shared_ptr<Callable> fn;

    Value() = default;
    static Value undefined(std::string message = "value is undefined") {
        Value v;
        v.s = std::move(message);
        return v;
    }
    static Value none() { return of(Kind::None); }
    static Value boolean(bool x) {
        Value v = of(Kind::Bool);
        v.b = x;
        return v;
    }
    static Value integer(int64_t x) {
        Value v = of(Kind::Int);
        v.i = x;
        return v;
    }
    static Value real(double x) {
        Value v = of(Kind::Float);
        v.f = x;
        return v;
    }
    static Value string(std::string x) {
        Value v = of(Kind::String);
        v.s = std::move(x);
        return v;
    }
    static Value make_list(std::vector<Value> items = {}, bool tuple = false) {
        Value v = of(tuple ? Kind::Tuple : Kind::List);
        v.list = std::make_shared<std::vector<Value>>(std::move(items));
        return v;
    }
    static Value make_dict(bool ns = false);
    static Value callable(std::string name, std::function<Value(Renderer &, CallArgs &)> fn, bool unsafe = false) {
        Value v = of(Kind::Callable);
        v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), unsafe});
        return v;
    }
    static Value from_json(const nlohmann::ordered_json &j);

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
    bool is_dict() const { return kind == Kind::Dict; }
    // Python's int (bool included) and float.
    bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
    bool is_number() const { return is_int() || kind == Kind::Float; }
    int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : i; }
    double as_double() const { return kind == Kind::Float ? f : double(as_int()); }

  private:
    static Value of(Kind k) {
        Value v;
        v.kind = k;
        return v;
    }
};

// An insertion-ordered mapping (Python's dict); keys compare with Python's ==. Templates are small, so lookups are
// linear scans.
struct DictData {
    std::vector<std::pair<Value, Value>> items;
    const Value *find(const Value &key) const;
    const Value *find(std::string_view key) const;
    void set(const Value &key, Value value);
};

inline Value Value::make_dict(bool ns) {
    Value v = of(ns ? Kind::Namespace : Kind::Dict);
    v.dict = std::make_shared<DictData>();
    return v;
}

// Bounds on one render, far above what real chat templates need (they take a few thousand steps and kilobytes of
// text), so that a runaway template fails with an error instead of hanging or exhausting memory. Steps: expressions
// evaluated, statements run and loop iterations; a million take about 0.1 s here, and under 10 s under ASan, the
// fuzzer's timeout (each loop iteration allocates its loop variable, which ASan makes slow).
constexpr int64_t kMaxSteps = 1'000'000;
constexpr size_t kMaxBytes = size_t(64) << 20;
// Fail when a string of `bytes` bytes, or a list of `items` values, would be over kMaxBytes; called before building
// one whose size a template controls.
void check_bytes(size_t bytes);
void check_items(size_t items);
// Fails when `v` nests lists and dicts too deeply. A namespace carries values from one loop iteration to the next, so
// without this a loop could build a list deep enough to overflow the stack when it is compared or destroyed.
void check_depth(const Value &v);

// Python's bool(), == (1 == 1.0 == True), and ordering (<; throws on types Python cannot order).
bool truthy(const Value &v);
bool equal(const Value &a, const Value &b);
int compare(const Value &a, const Value &b);
// Python's str() and repr(); an Undefined prints as "" ("Undefined" inside a container).
std::string str(const Value &v);
std::string repr(const Value &v);
std::string float_repr(double x);
// Python's type name as jinja2's messages give it: "'dict object'", "None".
std::string type_repr(const Value &v);
std::string type_name(const Value &v);
// transformers' tojson: json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
// `indent` empty: no indentation (None).
struct JsonStyle {
    bool indent = false;
    std::string indent_text;
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};
std::string to_json(const Value &v, const JsonStyle &style);

// Unicode code points of UTF-8 text (Python's str indexing) and back.
std::vector<uint32_t> code_points(std::string_view s);
void append_utf8(std::string &out, uint32_t cp);
std::string from_code_points(const std::vector<uint32_t> &cps, size_t begin, size_t end);
// Python's str.isspace() for one character.
bool py_space(uint32_t cp);

} // namespace zaya::jinja
