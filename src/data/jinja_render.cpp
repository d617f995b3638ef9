// Evaluation of a parsed template with jinja2's semantics: scoping (a for loop's iterations and macro calls are
// scopes of their own; if blocks are not), Undefined, Python operators, macros, call blocks, filter blocks and the
// {% generation %} spans transformers' AssistantTracker records.
//
// Not supported (jinja2 has them; chat templates do not use them): extends/block/include/import, the with, do and
// autoescape statements, *args/**kwargs in calls, loop.changed(), integers past 64 bits (an error here), \N{...}
// string escapes. range(), dict.items() and reversed iterators are plain lists here, so printing one directly
// differs from Python's repr.

#include "data/jinja.h"

#include "data/jinja_render.h"
#include "data/jinja_text.h"

#include <cmath>

namespace zaya::jinja {

namespace {

using EK = Expr::Kind;
using SK = Stmt::Kind;
using VK = Value::Kind;

constexpr int kMaxDepth = 200; // nested macro calls

std::string attr_message(const Value &obj, const Value &key) {
    if (key.is_string()) return fmt::format("{} has no attribute {}", type_repr(obj), repr(key));
    return fmt::format("{} has no element {}", type_repr(obj), repr(key));
}

// a op b on int64, failing where Python would go past 64 bits.
template <class Op> int64_t checked(int64_t a, int64_t b, Op op) {
    int64_t r = 0;
    if (op(a, b, &r)) fail("integer overflow (integers past 64 bits are not supported)");
    return r;
}
bool add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }
bool sub_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_sub_overflow(a, b, r); }
bool mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }

int64_t floor_div(int64_t a, int64_t b) {
    if (b == 0) fail("integer division or modulo by zero");
    if (b == -1) return checked(int64_t(0), a, sub_ovf); // INT64_MIN / -1 traps
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

Value repeat(const Value &seq, int64_t n) {
    const size_t unit = seq.is_string() ? seq.s.size() : seq.list->size();
    if (n <= 0 || unit == 0) return seq.is_string() ? Value::string("") : Value::make_list({}, seq.kind == VK::Tuple);
    if (uint64_t(n) > kMaxBytes / unit) fail("a string or list passed {} bytes", kMaxBytes);
    if (!seq.is_string()) check_items(unit * size_t(n));
    if (seq.is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return Value::string(out);
    }
    std::vector<Value> out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
    return Value::make_list(std::move(out), seq.kind == VK::Tuple);
}

} // namespace

std::vector<Value> Renderer::iterate(const Value &v) {
    switch (v.kind) {
    case VK::Undefined: return {};
    case VK::List:
    case VK::Tuple: return *v.list;
    case VK::Dict: {
        std::vector<Value> keys;
        for (const auto &kv : v.dict->items) keys.push_back(kv.first);
        return keys;
    }
    case VK::String: {
        const std::vector<uint32_t> cps = code_points(v.s);
        check_items(cps.size());
        std::vector<Value> chars;
        for (uint32_t cp : cps) {
            std::string c;
            append_utf8(c, cp);
            chars.push_back(Value::string(std::move(c)));
        }
        return chars;
    }
    default: fail("'{}' object is not iterable", type_name(v));
    }
}

Value Renderer::getattr(const Value &obj, const std::string &name) {
    if (obj.is_undefined()) raise_undefined(obj);
    const Value key = Value::string(name);
    // The sandbox hides underscore attributes.
    if (name.starts_with("_")) return Value::undefined(attr_message(obj, key));
    if (obj.kind == VK::Namespace || (obj.kind == VK::Dict && obj.fn)) {
        if (const Value *v = obj.dict->find(name)) return *v;
        return Value::undefined(attr_message(obj, key));
    }
    Value m = method(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.kind == VK::Dict)
        if (const Value *v = obj.dict->find(name)) return *v;
    return Value::undefined(attr_message(obj, key));
}

