// jinja2's filters and tests, the Python methods the sandbox lets templates call on str, dict and list, and the
// globals transformers' environment defines (range, dict, namespace, raise_exception, strftime_now).
#include "data/jinja_render.h"

#include "core/utf8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace zaya::jinja {

namespace {

using VK = Value::Kind;
using FilterFn = Value (*)(Renderer &, const Value &, CallArgs &);
using TestFn = bool (*)(Renderer &, const Value &, CallArgs &);

// The argument at position `i` (after the operand) or keyword `kw`; null when neither is given.
const Value *arg_at(CallArgs &a, size_t i, const char *kw) {
    if (i < a.pos.size()) return &a.pos[i];
    for (const auto &[k, v] : a.kw)
        if (k == kw) return &v;
    return nullptr;
}
// `def` a bare Value(): the argument is required.
Value arg(CallArgs &a, size_t i, const char *kw, Value def) {
    const Value *v = arg_at(a, i, kw);
    if (!v && def.is_undefined() && def.s.empty()) fail("missing required argument '{}'", kw);
    return v ? *v : std::move(def);
}
bool flag(CallArgs &a, size_t i, const char *kw, bool def = false) {
    const Value *v = arg_at(a, i, kw);
    return v ? truthy(*v) : def;
}
std::string need_str(const Value &v, const char *what) {
    if (!v.is_string()) fail("{} must be a string, not '{}'", what, type_name(v));
    return v.s;
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's str.capitalize(): the first character upper (title) case, the rest lower.
std::string capitalize(const std::string &s) {
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    for (size_t k = 0; k < cps.size(); ++k) append_utf8(out, k ? to_lower(cps[k]) : to_upper(cps[k]));
    return out;
}

// Python's str.title(): the first cased character of each run upper, the rest lower.
std::string py_title(const std::string &s) {
    std::string out;
    bool prev_cased = false;
    for (uint32_t c : code_points(s)) {
        const bool cased = is_cased(c);
        append_utf8(out, cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c);
        prev_cased = cased;
    }
    return out;
}

// Python's str.strip family; `chars` null: whitespace.
std::string strip(const std::string &s, const Value *chars, bool left, bool right) {
    const std::vector<uint32_t> cps = code_points(s);
    std::vector<uint32_t> set;
    const bool ws = !chars || chars->is_none();
    if (!ws) set = code_points(need_str(*chars, "strip arg"));
    const auto drop = [&](uint32_t c) { return ws ? py_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && drop(cps[b])) ++b;
    if (right)
        while (e > b && drop(cps[e - 1])) --e;
    return from_code_points(cps, b, e);
}

std::string replace(const std::string &s, const std::string &old, const std::string &rep, int64_t count) {
    std::string out;
    if (old.empty()) {
        const std::vector<uint32_t> cps = code_points(s);
        int64_t n = 0;
        for (size_t k = 0; k <= cps.size(); ++k) {
            if (count < 0 || n < count) {
                out += rep;
                ++n;
            }
            if (k < cps.size()) append_utf8(out, cps[k]);
        }
        return out;
    }
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        const size_t f = s.find(old, pos);
        if (f == std::string::npos) break;
        out.append(s, pos, f - pos);
        out += rep;
        pos = f + old.size();
        ++n;
    }
    out.append(s, pos);
    return out;
}

// Python's str.split / rsplit.
std::vector<std::string> split(const std::string &s, const Value *sep_v, int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (!sep_v || sep_v->is_none()) {
        std::vector<uint32_t> cps = code_points(s);
        if (from_right) std::reverse(cps.begin(), cps.end());
        size_t k = 0;
        int64_t n = 0;
        while (true) {
            while (k < cps.size() && py_space(cps[k])) ++k;
            if (k >= cps.size()) break;
            if (maxsplit >= 0 && n >= maxsplit) {
                std::vector<uint32_t> rest(cps.begin() + long(k), cps.end());
                if (from_right) std::reverse(rest.begin(), rest.end());
                parts.push_back(from_code_points(rest, 0, rest.size()));
                break;
            }
            size_t e = k;
            while (e < cps.size() && !py_space(cps[e])) ++e;
            std::vector<uint32_t> word(cps.begin() + long(k), cps.begin() + long(e));
            if (from_right) std::reverse(word.begin(), word.end());
            parts.push_back(from_code_points(word, 0, word.size()));
            ++n;
            k = e;
        }
        if (from_right) std::reverse(parts.begin(), parts.end());
        return parts;
    }
    const std::string &sep = need_str(*sep_v, "separator");
    if (sep.empty()) fail("empty separator");
    if (!from_right) {
        size_t pos = 0;
        int64_t n = 0;
        while (maxsplit < 0 || n < maxsplit) {
            const size_t f = s.find(sep, pos);
            if (f == std::string::npos) break;
            parts.push_back(s.substr(pos, f - pos));
            pos = f + sep.size();
            ++n;
        }
        parts.push_back(s.substr(pos));
        return parts;
    }
    size_t end = s.size();
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
        if (end < sep.size()) break;
        const size_t f = s.rfind(sep, end - sep.size());
        if (f == std::string::npos) break;
        parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
        end = f;
        ++n;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
}

Value str_list(const std::vector<std::string> &parts) {
    std::vector<Value> out;
    for (const auto &p : parts) out.push_back(Value::string(p));
    return Value::make_list(std::move(out));
}

// Python's printf-style formatting (`"%s" % x`, the format filter): flags, width, precision and the s r d i u f F
// e E g G x X o c conversions.
std::string percent_impl(const std::string &fmt, const Value &args) {
    std::vector<Value> items;
    const bool mapping = args.kind == Value::Kind::Dict;
    if (args.kind == Value::Kind::Tuple) items = *args.list;
    else if (!mapping) items.push_back(args);
    size_t next = 0;
    std::string out;
    for (size_t k = 0; k < fmt.size(); ++k) {
        if (fmt[k] != '%') {
            out += fmt[k];
            continue;
        }
        if (++k >= fmt.size()) fail("incomplete format");
        Value v;
        bool have = false;
        if (fmt[k] == '(') {
            const size_t e = fmt.find(')', k);
            if (e == std::string::npos || !mapping) fail("format requires a mapping");
            const Value *x = args.dict->find(fmt.substr(k + 1, e - k - 1));
            if (!x) fail("KeyError: '{}'", fmt.substr(k + 1, e - k - 1));
            v = *x;
            have = true;
            k = e + 1;
        }
        std::string spec = "%";
        while (k < fmt.size() && std::string_view("-+ #0").find(fmt[k]) != std::string_view::npos) spec += fmt[k++];
        while (k < fmt.size() && is_digit(fmt[k])) spec += fmt[k++];
        if (k < fmt.size() && fmt[k] == '.') {
            spec += fmt[k++];
            while (k < fmt.size() && is_digit(fmt[k])) spec += fmt[k++];
        }
        if (k >= fmt.size()) fail("incomplete format");
        const char conv = fmt[k];
        if (conv == '%') {
            out += '%';
            continue;
        }
        if (!have) {
            if (mapping) fail("format requires a mapping");
            if (next >= items.size()) fail("not enough arguments for format string");
            v = items[next++];
        }
        char buf[512];
        switch (conv) {
        case 's':
        case 'r': {
            const std::string text = conv == 's' ? str(v) : repr(v);
            // Width and precision count characters; apply them by hand on the UTF-8 text.
            std::string flags = spec.substr(1);
            const bool left = flags.find('-') != std::string::npos;
            const size_t dot = flags.find('.');
            std::string digits = flags.substr(0, dot);
            std::erase_if(digits, [](char c) { return !is_digit(c); });
            std::vector<uint32_t> cps = code_points(text);
            if (dot != std::string::npos) {
                const std::string p = flags.substr(dot + 1);
                cps.resize(std::min(cps.size(), size_t(p.empty() ? 0 : std::stoul(p))));
            }
            std::string body = from_code_points(cps, 0, cps.size());
            const size_t width = digits.empty() ? 0 : std::stoul(digits);
            const std::string pad(width > cps.size() ? width - cps.size() : 0, ' ');
            out += left ? body + pad : pad + body;
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            if (!v.is_number()) fail("%{} format: a real number is required, not {}", conv, type_name(v));
            const auto x = static_cast<long long>(v.kind == Value::Kind::Float ? std::trunc(v.f) : double(v.as_int()));
            const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            const long long n = v.is_int() ? static_cast<long long>(v.as_int()) : x;
            std::snprintf(buf, sizeof buf, (spec + "ll" + c).c_str(), n);
            out += buf;
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
            if (!v.is_number()) fail("must be real number, not {}", type_name(v));
            std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
            out += buf;
            break;
        case 'c':
            if (v.is_int()) append_utf8(out, uint32_t(v.as_int()));
            else out += str(v);
            break;
        default: fail("unsupported format character '{}'", conv);
        }
    }
    // Python treats any non-tuple, non-str object with __getitem__ (list, dict, Undefined) as a mapping here.
    const bool subscriptable = args.kind == Value::Kind::List || args.is_undefined() || mapping;
    if (!subscriptable && next < items.size()) fail("not all arguments converted during string formatting");
    return out;
}

// Python's str.format: {} {0} {name} fields with !s / !r, and a format spec of fill, align and width (or a float's
// .N precision); {{ and }} escape braces.
std::string brace_format(Renderer &r, const std::string &fmt, CallArgs &a) {
    std::string out;
    size_t auto_index = 0;
    for (size_t k = 0; k < fmt.size(); ++k) {
        const char c = fmt[k];
        if (c == '}' ) {
            if (k + 1 < fmt.size() && fmt[k + 1] == '}') ++k;
            else fail("Single '}}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
            out += '{';
            ++k;
            continue;
        }
        const size_t e = fmt.find('}', k);
        if (e == std::string::npos) fail("Single '{{' encountered in format string");
        std::string field = fmt.substr(k + 1, e - k - 1), spec, conv;
        k = e;
        if (const size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field = field.substr(0, colon);
        }
        if (const size_t bang = field.find('!'); bang != std::string::npos) {
            conv = field.substr(bang + 1);
            field = field.substr(0, bang);
        }
        Value v;
        if (field.empty()) {
            if (auto_index >= a.pos.size())
                fail("Replacement index {} out of range for positional args tuple", auto_index);
            v = a.pos[auto_index++];
        } else if (std::all_of(field.begin(), field.end(), is_digit)) {
            const size_t i = std::stoul(field);
            if (i >= a.pos.size()) fail("Replacement index {} out of range for positional args tuple", i);
            v = a.pos[i];
        } else {
            const Value *x = nullptr;
            for (const auto &[name, val] : a.kw)
                if (name == field) x = &val;
            if (!x) fail("KeyError: '{}'", field);
            v = *x;
        }
        (void)r;
        std::string text = conv == "r" ? repr(v) : str(v);
        if (!spec.empty()) {
            size_t p = 0;
            char fill = ' ', align = v.is_number() ? '>' : '<';
            if (spec.size() >= 2 && std::string_view("<>^").find(spec[1]) != std::string_view::npos) {
                fill = spec[0];
                align = spec[1];
                p = 2;
            } else if (std::string_view("<>^").find(spec[0]) != std::string_view::npos) {
                align = spec[0];
                p = 1;
            }
            size_t width = 0;
            while (p < spec.size() && is_digit(spec[p])) width = width * 10 + size_t(spec[p++] - '0');
            if (p < spec.size() && spec[p] == '.' && v.is_number()) {
                size_t prec = 0;
                ++p;
                while (p < spec.size() && is_digit(spec[p])) prec = prec * 10 + size_t(spec[p++] - '0');
                if (p < spec.size() && (spec[p] == 'f' || spec[p] == 'F')) ++p;
                char buf[512];
                std::snprintf(buf, sizeof buf, "%.*f", int(std::min<size_t>(prec, 300)), v.as_double());
                text = buf;
            } else if (p < spec.size() && spec[p] == 'd' && v.is_int()) {
                ++p;
            }
            if (p != spec.size()) fail("format spec '{}' is not supported", spec);
            const auto n = size_t(utf8_characters(text));
            if (width > n) {
                const size_t pad = width - n, left = align == '<' ? 0 : align == '>' ? pad : pad / 2;
                text = std::string(left, fill) + text + std::string(pad - left, fill);
            }
        }
        out += text;
    }
    return out;
}

int64_t cp_index(const std::string &s, size_t byte) { return utf8_characters(s.substr(0, byte)); }

std::vector<std::string> splitlines(const std::string &s, bool keepends) {
    std::vector<std::string> lines;
    const std::vector<uint32_t> cps = code_points(s);
    size_t start = 0;
    for (size_t k = 0; k < cps.size(); ++k) {
        const uint32_t c = cps[k];
        const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
                         c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        size_t e = k + 1;
        if (c == '\r' && e < cps.size() && cps[e] == '\n') ++e;
        lines.push_back(from_code_points(cps, start, keepends ? e : k));
        start = e;
        k = e - 1;
    }
    if (start < cps.size()) lines.push_back(from_code_points(cps, start, cps.size()));
    return lines;
}

int64_t length(const Value &v) {
    switch (v.kind) {
    case VK::Undefined: return 0;
    case VK::String: return utf8_characters(v.s);
    case VK::List:
    case VK::Tuple: return int64_t(v.list->size());
    case VK::Dict: return int64_t(v.dict->items.size());
    default: fail("object of type '{}' has no len()", type_name(v));
    }
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attr_path(Renderer &r, const Value &item, const std::string &path) {
    Value v = item;
    size_t pos = 0;
    while (true) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), is_digit);
        v = r.getitem(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
        if (dot == std::string::npos) return v;
        pos = dot + 1;
    }
}

Value fold_case(const Value &v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(lower(v.s));
    return v;
}

// The sort key of an item: its attribute (if given), case-folded unless case_sensitive.
Value sort_key(Renderer &r, const Value &item, const Value *attribute, bool case_sensitive) {
    Value k = attribute && !attribute->is_none() ? attr_path(r, item, need_str(*attribute, "attribute")) : item;
    return fold_case(k, case_sensitive);
}

// --- filters ---

Value f_abs(Renderer &, const Value &v, CallArgs &) {
    if (v.kind == VK::Float) return Value::real(std::fabs(v.f));
    if (v.is_int()) return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    fail("bad operand type for abs(): '{}'", type_name(v));
}
Value f_attr(Renderer &, const Value &v, CallArgs &a) {
    // Python's getattr() only: a dict's keys are not attributes here, unlike the '.' operator.
    const std::string name = str(arg(a, 0, "name", Value()));
    if (v.kind == VK::Namespace && !name.starts_with("_"))
        if (const Value *x = v.dict->find(name)) return *x;
    Value m = name.starts_with("_") ? Value() : method(v, name);
    if (!m.is_undefined()) return m;
    return Value::undefined(fmt::format("{} has no attribute {}", type_repr(v), repr(Value::string(name))));
}
Value f_batch(Renderer &r, const Value &v, CallArgs &a) {
    const int64_t n = arg(a, 0, "linecount", Value::integer(1)).as_int();
    if (n <= 0) fail("batch size must be positive");
    const Value *fill = arg_at(a, 1, "fill_with");
    std::vector<Value> out, cur;
    for (const Value &x : r.iterate(v)) {
        cur.push_back(x);
        if (int64_t(cur.size()) == n) {
            out.push_back(Value::make_list(std::move(cur)));
            cur.clear();
        }
    }
    if (!cur.empty()) {
        if (fill && !fill->is_none())
            while (int64_t(cur.size()) < n) cur.push_back(*fill);
        out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_list(std::move(out));
}
Value f_capitalize(Renderer &, const Value &v, CallArgs &) { return Value::string(capitalize(str(v))); }
Value f_center(Renderer &, const Value &v, CallArgs &a) {
    const std::string s = str(v);
    const int64_t width = arg(a, 0, "width", Value::integer(80)).as_int(), n = utf8_characters(s);
    if (width <= n) return Value::string(s);
    // CPython's pad(): the odd space goes left when the width is odd.
    const int64_t marg = width - n, left = marg / 2 + (marg & width & 1);
    return Value::string(std::string(size_t(left), ' ') + s + std::string(size_t(marg - left), ' '));
}
Value f_default(Renderer &, const Value &v, CallArgs &a) {
    const Value def = arg(a, 0, "default_value", Value::string(""));
    if (v.is_undefined() || (flag(a, 1, "boolean") && !truthy(v))) return def;
    return v;
}
Value f_dictsort(Renderer &, const Value &v, CallArgs &a) {
    if (v.kind != VK::Dict) fail("You can only sort by either a mapping");
    const bool cs = flag(a, 0, "case_sensitive");
    const std::string by = arg(a, 1, "by", Value::string("key")).s;
    const bool rev = flag(a, 2, "reverse");
    const size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
    if (pos == 2) fail("You can only sort by either \"key\" or \"value\"");
    std::vector<Value> items;
    for (const auto &[k, x] : v.dict->items) items.push_back(Value::make_list({k, x}, true));
    std::stable_sort(items.begin(), items.end(), [&](const Value &x, const Value &y) {
        const int c = compare(fold_case((*x.list)[pos], cs), fold_case((*y.list)[pos], cs));
        return rev ? c > 0 : c < 0;
    });
    return Value::make_list(std::move(items));
}
Value f_escape(Renderer &, const Value &v, CallArgs &) {
    std::string out;
    for (char c : str(v)) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '\'': out += "&#39;"; break;
        case '"': out += "&#34;"; break;
        default: out += c;
        }
    }
    return Value::string(out);
}
Value f_first(Renderer &r, const Value &v, CallArgs &) {
    const std::vector<Value> items = r.iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
}
Value f_last(Renderer &r, const Value &v, CallArgs &) {
    const std::vector<Value> items = r.iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}
bool parse_double(std::string s, double &out) {
    s = strip(s, nullptr, true, true);
    std::erase(s, '_');
    if (s.empty()) return false;
    char *end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return end && *end == 0;
}
Value f_float(Renderer &, const Value &v, CallArgs &a) {
    const Value def = arg(a, 0, "default", Value::real(0.0));
    if (v.is_number()) return Value::real(v.as_double());
    double d;
    if (v.is_string() && parse_double(v.s, d)) return Value::real(d);
    return def;
}
Value f_int(Renderer &, const Value &v, CallArgs &a) {
    const Value def = arg(a, 0, "default", Value::integer(0));
    const int base = int(arg(a, 1, "base", Value::integer(10)).as_int());
    if (v.is_int()) return Value::integer(v.as_int());
    if (v.kind == VK::Float) {
        if (!std::isfinite(v.f)) return def;
        return Value::integer(int64_t(v.f));
    }
    if (v.is_string()) {
        std::string s = strip(v.s, nullptr, true, true);
        std::erase(s, '_');
        char *end = nullptr;
        errno = 0;
        const long long x = std::strtoll(s.c_str(), &end, base);
        if (!s.empty() && end && *end == 0 && errno == 0) return Value::integer(x);
        double d;
        if (parse_double(s, d) && std::isfinite(d)) return Value::integer(int64_t(d));
    }
    return def;
}
Value f_indent(Renderer &, const Value &v, CallArgs &a) {
    const Value w = arg(a, 0, "width", Value::integer(4));
    const std::string ind = w.is_string() ? w.s : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
    const bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
    // jinja2 appends "\n" to the value itself, which only a string allows.
    if (!v.is_string()) fail("can only concatenate {} (not \"str\") to {}", type_name(v), type_name(v));
    const std::vector<std::string> lines = splitlines(v.s + "\n", false);
    std::string rv;
    if (blank) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
    }
    if (first) rv = ind + rv;
    return Value::string(rv);
}
Value f_items(Renderer &, const Value &v, CallArgs &) {
    if (v.is_undefined()) return Value::make_list();
    if (v.kind != VK::Dict) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto &[k, x] : v.dict->items) out.push_back(Value::make_list({k, x}, true));
    return Value::make_list(std::move(out));
}
Value f_join(Renderer &r, const Value &v, CallArgs &a) {
    const std::string sep = str(arg(a, 0, "d", Value::string("")));
    const Value *attribute = arg_at(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value &x : r.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += str(attribute && !attribute->is_none() ? attr_path(r, x, str(*attribute)) : x);
    }
    return Value::string(out);
}
Value f_length(Renderer &, const Value &v, CallArgs &) { return Value::integer(length(v)); }
Value f_list(Renderer &r, const Value &v, CallArgs &) { return Value::make_list(r.iterate(v)); }
Value f_lower(Renderer &, const Value &v, CallArgs &) { return Value::string(lower(str(v))); }
Value f_upper(Renderer &, const Value &v, CallArgs &) { return Value::string(upper(str(v))); }
Value f_map(Renderer &r, const Value &v, CallArgs &a) {
    std::vector<Value> out;
    if (!truthy(v)) return Value::make_list(); // jinja2 iterates only a truthy value
    const Value *attribute = nullptr;
    for (const auto &[k, x] : a.kw)
        if (k == "attribute") attribute = &x;
    if (attribute) {
        const Value *def = nullptr;
        for (const auto &[k, x] : a.kw)
            if (k == "default") def = &x;
        for (const Value &x : r.iterate(v)) {
            Value y = attr_path(r, x, str(*attribute));
            out.push_back(def && y.is_undefined() ? *def : y);
        }
        return Value::make_list(std::move(out));
    }
    if (a.pos.empty()) fail("map requires a filter argument");
    const std::string name = need_str(a.pos[0], "filter name");
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value &x : r.iterate(v)) {
        CallArgs c = rest;
        out.push_back(call_filter(r, name, x, c));
    }
    return Value::make_list(std::move(out));
}
Value min_max(Renderer &r, const Value &v, CallArgs &a, bool want_max) {
    const bool cs = flag(a, 0, "case_sensitive");
    const Value *attribute = arg_at(a, 1, "attribute");
    const std::vector<Value> items = r.iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    Value bk = sort_key(r, items[0], attribute, cs);
    for (size_t k = 1; k < items.size(); ++k) {
        Value key = sort_key(r, items[k], attribute, cs);
        const int c = compare(key, bk);
        if (want_max ? c > 0 : c < 0) {
            best = k;
            bk = key;
        }
    }
    return items[best];
}
Value f_max(Renderer &r, const Value &v, CallArgs &a) { return min_max(r, v, a, true); }
Value f_min(Renderer &r, const Value &v, CallArgs &a) { return min_max(r, v, a, false); }

