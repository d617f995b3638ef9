// Python semantics of template values: truthiness, ==, ordering, str(), repr(), json.dumps.
#include "data/jinja_value.h"

#include "core/error.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace zaya::jinja {

using K = Value::Kind;

const Value *DictData::find(const Value &key) const {
    for (const auto &[k, v] : items)
        if (equal(k, key)) return &v;
    return nullptr;
}

const Value *DictData::find(std::string_view key) const {
    for (const auto &[k, v] : items)
        if (k.kind == K::String && k.s == key) return &v;
    return nullptr;
}

void DictData::set(const Value &key, Value value) {
    for (auto &[k, v] : items)
        if (equal(k, key)) {
            v = std::move(value);
            return;
        }
    items.emplace_back(key, std::move(value));
}

Value Value::from_json(const nlohmann::ordered_json &j) {
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
        const auto u = j.get<uint64_t>();
        return u <= uint64_t(INT64_MAX) ? integer(int64_t(u)) : real(double(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto &e : j) items.push_back(from_json(e));
        return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
        Value d = make_dict();
        for (const auto &[k, v] : j.items()) d.dict->items.emplace_back(string(k), from_json(v));
        return d;
    }
    default: return none();
    }
}

bool truthy(const Value &v) {
    switch (v.kind) {
    case K::Undefined:
    case K::None: return false;
    case K::Bool: return v.b;
    case K::Int: return v.i != 0;
    case K::Float: return v.f != 0;
    case K::String: return !v.s.empty();
    case K::List:
    case K::Tuple: return !v.list->empty();
    case K::Dict: return !v.dict->items.empty();
    default: return true;
    }
}

bool equal(const Value &a, const Value &b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == K::Float || b.kind == K::Float) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List:
    case K::Tuple:
        if (a.list->size() != b.list->size()) return false;
        for (size_t k = 0; k < a.list->size(); ++k)
            if (!equal((*a.list)[k], (*b.list)[k])) return false;
        return true;
    case K::Dict:
        if (a.dict->items.size() != b.dict->items.size()) return false;
        for (const auto &[k, v] : a.dict->items) {
            const Value *o = b.dict->find(k);
            if (!o || !equal(v, *o)) return false;
        }
        return true;
    case K::Namespace: return a.dict == b.dict;
    case K::Callable: return a.fn == b.fn;
    default: return false;
    }
}

int compare(const Value &a, const Value &b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == K::Float || b.kind == K::Float) {
            const double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    if (a.kind == K::String && b.kind == K::String) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0; // UTF-8 keeps order
    if (a.kind == b.kind && a.is_sequence()) {
        const size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k)
            if (!equal((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k]);
        return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string type_name(const Value &v) {
    switch (v.kind) {
    case K::Undefined: return "Undefined";
    case K::None: return "NoneType";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::String: return "str";
    case K::List: return "list";
    case K::Tuple: return "tuple";
    case K::Dict: return "dict";
    case K::Namespace: return "Namespace";
    default: return "function";
    }
}

std::string type_repr(const Value &v) {
    if (v.kind == K::None) return "None";
    // Not "'" + name + "...": GCC 12 warns wrongly (stringop-overflow) about that once inlined in a unity batch.
    return fmt::format("'{} object'", type_name(v));
}

std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
    // Shortest round-trip digits, laid out as Python's repr does: positional when the exponent is in [-4, 16).
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int exp = std::stoi(sci.substr(e + 1));
    const int decpt = exp + 1; // the value is 0.<digits> * 10^decpt
    std::string out;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) out = "0." + std::string(size_t(-decpt), '0') + digits;
        else if (size_t(decpt) >= digits.size()) out = digits + std::string(size_t(decpt) - digits.size(), '0') + ".0";
        else out = digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        out += eb;
    }
    return sign + out;
}

std::vector<uint32_t> code_points(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t k = 0; k < s.size();) {
        const auto lead = static_cast<unsigned char>(s[k]);
        const size_t len = lead < 0xc0 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        uint32_t cp = len == 1 ? lead : lead & (0x7fu >> len);
        for (size_t m = 1; m < len && k + m < s.size(); ++m)
            cp = cp << 6 | (static_cast<unsigned char>(s[k + m]) & 0x3fu);
        cps.push_back(cp);
        k += len;
    }
    return cps;
}

void append_utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xc0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += char(0xe0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    } else {
        out += char(0xf0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3f));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    }
}