Value Renderer::getitem(const Value &obj, const Value &key) {
    if (obj.is_undefined()) raise_undefined(obj);
    switch (obj.kind) {
    case VK::Dict:
        if (const Value *v = obj.dict->find(key)) return *v;
        break;
    case VK::List:
    case VK::Tuple:
    case VK::String:
        if (key.is_int()) {
            const bool s = obj.is_string();
            std::vector<uint32_t> cps;
            if (s) cps = code_points(obj.s);
            const auto n = int64_t(s ? cps.size() : obj.list->size());
            int64_t k = key.as_int();
            if (k < 0) k += n;
            if (k >= 0 && k < n) {
                if (!s) return (*obj.list)[size_t(k)];
                return Value::string(from_code_points(cps, size_t(k), size_t(k) + 1));
            }
        }
        break;
    default: break;
    }
    if (key.is_string()) return getattr(obj, key.s);
    return Value::undefined(attr_message(obj, key));
}

Value Renderer::call(const Value &fn, CallArgs &args) {
    if (fn.is_undefined()) raise_undefined(fn);
    if (!fn.fn) fail("'{}' object is not callable", type_name(fn));
    if (fn.fn->unsafe) fail("access to attribute '{}' is unsafe (the sandbox forbids mutating methods)", fn.fn->name);
    step();
    return fn.fn->fn(*this, args);
}

CallArgs Renderer::eval_args(const Expr &e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
    for (const auto &[name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x));
    return a;
}

Value Renderer::eval_filter(const Expr &e, const Value *operand) {
    Value v;
    if (e.args[0]) v = e.args[0]->kind == EK::Filter ? eval_filter(*e.args[0], operand) : eval(*e.args[0]);
    else v = operand ? *operand : Value();
    CallArgs a = eval_args(e, 1);
    line = e.line;
    return call_filter(*this, e.name, v, a);
}