// select / reject / selectattr / rejectattr.
Value select_common(Renderer &r, const Value &v, CallArgs &a, bool by_attr, bool keep) {
    if (!truthy(v)) return Value::make_list(); // jinja2 iterates only a truthy value
    size_t k = 0;
    std::string attribute;
    if (by_attr) {
        if (a.pos.empty()) fail("Missing parameter for attribute name");
        attribute = need_str(a.pos[k++], "attribute");
    }
    std::string test;
    CallArgs targs;
    if (k < a.pos.size()) {
        test = need_str(a.pos[k++], "test name");
        targs.pos.assign(a.pos.begin() + long(k), a.pos.end());
        targs.kw = a.kw;
    }
    std::vector<Value> out;
    for (const Value &x : r.iterate(v)) {
        const Value y = by_attr ? attr_path(r, x, attribute) : x;
        CallArgs c = targs;
        const bool ok = test.empty() ? truthy(y) : call_test(r, test, y, c);
        if (ok == keep) out.push_back(x);
    }
    return Value::make_list(std::move(out));
}
Value f_select(Renderer &r, const Value &v, CallArgs &a) { return select_common(r, v, a, false, true); }
Value f_reject(Renderer &r, const Value &v, CallArgs &a) { return select_common(r, v, a, false, false); }
Value f_selectattr(Renderer &r, const Value &v, CallArgs &a) { return select_common(r, v, a, true, true); }
Value f_rejectattr(Renderer &r, const Value &v, CallArgs &a) { return select_common(r, v, a, true, false); }
Value f_replace(Renderer &, const Value &v, CallArgs &a) {
    const Value *count = arg_at(a, 2, "count");
    return Value::string(replace(str(v), str(arg(a, 0, "old", Value())), str(arg(a, 1, "new", Value())),
                                 count && !count->is_none() ? count->as_int() : -1));
}
Value f_reverse(Renderer &r, const Value &v, CallArgs &) {
    if (v.is_string()) {
        std::vector<uint32_t> cps = code_points(v.s);
        std::reverse(cps.begin(), cps.end());
        return Value::string(from_code_points(cps, 0, cps.size()));
    }
    std::vector<Value> items = r.iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
}
double py_round(double x, int64_t digits) {
    if (!std::isfinite(x)) return x;
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    if (digits >= 0) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", int(std::min<int64_t>(digits, 300)), x);
        return std::strtod(buf, nullptr);
    }
    const double p = std::pow(10.0, double(-digits));
    return std::nearbyint(x / p) * p;
}
Value f_round(Renderer &, const Value &v, CallArgs &a) {
    const int64_t precision = arg(a, 0, "precision", Value::integer(0)).as_int();
    const std::string method = str(arg(a, 1, "method", Value::string("common")));
    if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
    if (method == "common") {
        if (v.is_int()) return Value::integer(v.as_int());
        return Value::real(py_round(v.f, precision));
    }
    if (method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
    const double p = std::pow(10.0, double(precision));
    const double x = v.as_double() * p;
    return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}
Value f_safe(Renderer &, const Value &v, CallArgs &) { return v; }
Value f_sort(Renderer &r, const Value &v, CallArgs &a) {
    const bool rev = flag(a, 0, "reverse"), cs = flag(a, 1, "case_sensitive");
    const Value *attribute = arg_at(a, 2, "attribute");
    std::vector<Value> items = r.iterate(v);
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value &x : items) keyed.emplace_back(sort_key(r, x, attribute, cs), x);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto &x, const auto &y) {
        const int c = compare(x.first, y.first);
        return rev ? c > 0 : c < 0;
    });
    std::vector<Value> out;
    for (auto &kv : keyed) out.push_back(std::move(kv.second));
    return Value::make_list(std::move(out));
}
Value f_string(Renderer &, const Value &v, CallArgs &) { return Value::string(str(v)); }
Value f_sum(Renderer &r, const Value &v, CallArgs &a) {
    const Value *attribute = arg_at(a, 0, "attribute");
    Value acc = arg(a, 1, "start", Value::integer(0));
    for (const Value &x : r.iterate(v)) {
        const Value y = attribute && !attribute->is_none() ? attr_path(r, x, str(*attribute)) : x;
        if (!acc.is_number() || !y.is_number()) fail("unsupported operand type(s) for +: '{}' and '{}'",
                                                      type_name(acc), type_name(y));
        if (acc.is_int() && y.is_int()) acc = Value::integer(acc.as_int() + y.as_int());
        else acc = Value::real(acc.as_double() + y.as_double());
    }
    return acc;
}
Value f_title(Renderer &, const Value &v, CallArgs &) {
    // jinja2's do_title: words start after '-', whitespace, or an opening bracket.
    std::string out;
    bool start = true;
    for (uint32_t c : code_points(str(v))) {
        const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
        append_utf8(out, sep ? c : start ? to_upper(c) : to_lower(c));
        start = sep;
    }
    return Value::string(out);
}
Value f_tojson(Renderer &, const Value &v, CallArgs &a) {
    JsonStyle st;
    const Value ind = arg(a, 1, "indent", Value::none());
    if (!ind.is_none()) {
        st.indent = true;
        st.indent_text = ind.is_string() ? ind.s : std::string(size_t(std::max<int64_t>(0, ind.as_int())), ' ');
        st.item_sep = ",";
    }
    const Value seps = arg(a, 2, "separators", Value::none());
    if (!seps.is_none()) {
        if (!seps.is_sequence() || seps.list->size() != 2) fail("tojson: separators must be a pair of strings");
        st.item_sep = need_str((*seps.list)[0], "separator");
        st.key_sep = need_str((*seps.list)[1], "separator");
    }
    st.sort_keys = flag(a, 3, "sort_keys");
    st.ensure_ascii = flag(a, 0, "ensure_ascii");
    return Value::string(to_json(v, st));
}
Value f_trim(Renderer &, const Value &v, CallArgs &a) {
    return Value::string(strip(str(v), arg_at(a, 0, "chars"), true, true));
}
Value f_truncate(Renderer &, const Value &v, CallArgs &a) {
    const std::string s = str(v);
    const int64_t len = arg(a, 0, "length", Value::integer(255)).as_int();
    const bool killwords = flag(a, 1, "killwords");
    const std::string end = str(arg(a, 2, "end", Value::string("...")));
    const Value lw = arg(a, 3, "leeway", Value::none());
    const int64_t leeway = lw.is_none() ? 5 : lw.as_int();
    const std::vector<uint32_t> cps = code_points(s), ecps = code_points(end);
    if (int64_t(cps.size()) <= len + leeway) return Value::string(s);
    const auto keep = size_t(std::max<int64_t>(0, len - int64_t(ecps.size())));
    if (killwords) return Value::string(from_code_points(cps, 0, keep) + end);
    std::string head = from_code_points(cps, 0, keep);
    const size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head = head.substr(0, sp);
    return Value::string(head + end);
}
Value f_unique(Renderer &r, const Value &v, CallArgs &a) {
    const bool cs = flag(a, 0, "case_sensitive");
    const Value *attribute = arg_at(a, 1, "attribute");
    std::vector<Value> out, seen;
    for (const Value &x : r.iterate(v)) {
        const Value key = sort_key(r, x, attribute, cs);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value &s) { return equal(s, key); })) continue;
        seen.push_back(key);
        out.push_back(x);
    }
    return Value::make_list(std::move(out));
}
Value f_wordcount(Renderer &, const Value &v, CallArgs &) {
    int64_t n = 0;
    bool in = false;
    for (char c : str(v)) {
        const bool w = is_alpha(c) || is_digit(c) || c == '_' || (static_cast<unsigned char>(c) >= 0x80);
        if (w && !in) ++n;
        in = w;
    }
    return Value::integer(n);
}
Value f_groupby(Renderer &r, const Value &v, CallArgs &a) {
    const Value attribute = arg(a, 0, "attribute", Value());
    const Value *def = arg_at(a, 1, "default");
    const bool cs = flag(a, 2, "case_sensitive");
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value &x : r.iterate(v)) {
        Value k = attr_path(r, x, str(attribute));
        if (k.is_undefined() && def) k = *def;
        keyed.emplace_back(fold_case(k, cs), x);
    }
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto &x, const auto &y) { return compare(x.first, y.first) < 0; });
    std::vector<Value> groups;
    for (size_t k = 0; k < keyed.size();) {
        std::vector<Value> members;
        size_t e = k;
        for (; e < keyed.size() && equal(keyed[e].first, keyed[k].first); ++e) members.push_back(keyed[e].second);
        Value grouper = cs ? keyed[k].first : attr_path(r, keyed[k].second, str(attribute));
        if (grouper.is_undefined() && def) grouper = *def;
        groups.push_back(Value::make_list({grouper, Value::make_list(std::move(members))}, true));
        k = e;
    }
    return Value::make_list(std::move(groups));
}

