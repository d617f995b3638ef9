// The Python methods the sandbox lets templates call on str, dict and list, and the globals transformers'
// environment defines (range, dict, namespace, raise_exception, strftime_now).
#include "core/utf8.h"
#include "data/jinja_builtins.h"
#include "data/jinja_case.h"
#include "data/jinja_render.h"
#include "data/jinja_text.h"

#include <algorithm>
#include <map>

namespace zaya::jinja {

namespace {

int64_t cp_index(const std::string &s, size_t byte) { return utf8_characters(s.substr(0, byte)); }

Value bound(const std::string &name, std::function<Value(Renderer &, CallArgs &)> fn, bool unsafe = false) {
    return Value::callable(name, std::move(fn), unsafe);
}

// The substring range [start, end) of Python's optional start/end arguments, as byte offsets.
std::pair<size_t, size_t> byte_range(const std::string &s, CallArgs &a, size_t first) {
    const std::vector<uint32_t> cps = code_points(s);
    const auto n = int64_t(cps.size());
    const auto fix = [&](const Value *v, int64_t def) {
        if (!v || v->is_none()) return def;
        int64_t x = v->as_int();
        if (x < 0) x += n;
        return std::clamp<int64_t>(x, 0, n);
    };
    const int64_t b = fix(arg_at(a, first, "start"), 0), e = fix(arg_at(a, first + 1, "end"), n);
    const size_t bb = from_code_points(cps, 0, size_t(b)).size();
    const size_t eb = e <= b ? bb : bb + from_code_points(cps, size_t(b), size_t(e)).size();
    return {bb, eb};
}

Value string_method(const Value &obj, const std::string &name) {
    const std::string s = obj.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            return Value::string(strip(s, arg_at(a, 0, "chars"), name != "rstrip", name != "lstrip"));
        });
    if (name == "split" || name == "rsplit")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            return str_list(split(s, arg_at(a, 0, "sep"), arg(a, 1, "maxsplit", Value::integer(-1)).as_int(),
                                  name == "rsplit"));
        });
    if (name == "startswith" || name == "endswith")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            const Value p = arg(a, 0, "prefix", Value());
            const auto [b, e] = byte_range(s, a, 1);
            const std::string_view sub(s.data() + b, e - b);
            std::vector<Value> cands = p.is_sequence() ? *p.list : std::vector<Value>{p};
            for (const Value &c : cands) {
                const std::string &x = need_str(c, name.c_str());
                if (name == "startswith" ? sub.starts_with(x) : sub.ends_with(x)) return Value::boolean(true);
            }
            return Value::boolean(false);
        });
    if (name == "upper") return bound(name, [s](Renderer &, CallArgs &) { return Value::string(upper(s)); });
    if (name == "lower") return bound(name, [s](Renderer &, CallArgs &) { return Value::string(lower(s)); });
    if (name == "title") return bound(name, [s](Renderer &, CallArgs &) { return Value::string(py_title(s)); });
    if (name == "capitalize")
        return bound(name, [s](Renderer &, CallArgs &) { return Value::string(capitalize(s)); });
    if (name == "replace")
        return bound(name, [s](Renderer &, CallArgs &a) {
            return Value::string(replace(s, need_str(arg(a, 0, "old", Value()), "old"),
                                         need_str(arg(a, 1, "new", Value()), "new"),
                                         arg(a, 2, "count", Value::integer(-1)).as_int()));
        });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            const std::string &sub = need_str(arg(a, 0, "sub", Value()), "substring");
            const auto [b, e] = byte_range(s, a, 1);
            const std::string hay = s.substr(b, e - b);
            if (name == "count") {
                if (sub.empty()) return Value::integer(utf8_characters(hay) + 1);
                int64_t n = 0;
                for (size_t p = hay.find(sub); p != std::string::npos; p = hay.find(sub, p + sub.size())) ++n;
                return Value::integer(n);
            }
            const size_t f = name == "find" || name == "index" ? hay.find(sub) : hay.rfind(sub);
            if (f == std::string::npos) {
                if (name == "index" || name == "rindex") fail("substring not found");
                return Value::integer(-1);
            }
            return Value::integer(cp_index(s, b + f));
        });
    if (name == "join")
        return bound(name, [s](Renderer &r, CallArgs &a) {
            std::string out;
            bool first = true;
            for (const Value &x : r.iterate(arg(a, 0, "iterable", Value()))) {
                if (!first) out += s;
                first = false;
                out += need_str(x, "sequence item");
            }
            return Value::string(out);
        });
    if (name == "splitlines")
        return bound(name, [s](Renderer &, CallArgs &a) { return str_list(splitlines(s, flag(a, 0, "keepends"))); });
    if (name == "removeprefix" || name == "removesuffix")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            const std::string &x = need_str(arg(a, 0, "prefix", Value()), name.c_str());
            if (name == "removeprefix") return Value::string(s.starts_with(x) ? s.substr(x.size()) : s);
            return Value::string(s.ends_with(x) ? s.substr(0, s.size() - x.size()) : s);
        });
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
        name == "isupper")
        return bound(name, [s, name](Renderer &, CallArgs &) {
            if (name == "islower" || name == "isupper") return Value::boolean(is_case(s, name == "islower"));
            if (s.empty()) return Value::boolean(false);
            for (uint32_t c : code_points(s)) {
                const bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                                : name == "isalpha" ? (c < 0x80 ? is_alpha(char(c)) : !py_space(c))
                                : name == "isalnum" ? (c < 0x80 ? is_alpha(char(c)) || is_digit(char(c)) : !py_space(c))
                                                    : py_space(c);
                if (!ok) return Value::boolean(false);
            }
            return Value::boolean(true);
        });
    if (name == "format")
        return bound(name, [s](Renderer &r, CallArgs &a) { return Value::string(brace_format(r, s, a)); });
    if (name == "center" || name == "ljust" || name == "rjust")
        return bound(name, [s, name](Renderer &, CallArgs &a) {
            const int64_t width = arg(a, 0, "width", Value::integer(0)).as_int(), n = utf8_characters(s);
            const std::string fill = str(arg(a, 1, "fillchar", Value::string(" ")));
            if (width <= n) return Value::string(s);
            const int64_t marg = width - n;
            check_bytes(size_t(marg) * std::max<size_t>(1, fill.size()) + s.size());
            const int64_t left = name == "ljust" ? 0 : name == "rjust" ? marg : marg / 2 + (marg & width & 1);
            std::string out;
            for (int64_t k = 0; k < left; ++k) out += fill;
            out += s;
            for (int64_t k = left; k < marg; ++k) out += fill;
            return Value::string(out);
        });
    return Value();
}

