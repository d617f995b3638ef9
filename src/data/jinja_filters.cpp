// jinja2's filters (`value | name(args)`).
#include "core/utf8.h"
#include "data/jinja_builtins.h"
#include "data/jinja_case.h"
#include "data/jinja_render.h"
#include "data/jinja_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace zaya::jinja {

namespace {

using FilterFn = Value (*)(Renderer &, const Value &, CallArgs &);

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attr_path(Renderer &r, const Value &item, const std::string &path) {
    Value v = item;
    size_t pos = 0;
    while (true) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), is_digit);
        v = r.getitem(v, digits ? Value::integer(parse_digits(part)) : Value::string(part));
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
        if (fill && !fill->is_none()) check_items(size_t(n));
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
    check_bytes(size_t(width - n) + s.size());
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
        return Value::integer(float_to_int(v.f));
    }
    if (v.is_string()) {
        std::string s = strip(v.s, nullptr, true, true);
        std::erase(s, '_');
        char *end = nullptr;
        errno = 0;
        const long long x = std::strtoll(s.c_str(), &end, base);
        if (!s.empty() && end && *end == 0 && errno == 0) return Value::integer(x);
        double d;
        if (parse_double(s, d) && std::isfinite(d)) return Value::integer(float_to_int(d));
    }
    return def;
}
Value f_indent(Renderer &, const Value &v, CallArgs &a) {
    const Value w = arg(a, 0, "width", Value::integer(4));
    if (!w.is_string()) check_bytes(size_t(std::max<int64_t>(0, w.as_int())));
    const std::string ind = w.is_string() ? w.s : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
    const bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
    // jinja2 appends "\n" to the value itself, which only a string allows.
    if (!v.is_string()) fail("can only concatenate {} (not \"str\") to {}", type_name(v), type_name(v));
    const std::vector<std::string> lines = splitlines(v.s + "\n", false);
    std::string rv;
    if (blank) {
        for (size_t k = 0; k < lines.size(); ++k) {
            rv += (k ? "\n" + ind : "") + lines[k];
            check_bytes(rv.size());
        }
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k) {
            rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
            check_bytes(rv.size());
        }
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
        check_bytes(out.size());
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
    // jinja2's do_title: words start after '-', whitespace, or an opening bracket; each word becomes
    // word[0].upper() + word[1:].lower(), so the final sigma rule sees the word without its first letter.
    const auto sep = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c); };
    const std::vector<uint32_t> cps = code_points(str(v));
    std::string out;
    for (size_t k = 0; k < cps.size();) {
        if (sep(cps[k])) {
            append_utf8(out, cps[k++]);
            continue;
        }
        size_t e = k + 1;
        while (e < cps.size() && !sep(cps[e])) ++e;
        append_upper(out, cps[k]);
        const std::vector<uint32_t> rest(cps.begin() + std::ptrdiff_t(k + 1), cps.begin() + std::ptrdiff_t(e));
        for (size_t j = 0; j < rest.size(); ++j) append_lower(out, rest, j);
        k = e;
    }
    return Value::string(out);
}
Value f_tojson(Renderer &, const Value &v, CallArgs &a) {
    JsonStyle st;
    const Value ind = arg(a, 1, "indent", Value::none());
    if (!ind.is_none()) {
        st.indent = true;
        if (!ind.is_string()) check_bytes(size_t(std::max<int64_t>(0, ind.as_int())));
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
    if (len < int64_t(ecps.size())) fail("expected length >= {}, got {}", ecps.size(), len);
    if (leeway < 0) fail("expected leeway >= 0, got {}", leeway);
    // In 128 bits: a template's length + leeway may pass int64.
    if (__int128(cps.size()) <= __int128(len) + leeway) return Value::string(s);
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
        return Value::string(percent_format(str(v), d));
    }
    return Value::string(percent_format(str(v), Value::make_list(a.pos, true)));
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

} // namespace

bool has_filter(const std::string &name) { return filters().count(name) != 0; }

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

} // namespace zaya::jinja