Value f_format(Renderer &, const Value &v, CallArgs &a) {
    if (!a.pos.empty() && !a.kw.empty()) fail("can't handle positional and keyword arguments at the same time");
    if (!a.kw.empty()) {
        Value d = Value::make_dict();
        for (const auto &[k, x] : a.kw) d.dict->set(Value::string(k), x);
        return Value::string(percent_impl(str(v), d));
    }
    return Value::string(percent_impl(str(v), Value::make_list(a.pos, true)));
}

// Python's urllib.parse.quote of UTF-8 text: unreserved characters and `safe` kept, other bytes %XX; for a query
// string, spaces become '+'.
std::string url_quote(const std::string &s, bool for_qs) {
    std::string out;
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-' || c == '~' || (c == '/' && !for_qs)) {
            out += c;
        } else if (c == ' ' && for_qs) {
            out += '+';
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", u);
            out += buf;
        }
    }
    return out;
}
Value f_urlencode(Renderer &r, const Value &v, CallArgs &) {
    if (v.is_string() || !(v.is_sequence() || v.kind == VK::Dict)) return Value::string(url_quote(str(v), false));
    std::vector<std::pair<Value, Value>> pairs;
    if (v.kind == VK::Dict) {
        pairs = v.dict->items;
    } else {
        for (const Value &x : r.iterate(v)) {
            const std::vector<Value> kv = r.iterate(x);
            if (kv.size() != 2) fail("urlencode: expected key/value pairs");
            pairs.emplace_back(kv[0], kv[1]);
        }
    }
    std::string out;
    for (const auto &[k, x] : pairs) {
        if (!out.empty()) out += '&';
        out += url_quote(str(k), true) + "=" + url_quote(str(x), true);
    }
    return Value::string(out);
}

