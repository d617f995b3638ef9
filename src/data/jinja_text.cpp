// Python's str operations on UTF-8 text (see jinja_text.h).
#include "data/jinja_text.h"

#include "core/utf8.h"
#include "data/jinja_builtins.h"
#include "data/jinja_case.h"
#include "data/jinja_render.h"

#include <algorithm>
#include <cstdio>

namespace zaya::jinja {

int64_t parse_digits(std::string_view digits) {
    int64_t n = 0;
    for (char c : digits) {
        if (n > (INT64_MAX - 9) / 10) return INT64_MAX;
        n = n * 10 + (c - '0');
    }
    return n;
}

std::string capitalize(const std::string &s) {
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    for (size_t k = 0; k < cps.size(); ++k) {
        if (k) append_lower(out, cps, k);
        else append_title(out, cps[k]);
    }
    return out;
}

std::string py_title(const std::string &s) {
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    bool prev_cased = false;
    for (size_t k = 0; k < cps.size(); ++k) {
        const bool cased = is_cased(cps[k]);
        if (!cased) append_utf8(out, cps[k]);
        else if (prev_cased) append_lower(out, cps, k);
        else append_title(out, cps[k]);
        prev_cased = cased;
    }
    return out;
}

bool is_case(const std::string &s, bool want_lower) {
    bool cased = false;
    for (uint32_t c : code_points(s)) {
        if (!is_cased(c)) continue;
        if ((want_lower ? to_lower(c) : to_upper(c)) != c) return false;
        cased = true;
    }
    return cased;
}

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
                check_bytes(out.size());
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
        check_bytes(out.size());
        pos = f + old.size();
        ++n;
    }
    out.append(s, pos);
    return out;
}

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

std::string percent_format(const std::string &fmt, const Value &args) {
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
                cps.resize(std::min(cps.size(), size_t(parse_digits(p))));
            }
            std::string body = from_code_points(cps, 0, cps.size());
            const auto width = size_t(parse_digits(digits));
            check_bytes(width);
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
            const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            const auto n = static_cast<long long>(v.is_int() ? v.as_int() : float_to_int(v.f));
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
            const auto i = size_t(parse_digits(field));
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
            const size_t digits_begin = p;
            while (p < spec.size() && is_digit(spec[p])) ++p;
            width = size_t(parse_digits(std::string_view(spec).substr(digits_begin, p - digits_begin)));
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
                check_bytes(width);
                const size_t pad = width - n, left = align == '<' ? 0 : align == '>' ? pad : pad / 2;
                text = std::string(left, fill) + text + std::string(pad - left, fill);
            }
        }
        out += text;
    }
    return out;
}

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

} // namespace zaya::jinja
