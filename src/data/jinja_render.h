// Evaluation state of one render() call: scopes, the current line for error messages, and the operations that
// builtins (jinja_filters.cpp, jinja_tests.cpp, jinja_methods.cpp) share with the evaluator (jinja_render.cpp).
#pragma once
#include "core/error.h"
#include "data/jinja_ast.h"

#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zaya::jinja {

// An error whose message already names the template (raise_exception's): render() passes it on unchanged. Other
// zaya::Errors raised while rendering get "name:line: " in front.
struct LocatedError : Error {
    using Error::Error;
};

struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;
    const Value *find(const std::string &name) const {
        for (const Scope *s = this; s; s = s->parent.get())
            for (const auto &[k, v] : s->vars)
                if (k == name) return &v;
        return nullptr;
    }
    void set(const std::string &name, Value v) {
        for (auto &[k, x] : vars)
            if (k == name) {
                x = std::move(v);
                return;
            }
        vars.emplace_back(name, std::move(v));
    }
};

enum class Flow { Normal, Break, Continue };

struct Renderer {
    explicit Renderer(const Program &p) : prog(p) {}
    const Program &prog;
    std::time_t now = 0;
    std::vector<std::pair<size_t, size_t>> *generation = nullptr;
    std::string *top = nullptr; // the output as transformers' generator has yielded it so far
    int line = 0;
    int depth = 0;
    int64_t steps = 0;
    std::shared_ptr<Scope> scope;
    // Scopes a macro closes over; cleared after rendering, which breaks the macro <-> scope reference cycles.
    std::vector<std::shared_ptr<Scope>> closures;
    // Namespaces made while rendering, emptied afterwards: one can hold itself (`set ns.me = ns`).
    std::vector<std::shared_ptr<DictData>> namespaces;

    Value eval(const Expr &e);
    Flow exec(const Body &body, std::string &out);
    Value call(const Value &fn, CallArgs &args);
    Value getattr(const Value &obj, const std::string &name);
    Value getitem(const Value &obj, const Value &key);
    // Python's iteration: a list's items, a dict's keys, a string's characters; an Undefined is empty.
    std::vector<Value> iterate(const Value &v);
    [[noreturn]] void raise_undefined(const Value &v) { fail("{}", v.s); }
    // One unit of work against kMaxSteps.
    void step() {
        if (++steps > kMaxSteps) fail("the template ran past {} steps", kMaxSteps);
    }

  private:
    void exec_stmt(const Stmt &s, std::string &out, Flow &flow);
    void exec_scoped(const Body &body, std::string &out);
    Flow exec_for(const Stmt &s, std::string &out, const Value *iterable = nullptr, int level = 1);
    void assign(const Expr &target, const Value &v);
    Value make_macro(const Stmt &s, const std::vector<std::string> &params, const std::vector<ExprP> &defaults,
                     const Body &body, const std::string &name);
    Value eval_filter(const Expr &e, const Value *operand);
    Value binary(const std::string &op, const Value &a, const Value &b);
    CallArgs eval_args(const Expr &e, size_t first);
};

// Builtins: filters (jinja_filters.cpp), tests (jinja_tests.cpp), methods and globals (jinja_methods.cpp), and
// Python's `in` (jinja_builtins.cpp).
Value call_filter(Renderer &r, const std::string &name, const Value &v, CallArgs &args);
bool call_test(Renderer &r, const std::string &name, const Value &v, CallArgs &args);
Value method(const Value &obj, const std::string &name); // a bound method, or Undefined when there is none
const Value *global(const std::string &name);
bool contains(const Value &container, const Value &item);

} // namespace zaya::jinja