std::string from_code_points(const std::vector<uint32_t> &cps, size_t begin, size_t end) {
    std::string out;
    for (size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
    return out;
}

void check_bytes(size_t bytes) {
    if (bytes > kMaxBytes) fail("a string passed {} bytes", kMaxBytes);
}

void check_items(size_t items) {
    if (items > kMaxBytes / sizeof(Value)) fail("a list passed {} bytes", kMaxBytes);
}

bool py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

namespace {

// Python's str.isprintable() approximated without Unicode tables: control, format, separator and private-use
// characters that templates may meet are escaped, every other character is kept.
bool repr_escapes(uint32_t cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad || (cp >= 0x2000 && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff ||
           (cp >= 0xe000 && cp <= 0xf8ff) || cp == 0x1680;
}

std::string string_repr(const std::string &s) {
    const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
    const char q = has_single && !has_double ? '"' : '\'';
    std::string out(1, q);
    for (uint32_t cp : code_points(s)) {
        if (cp == uint32_t(q) || cp == '\\') {
            out += '\\';
            out += char(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (repr_escapes(cp)) {
            char buf[16];
            if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
            else std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            out += buf;
        } else {
            append_utf8(out, cp);
        }
    }
    out += q;
    return out;
}

std::string json_string(const std::string &s, bool ascii) {
    std::string out = "\"";
    if (ascii) {
        for (uint32_t cp : code_points(s)) {
            if (cp < 0x80) {
                out += json_string(std::string(1, char(cp)), false).substr(1);
                out.pop_back();
                continue;
            }
            char buf[16];
            if (cp >= 0x10000) {
                const uint32_t v = cp - 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
                std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            }
            out += buf;
        }
        return out + "\"";
    }
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (u < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", u);
                out += buf;
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

std::string json_key(const Value &k) {
    switch (k.kind) {
    case K::String: return k.s;
    case K::Bool: return k.b ? "true" : "false";
    case K::None: return "null";
    case K::Int: return std::to_string(k.i);
    case K::Float: return float_repr(k.f);
    default: fail("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
}

void json_into(std::string &out, const Value &v, const JsonStyle &st, int level) {
    if (level > 512) fail("Circular reference detected");
    const auto newline = [&](int lvl) {
        out += '\n';
        check_bytes(out.size() + size_t(lvl) * st.indent_text.size()); // a wide indent times a deep value
        for (int k = 0; k < lvl; ++k) out += st.indent_text;
    };
    switch (v.kind) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
        if (std::isnan(v.f)) out += "NaN";
        else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(v.f);
        return;
    case K::String: out += json_string(v.s, st.ensure_ascii); return;
    case K::List:
    case K::Tuple: {
        if (v.list->empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
            if (k) out += st.item_sep;
            if (st.indent) newline(level + 1);
            json_into(out, (*v.list)[k], st, level + 1);
        }
        if (st.indent) newline(level);
        out += ']';
        return;
    }
    case K::Dict: {
        if (v.dict->items.empty()) {
            out += "{}";
            return;
        }
        std::vector<const std::pair<Value, Value> *> items;
        for (const auto &kv : v.dict->items) items.push_back(&kv);
        std::vector<std::string> keys;
        for (const auto *kv : items) keys.push_back(json_key(kv->first));
        std::vector<size_t> order(items.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = k;
        if (st.sort_keys)
            std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
                return compare(items[x]->first, items[y]->first) < 0;
            });
        out += '{';
        for (size_t n = 0; n < order.size(); ++n) {
            if (n) out += st.item_sep;
            if (st.indent) newline(level + 1);
            out += json_string(keys[order[n]], st.ensure_ascii);
            out += st.key_sep;
            json_into(out, items[order[n]]->second, st, level + 1);
        }
        if (st.indent) newline(level);
        out += '}';
        return;
    }
    default: fail("Object of type {} is not JSON serializable", type_name(v));
    }
}

} // namespace

std::string to_json(const Value &v, const JsonStyle &style) {
    std::string out;
    json_into(out, v, style, 0);
    return out;
}

namespace {

// Deeper than this, a value is taken to contain itself (only a namespace can): fail rather than overflow the stack.
constexpr int kMaxValueDepth = 512;

// Namespaces are not entered: they may contain themselves, and render() empties each one afterwards, which cuts
// any chain through them before it is destroyed.
void depth_at(const Value &v, int depth) {
    if (depth > kMaxValueDepth) fail("a value nests lists and dicts more than {} deep", kMaxValueDepth);
    if (v.is_sequence())
        for (const Value &x : *v.list) depth_at(x, depth + 1);
    if (v.is_dict())
        for (const auto &[k, x] : v.dict->items) depth_at(x, depth + 1);
}

std::string repr_at(const Value &v, int depth) {
    if (depth > kMaxValueDepth) fail("maximum recursion depth exceeded while getting the repr of an object");
    switch (v.kind) {
    case K::String: return string_repr(v.s);
    case K::List:
    case K::Tuple: {
        const bool tuple = v.kind == K::Tuple;
        std::string out = tuple ? "(" : "[";
        for (size_t k = 0; k < v.list->size(); ++k) {
            if (k) out += ", ";
            out += repr_at((*v.list)[k], depth + 1);
        }
        if (tuple && v.list->size() == 1) out += ',';
        return out + (tuple ? ")" : "]");
    }
    case K::Dict:
    case K::Namespace: {
        std::string out = v.kind == K::Namespace ? "<Namespace {" : "{";
        bool first = true;
        for (const auto &[k, x] : v.dict->items) {
            if (!first) out += ", ";
            first = false;
            out += repr_at(k, depth + 1) + ": " + repr_at(x, depth + 1);
        }
        return out + (v.kind == K::Namespace ? "}>" : "}");
    }
    case K::Undefined: return "Undefined";
    default: return str(v);
    }
}

} // namespace

void check_depth(const Value &v) { depth_at(v, 0); }

std::string repr(const Value &v) { return repr_at(v, 0); }

std::string str(const Value &v) {
    switch (v.kind) {
    case K::Undefined: return "";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    case K::String: return v.s;
    case K::Callable: return v.fn->unsafe ? "" : "<function " + v.fn->name + ">"; // the sandbox's Undefined
    default: return repr(v);
    }
}

} // namespace zaya::jinja