Value Renderer::binary(const std::string &op, const Value &a, const Value &b) {
    if (op == "~") {
        std::string s = str(a) + str(b);
        check_bytes(s.size());
        return Value::string(std::move(s));
    }
    // str % x formats without touching x's operators (an Undefined prints as "").
    if (op == "%" && a.is_string()) return Value::string(percent_format(a.s, b));
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    const bool ints = a.is_int() && b.is_int(), nums = a.is_number() && b.is_number();
    if (op == "+") {
        if (ints) return Value::integer(checked(a.as_int(), b.as_int(), add_ovf));
        if (nums) return Value::real(a.as_double() + b.as_double());
        if (a.is_string() && b.is_string()) {
            check_bytes(a.s.size() + b.s.size());
            return Value::string(a.s + b.s);
        }
        if (a.is_sequence() && a.kind == b.kind) {
            check_items(a.list->size() + b.list->size());
            std::vector<Value> out = *a.list;
            out.insert(out.end(), b.list->begin(), b.list->end());
            return Value::make_list(std::move(out), a.kind == VK::Tuple);
        }
    } else if (op == "-") {
        if (ints) return Value::integer(checked(a.as_int(), b.as_int(), sub_ovf));
        if (nums) return Value::real(a.as_double() - b.as_double());
    } else if (op == "*") {
        if (ints) return Value::integer(checked(a.as_int(), b.as_int(), mul_ovf));
        if (nums) return Value::real(a.as_double() * b.as_double());
        if ((a.is_string() || a.is_sequence()) && b.is_int()) return repeat(a, b.as_int());
        if ((b.is_string() || b.is_sequence()) && a.is_int()) return repeat(b, a.as_int());
    } else if (op == "/") {
        if (nums) {
            if (b.as_double() == 0) fail("division by zero");
            return Value::real(a.as_double() / b.as_double());
        }
    } else if (op == "//") {
        if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
        if (nums) {
            // CPython's float floor division: from fmod, so 1 // 0.1 is 9.0.
            const double x = a.as_double(), y = b.as_double();
            if (y == 0) fail("float floor division by zero");
            const double mod = std::fmod(x, y);
            double div = (x - mod) / y;
            if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
            if (div == 0) return Value::real(std::copysign(0.0, x / y));
            double fl = std::floor(div);
            if (div - fl > 0.5) fl += 1.0;
            return Value::real(fl);
        }
    } else if (op == "%") {
        if (ints && b.as_int() == -1) return Value::integer(0); // floor_div(INT64_MIN, -1) would overflow
        if (ints) return Value::integer(a.as_int() - floor_div(a.as_int(), b.as_int()) * b.as_int());
        if (nums) {
            const double x = a.as_double(), y = b.as_double();
            if (y == 0) fail("float modulo");
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            if (m == 0) m = std::copysign(0.0, y);
            return Value::real(m);
        }
    } else if (op == "**") {
        if (ints && b.as_int() >= 0) {
            int64_t acc = 1;
            for (int64_t k = 0; k < b.as_int(); ++k) {
                acc = checked(acc, a.as_int(), mul_ovf);
                if (acc == 0 || acc == 1) break;
            }
            return Value::integer(acc);
        }
        if (nums) return Value::real(std::pow(a.as_double(), b.as_double()));
    }
    fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

Value Renderer::eval(const Expr &e) {
    line = e.line;
    step();
    switch (e.kind) {
    case EK::Const: return e.value;
    case EK::Name: {
        if (const Value *v = scope->find(e.name)) return *v;
        if (const Value *g = global(e.name)) return *g;
        return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case EK::List:
    case EK::Tuple: {
        std::vector<Value> items;
        for (const auto &x : e.args) items.push_back(eval(*x));
        return Value::make_list(std::move(items), e.kind == EK::Tuple);
    }
    case EK::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
            Value key = eval(*e.args[k]);
            d.dict->set(key, eval(*e.args[k + 1]));
        }
        return d;
    }
    case EK::Getattr: {
        Value obj = eval(*e.args[0]);
        line = e.line;
        return getattr(obj, e.name);
    }
    case EK::Getitem: {
        Value obj = eval(*e.args[0]);
        Value key = eval(*e.args[1]);
        line = e.line;
        return getitem(obj, key);
    }
    case EK::Slice: {
        // A slice among a tuple subscript's items (x[1, :]) has no object; Python fails on that subscript anyway.
        if (!e.args[0]) fail("a slice can only be the whole subscript (x[a:b]), not part of a tuple subscript");
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) raise_undefined(obj);
        int64_t bound[3] = {0, 0, 1};
        bool given[3] = {false, false, false};
        for (int k = 0; k < 3; ++k)
            if (e.args[size_t(k) + 1]) {
                Value b = eval(*e.args[size_t(k) + 1]);
                if (b.is_none()) continue;
                if (!b.is_int()) fail("slice indices must be integers or None");
                bound[k] = b.as_int();
                given[k] = true;
            }
        const int64_t step = bound[2];
        if (step == 0) fail("slice step cannot be zero");
        std::vector<uint32_t> cps;
        const bool s = obj.is_string();
        if (s) cps = code_points(obj.s);
        else if (!obj.is_sequence()) fail("'{}' object is not subscriptable", type_name(obj));
        const auto n = int64_t(s ? cps.size() : obj.list->size());
        // Python's slice.indices().
        const auto fix = [&](int64_t x, bool has, int64_t def) {
            if (!has) return def;
            if (x < 0) x += n;
            if (step > 0) return std::clamp<int64_t>(x, 0, n);
            return std::clamp<int64_t>(x, -1, n - 1);
        };
        const int64_t start = fix(bound[0], given[0], step > 0 ? 0 : n - 1);
        const int64_t stop = fix(bound[1], given[1], step > 0 ? n : -1);
        std::vector<Value> items;
        std::string text;
        for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
            if (s) append_utf8(text, cps[size_t(k)]);
            else items.push_back((*obj.list)[size_t(k)]);
            if (__builtin_add_overflow(k, step, &k)) break; // past int64 is past the end too
        }
        if (s) return Value::string(std::move(text));
        return Value::make_list(std::move(items), obj.kind == VK::Tuple);
    }
    case EK::Call: {
        Value fn = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        line = e.line;
        return call(fn, a);
    }
    case EK::Filter: return eval_filter(e, nullptr);
    case EK::Test: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        line = e.line;
        return Value::boolean(call_test(*this, e.name, v, a));
    }
    case EK::Neg:
    case EK::Pos: {
        Value v = eval(*e.args[0]);
        if (v.is_undefined()) raise_undefined(v);
        if (!v.is_number()) fail("bad operand type for unary {}: '{}'", e.kind == EK::Neg ? '-' : '+', type_name(v));
        if (e.kind == EK::Pos) return v.kind == VK::Bool ? Value::integer(v.as_int()) : v;
        if (v.kind == VK::Float) return Value::real(-v.f);
        return Value::integer(checked(int64_t(0), v.as_int(), sub_ovf));
    }
    case EK::Not: return Value::boolean(!truthy(eval(*e.args[0])));
    case EK::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
    }
    case EK::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
    }
    case EK::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        line = e.line;
        return binary(e.name, a, b);
    }
    case EK::Compare: {
        Value a = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
            Value b = eval(*e.args[k + 1]);
            line = e.line;
            const std::string &op = e.ops[k];
            bool ok;
            if (op == "==") ok = equal(a, b);
            else if (op == "!=") ok = !equal(a, b);
            else if (op == "in") ok = contains(b, a);
            else if (op == "notin") ok = !contains(b, a);
            else {
                if (a.is_undefined()) raise_undefined(a);
                if (b.is_undefined()) raise_undefined(b);
                const int c = compare(a, b);
                ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
            }
            if (!ok) return Value::boolean(false);
            a = std::move(b);
        }
        return Value::boolean(true);
    }
    case EK::CondExpr: {
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
    }
    case EK::NsRef: break;
    }
    fail("cannot evaluate this expression");
}