const std::map<std::string, FilterFn> &filters() {
    static const std::map<std::string, FilterFn> table = {
        {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
        {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
        {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format},
        {"groupby", f_groupby}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
        {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max},
        {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
        {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
        {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
        {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper},
        {"urlencode", f_urlencode}, {"wordcount", f_wordcount},
    };
    return table;
}

// --- tests ---

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
// Python's str.islower() / isupper(): some cased character, and none of the other case.
bool case_test(const Value &v, bool want_lower) {
    bool cased = false;
    for (uint32_t c : code_points(str(v))) {
        if (!is_cased(c)) continue;
        if ((want_lower ? to_lower(c) : to_upper(c)) != c) return false;
        cased = true;
    }
    return cased;
}
bool t_lower(Renderer &, const Value &v, CallArgs &) { return case_test(v, true); }
bool t_upper(Renderer &, const Value &v, CallArgs &) { return case_test(v, false); }
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

// --- methods ---

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
        return bound(name, [s, name](Renderer &r, CallArgs &a) {
            if (name == "islower" || name == "isupper") {
                CallArgs none;
                return Value::boolean(name == "islower" ? t_lower(r, Value::string(s), none)
                                                        : t_upper(r, Value::string(s), none));
            }
            (void)a;
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
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (out.size() >= 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        out.push_back(Value::integer(k));
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

std::string percent_format(const std::string &fmt, const Value &args) { return percent_impl(fmt, args); }

bool has_filter(const std::string &name) { return filters().count(name) != 0; }
bool has_test(const std::string &name) { return tests().count(name) != 0; }

Value call_filter(Renderer &r, const std::string &name, const Value &v, CallArgs &args) {
    const auto it = filters().find(name);
    if (it == filters().end()) fail("No filter named '{}'.", name);
    // jinja2's filters see an Undefined as "" unless they look at it as a value (default, length, ...); the ones
    // that would use it as an object raise its error.
    if (v.is_undefined() && (name == "attr" || name == "dictsort" || name == "abs" || name == "round" ||
                             name == "tojson" || name == "int" || name == "float"))
        r.raise_undefined(v);
    return it->second(r, v, args);
}

bool call_test(Renderer &r, const std::string &name, const Value &v, CallArgs &args) {
    const auto it = tests().find(name);
    if (it == tests().end()) fail("No test named '{}'.", name);
    return it->second(r, v, args);
}

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

bool contains(const Value &container, const Value &item) {
    switch (container.kind) {
    case VK::Undefined: return false;
    case VK::String:
        if (!item.is_string()) fail("'in <string>' requires string as left operand, not {}", type_name(item));
        return container.s.find(item.s) != std::string::npos;
    case VK::List:
    case VK::Tuple:
        for (const Value &x : *container.list)
            if (equal(x, item)) return true;
        return false;
    case VK::Dict:
        if (item.kind == VK::List || item.kind == VK::Dict || item.kind == VK::Namespace)
            fail("unhashable type: '{}'", type_name(item));
        return container.dict->find(item) != nullptr;
    default: fail("argument of type '{}' is not iterable", type_name(container));
    }
}

} // namespace zaya::jinja
