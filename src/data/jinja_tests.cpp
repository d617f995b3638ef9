// jinja2's tests (`value is name(args)`).
#include "data/jinja_builtins.h"
#include "data/jinja_render.h"
#include "data/jinja_text.h"

#include <cmath>
#include <map>

namespace zaya::jinja {

namespace {

using TestFn = bool (*)(Renderer &, const Value &, CallArgs &);

bool t_defined(Renderer &, const Value &v, CallArgs &) { return !v.is_undefined(); }
bool t_undefined(Renderer &, const Value &v, CallArgs &) { return v.is_undefined(); }
bool t_none(Renderer &, const Value &v, CallArgs &) { return v.is_none(); }
bool t_boolean(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Bool; }
bool t_false(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Bool && !v.b; }
bool t_true(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Bool && v.b; }
bool t_integer(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Int; }
bool t_float(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Float; }
bool t_number(Renderer &, const Value &v, CallArgs &) { return v.is_number(); }
bool t_string(Renderer &, const Value &v, CallArgs &) { return v.is_string(); }
bool t_mapping(Renderer &, const Value &v, CallArgs &) { return v.kind == VK::Dict; }
bool t_sequence(Renderer &, const Value &v, CallArgs &) {
    return v.is_string() || v.is_sequence() || v.kind == VK::Dict || v.is_undefined();
}
bool t_iterable(Renderer &, const Value &v, CallArgs &) {
    return v.is_string() || v.is_sequence() || v.kind == VK::Dict || v.is_undefined();
}
bool t_callable(Renderer &, const Value &v, CallArgs &) { return v.fn != nullptr; }
bool t_lower(Renderer &, const Value &v, CallArgs &) { return is_case(str(v), true); }
bool t_upper(Renderer &, const Value &v, CallArgs &) { return is_case(str(v), false); }
// Python's `value % n == r`, floats included.
bool mod_is(const Value &v, const Value &n, int64_t r) {
    if (!v.is_number() || !n.is_number())
        fail("unsupported operand type(s) for %: '{}' and '{}'", type_name(v), type_name(n));
    if (v.is_int() && n.is_int()) {
        if (n.as_int() == 0) fail("integer modulo by zero");
        int64_t m = v.as_int() % n.as_int();
        if (m != 0 && ((m < 0) != (n.as_int() < 0))) m += n.as_int();
        return m == r;
    }
    const double y = n.as_double();
    if (y == 0) fail("float modulo");
    double m = std::fmod(v.as_double(), y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return m == double(r);
}
bool t_odd(Renderer &, const Value &v, CallArgs &) { return mod_is(v, Value::integer(2), 1); }
bool t_even(Renderer &, const Value &v, CallArgs &) { return mod_is(v, Value::integer(2), 0); }
bool t_divisibleby(Renderer &, const Value &v, CallArgs &a) { return mod_is(v, arg(a, 0, "num", Value()), 0); }
Value other(CallArgs &a) {
    const Value *o = arg_at(a, 0, "other");
    if (!o) fail("test requires an argument");
    return *o;
}
bool t_eq(Renderer &, const Value &v, CallArgs &a) { return equal(v, other(a)); }
bool t_ne(Renderer &, const Value &v, CallArgs &a) { return !equal(v, other(a)); }
bool t_lt(Renderer &, const Value &v, CallArgs &a) { return compare(v, other(a)) < 0; }
bool t_le(Renderer &, const Value &v, CallArgs &a) { return compare(v, other(a)) <= 0; }
bool t_gt(Renderer &, const Value &v, CallArgs &a) { return compare(v, other(a)) > 0; }
bool t_ge(Renderer &, const Value &v, CallArgs &a) { return compare(v, other(a)) >= 0; }
bool t_in(Renderer &, const Value &v, CallArgs &a) { return contains(arg(a, 0, "seq", Value()), v); }
bool t_sameas(Renderer &, const Value &v, CallArgs &a) {
    // Python's `is`: identity for containers, equality of kind and value for singletons and small scalars.
    const Value o = other(a);
    if (v.kind != o.kind) return false;
    if (v.list || v.dict || v.fn) return v.list == o.list && v.dict == o.dict && v.fn == o.fn;
    return equal(v, o);
}
bool t_filter(Renderer &, const Value &v, CallArgs &) { return v.is_string() && has_filter(v.s); }
bool t_test(Renderer &, const Value &v, CallArgs &) { return v.is_string() && has_test(v.s); }
bool t_escaped(Renderer &, const Value &, CallArgs &) { return false; }

const std::map<std::string, TestFn> &tests() {
    static const std::map<std::string, TestFn> table = {
        {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
        {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
        {"even", t_even},       {"false", t_false},       {"filter", t_filter},     {"float", t_float},
        {"ge", t_ge},           {">=", t_ge},             {"gt", t_gt},             {">", t_gt},
        {"greaterthan", t_gt},  {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
        {"le", t_le},           {"<=", t_le},             {"lower", t_lower},       {"lt", t_lt},
        {"<", t_lt},            {"lessthan", t_lt},       {"mapping", t_mapping},   {"ne", t_ne},
        {"!=", t_ne},           {"none", t_none},         {"number", t_number},     {"odd", t_odd},
        {"sameas", t_sameas},   {"sequence", t_sequence}, {"string", t_string},     {"test", t_test},
        {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
    };
    return table;
}

} // namespace

bool has_test(const std::string &name) { return tests().count(name) != 0; }

bool call_test(Renderer &r, const std::string &name, const Value &v, CallArgs &args) {
    const auto it = tests().find(name);
    if (it == tests().end()) fail("No test named '{}'.", name);
    return it->second(r, v, args);
}

} // namespace zaya::jinja