void Renderer::assign(const Expr &target, const Value &v) {
    if (target.kind == EK::Name) {
        scope->set(target.name, v);
    } else if (target.kind == EK::NsRef) {
        const Value *ns = scope->find(target.name);
        if (!ns) ns = global(target.name);
        if (!ns || ns->kind != VK::Namespace) fail("cannot assign attribute on non-namespace object");
        if (target.attr.starts_with("_"))
            fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'.",
                 target.attr);
        check_depth(v);
        ns->dict->set(Value::string(target.attr), v);
    } else {
        std::vector<Value> items = iterate(v);
        if (items.size() > target.args.size())
            fail("too many values to unpack (expected {})", target.args.size());
        if (items.size() < target.args.size())
            fail("not enough values to unpack (expected {}, got {})", target.args.size(), items.size());
        for (size_t k = 0; k < items.size(); ++k) scope->set(target.args[k]->name, items[k]);
    }
}

Value Renderer::make_macro(const Stmt &s, const std::vector<std::string> &params, const std::vector<ExprP> &defaults,
                           const Body &body, const std::string &name) {
    std::shared_ptr<Scope> closure = scope;
    closures.push_back(closure);
    const Stmt *def = &s;
    auto fn = [def, closure, &params, &defaults, &body, name](Renderer &r, CallArgs &a) -> Value {
        if (++r.depth > kMaxDepth) fail("macro '{}': recursion deeper than {} calls", name, kMaxDepth);
        auto frame = std::make_shared<Scope>();
        frame->parent = closure;
        const size_t first_default = params.size() - defaults.size();
        std::vector<Value> extra;
        if (a.pos.size() > params.size() && !def->uses_varargs)
            fail("macro '{}' takes not more than {} argument(s)", name, params.size());
        for (size_t k = 0; k < a.pos.size(); ++k) {
            if (k < params.size()) frame->set(params[k], a.pos[k]);
            else extra.push_back(a.pos[k]);
        }
        Value kwargs = Value::make_dict();
        Value caller;
        for (auto &[k, v] : a.kw) {
            const auto it = std::find(params.begin(), params.end(), k);
            if (it != params.end()) {
                if (size_t(it - params.begin()) < a.pos.size())
                    fail("macro '{}' got multiple values for argument '{}'", name, k);
                frame->set(k, v);
            } else if (k == "caller" && def->uses_caller) {
                caller = v;
            } else if (def->uses_kwargs) {
                kwargs.dict->set(Value::string(k), v);
            } else {
                fail("macro '{}' takes no keyword argument '{}'", name, k);
            }
        }
        std::swap(r.scope, frame);
        for (size_t k = a.pos.size(); k < params.size(); ++k) {
            bool given = false;
            for (const auto &kv : a.kw) given = given || kv.first == params[k];
            if (given) continue;
            if (k >= first_default) r.scope->set(params[k], r.eval(*defaults[k - first_default]));
            else r.scope->set(params[k], Value::undefined(fmt::format("parameter '{}' was not provided", params[k])));
        }
        r.scope->set("varargs", Value::make_list(std::move(extra), true));
        r.scope->set("kwargs", kwargs);
        if (!caller.is_undefined() || def->kind == SK::Macro) r.scope->set("caller", caller);
        std::string out;
        try {
            r.exec(body, out);
        } catch (...) {
            std::swap(r.scope, frame);
            --r.depth;
            throw;
        }
        std::swap(r.scope, frame);
        --r.depth;
        return Value::string(std::move(out));
    };
    return Value::callable(name, fn);
}