Value dict_method(const Value &obj, const std::string &name) {
    const auto d = obj.dict;
    if (name == "items")
        return bound(name, [d](Renderer &, CallArgs &) {
            std::vector<Value> out;
            for (const auto &[k, v] : d->items) out.push_back(Value::make_list({k, v}, true));
            return Value::make_list(std::move(out));
        });
    if (name == "keys" || name == "values")
        return bound(name, [d, name](Renderer &, CallArgs &) {
            std::vector<Value> out;
            for (const auto &[k, v] : d->items) out.push_back(name == "keys" ? k : v);
            return Value::make_list(std::move(out));
        });
    if (name == "get")
        return bound(name, [d](Renderer &, CallArgs &a) {
            const Value key = arg(a, 0, "key", Value());
            if (const Value *v = d->find(key)) return *v;
            return arg(a, 1, "default", Value::none());
        });
    if (name == "copy")
        return bound(name, [d](Renderer &, CallArgs &) {
            Value c = Value::make_dict();
            c.dict->items = d->items;
            return c;
        });
    if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
        return bound(name, nullptr, true);
    return Value();
}

Value list_method(const Value &obj, const std::string &name) {
    const auto l = obj.list;
    if (name == "index" || name == "count")
        return bound(name, [l, name](Renderer &, CallArgs &a) {
            const Value x = arg(a, 0, "value", Value());
            int64_t n = 0;
            for (size_t k = 0; k < l->size(); ++k)
                if (equal((*l)[k], x)) {
                    if (name == "index") return Value::integer(int64_t(k));
                    ++n;
                }
            if (name == "index") fail("{} is not in list", repr(x));
            return Value::integer(n);
        });
    if (obj.kind == VK::List && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                 name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
        return bound(name, nullptr, true);
    return Value();
}

// --- globals ---

Value g_range(Renderer &, CallArgs &a) {
    if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments, got {}", a.pos.size());
    for (const Value &v : a.pos)
        if (!v.is_int()) fail("'{}' object cannot be interpreted as an integer", type_name(v));
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
        stop = a.pos[0].as_int();
    } else {
        start = a.pos[0].as_int();
        stop = a.pos[1].as_int();
        if (a.pos.size() == 3) step = a.pos[2].as_int();
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
        if (out.size() >= 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        out.push_back(Value::integer(k));
        if (__builtin_add_overflow(k, step, &k)) break; // past the int64 range is past stop too
    }
    return Value::make_list(std::move(out));
}

// dict(...) and namespace(...): a mapping or pairs, then keyword arguments.
Value build_mapping(Renderer &r, CallArgs &a, bool ns) {
    Value d = Value::make_dict(ns);
    if (a.pos.size() > 1) fail("expected at most 1 argument, got {}", a.pos.size());
    if (!a.pos.empty()) {
        const Value &src = a.pos[0];
        if (src.kind == VK::Dict || src.kind == VK::Namespace) {
            d.dict->items = src.dict->items;
        } else {
            for (const Value &pair : r.iterate(src)) {
                const std::vector<Value> kv = r.iterate(pair);
                if (kv.size() != 2) fail("dictionary update sequence element has length {}; 2 is required", kv.size());
                d.dict->set(kv[0], kv[1]);
            }
        }
    }
    for (const auto &[k, v] : a.kw) d.dict->set(Value::string(k), v);
    if (ns) r.namespaces.push_back(d.dict);
    if (ns)
        for (const auto &kv : d.dict->items)
            if (kv.first.is_string() && kv.first.s.starts_with("_"))
                fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got {}.",
                     repr(kv.first));
    return d;
}