Flow Renderer::exec_for(const Stmt &s, std::string &out, const Value *iterable, int level) {
    const Expr &target = *s.exprs[0];
    std::vector<Value> items = iterate(iterable ? *iterable : eval(*s.exprs[1]));
    const std::shared_ptr<Scope> outer = scope;
    const auto enter = [&]() {
        scope = std::make_shared<Scope>();
        scope->parent = outer;
    };
    if (s.exprs[2]) {
        std::vector<Value> kept;
        for (const Value &v : items) {
            enter();
            assign(target, v);
            if (truthy(eval(*s.exprs[2]))) kept.push_back(v);
        }
        items = std::move(kept);
        scope = outer;
    }
    struct Restore {
        std::shared_ptr<Scope> &s;
        std::shared_ptr<Scope> v;
        ~Restore() { s = v; }
    } restore{scope, outer};
    if (items.empty()) {
        enter();
        exec(s.bodies[1], out);
        return Flow::Normal;
    }
    const auto n = int64_t(items.size());
    for (int64_t k = 0; k < n; ++k) {
        // An empty body counts too. The loop variable (a dict of 12 entries) costs about what 16 expressions do, so
        // that the budget bounds time rather than a count.
        steps += 15;
        step();
        enter();
        Value loop = Value::make_dict();
        auto &d = *loop.dict;
        const auto put = [&](const char *key, Value v) { d.items.emplace_back(Value::string(key), std::move(v)); };
        put("index", Value::integer(k + 1));
        put("index0", Value::integer(k));
        put("revindex", Value::integer(n - k));
        put("revindex0", Value::integer(n - k - 1));
        put("first", Value::boolean(k == 0));
        put("last", Value::boolean(k == n - 1));
        put("length", Value::integer(n));
        put("depth", Value::integer(level));
        put("depth0", Value::integer(level - 1));
        if (k > 0) put("previtem", items[size_t(k - 1)]);
        if (k + 1 < n) put("nextitem", items[size_t(k + 1)]);
        put("cycle", Value::callable("cycle", [k](Renderer &, CallArgs &a) -> Value {
                if (a.pos.empty()) fail("no items for cycling given");
                return a.pos[size_t(k) % a.pos.size()];
            }));
        // loop(...) of a recursive loop renders its body again over another iterable, one level deeper.
        if (s.recursive) {
            const Stmt *self = &s;
            loop.fn = std::make_shared<Callable>(Callable{"loop", [self, level](Renderer &r, CallArgs &a) -> Value {
                if (a.pos.size() != 1) fail("loop() takes exactly one argument");
                if (++r.depth > kMaxDepth) fail("recursive loop deeper than {} levels", kMaxDepth);
                std::string sub;
                r.exec_for(*self, sub, &a.pos[0], level + 1);
                --r.depth;
                return Value::string(std::move(sub));
            }});
        }
        scope->set("loop", loop);
        assign(target, items[size_t(k)]);
        const Flow f = exec(s.bodies[0], out);
        if (f == Flow::Break) break;
    }
    return Flow::Normal;
}

void Renderer::exec_stmt(const Stmt &s, std::string &out, Flow &flow) {
    line = s.line;
    step();
    switch (s.kind) {
    case SK::Text: out += s.text; return;
    case SK::Output: out += str(eval(*s.exprs[0])); return;
    case SK::If:
        for (size_t k = 0; k < s.exprs.size(); ++k)
            if (truthy(eval(*s.exprs[k]))) {
                flow = exec(s.bodies[k], out);
                return;
            }
        if (s.bodies.size() > s.exprs.size()) flow = exec(s.bodies.back(), out);
        return;
    case SK::For: exec_for(s, out); return;
    case SK::Set: {
        Value v = eval(*s.exprs[1]);
        line = s.line;
        assign(*s.exprs[0], v);
        return;
    }
    case SK::SetBlock: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        Value v = Value::string(std::move(body));
        if (s.exprs[1]) v = eval_filter(*s.exprs[1], &v);
        assign(*s.exprs[0], v);
        return;
    }
    case SK::Macro: scope->set(s.text, make_macro(s, s.params, s.defaults, s.bodies[0], s.text)); return;
    case SK::CallBlock: {
        const Expr &c = *s.exprs[0];
        Value fn = eval(*c.args[0]);
        CallArgs a = eval_args(c, 1);
        a.kw.emplace_back("caller", make_macro(s, s.params, s.defaults, s.bodies[0], "caller"));
        line = s.line;
        out += str(call(fn, a));
        return;
    }
    case SK::FilterBlock: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        const Value v = Value::string(std::move(body));
        out += str(eval_filter(*s.exprs[0], &v));
        return;
    }
    case SK::Generation: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        if (generation && top) {
            const size_t start = top->size();
            generation->emplace_back(start, start + body.size());
        }
        out += body;
        return;
    }
    case SK::Break: flow = Flow::Break; return;
    case SK::Continue: flow = Flow::Continue; return;
    }
}

// Set, filter and generation blocks render their body in a scope of its own, as jinja2 does (an inner frame; the
// generation tag's body is a caller macro).
void Renderer::exec_scoped(const Body &body, std::string &out) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    std::swap(scope, inner);
    try {
        exec(body, out);
    } catch (...) {
        std::swap(scope, inner);
        throw;
    }
    std::swap(scope, inner);
}

Flow Renderer::exec(const Body &body, std::string &out) {
    for (const auto &s : body) {
        Flow flow = Flow::Normal;
        exec_stmt(*s, out, flow);
        if (out.size() > kMaxBytes) fail("the output passed {} bytes", kMaxBytes);
        if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
}

Template::Template(std::string_view source, std::string name) {
    auto prog = std::make_shared<Program>();
    prog->name = std::move(name);
    parse(lex(source, prog->name), *prog);
    program_ = std::move(prog);
}

std::string Template::render(const nlohmann::ordered_json &context, std::vector<std::pair<size_t, size_t>> *generation,
                             std::time_t now) const {
    if (!context.is_object() && !context.is_null()) fail("{}: the context must be a JSON object", program_->name);
    Renderer r(*program_);
    r.now = now;
    r.generation = generation;
    r.scope = std::make_shared<Scope>();
    if (context.is_object())
        for (const auto &[k, v] : context.items()) r.scope->vars.emplace_back(k, Value::from_json(v));
    std::string out;
    r.top = &out;
    if (generation) generation->clear();
    struct Cleanup {
        Renderer &r;
        ~Cleanup() {
            for (auto &s : r.closures) s->vars.clear();
            for (auto &d : r.namespaces) d->items.clear();
        }
    } cleanup{r};
    try {
        r.exec(program_->body, out);
    } catch (const LocatedError &) {
        throw;
    } catch (const Error &e) {
        throw Error(fmt::format("{}:{}: {}", program_->name, r.line, e.what()));
    }
    return out;
}

} // namespace zaya::jinja