Value g_raise(Renderer &r, CallArgs &a) {
    const std::string msg = a.pos.empty() ? "" : str(a.pos[0]);
    throw LocatedError(fmt::format("{}: raise_exception: {}", r.prog.name, msg));
}

Value g_strftime(Renderer &r, CallArgs &a) {
    const std::string format = need_str(arg(a, 0, "format", Value()), "format");
    std::tm tm{};
    localtime_r(&r.now, &tm);
    std::string buf(256 + format.size() * 8, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    buf.resize(n);
    return Value::string(buf);
}

const std::map<std::string, Value> &globals() {
    static const std::map<std::string, Value> table = {
        {"range", Value::callable("range", g_range)},
        {"dict", Value::callable("dict", [](Renderer &r, CallArgs &a) { return build_mapping(r, a, false); })},
        {"namespace", Value::callable("namespace", [](Renderer &r, CallArgs &a) { return build_mapping(r, a, true); })},
        {"raise_exception", Value::callable("raise_exception", g_raise)},
        {"strftime_now", Value::callable("strftime_now", g_strftime)},
    };
    return table;
}

} // namespace

Value method(const Value &obj, const std::string &name) {
    switch (obj.kind) {
    case VK::String: return string_method(obj, name);
    case VK::Dict: return dict_method(obj, name);
    case VK::List:
    case VK::Tuple: return list_method(obj, name);
    default: return Value();
    }
}

const Value *global(const std::string &name) {
    const auto it = globals().find(name);
    return it == globals().end() ? nullptr : &it->second;
}

} // namespace zaya::jinja
