// Argument access and small helpers the builtins share (see jinja_builtins.h), and Python's `in`.
#include "data/jinja_builtins.h"

#include "core/error.h"
#include "core/utf8.h"
#include "data/jinja_render.h"

namespace zaya::jinja {

const Value *arg_at(CallArgs &a, size_t i, const char *kw) {
    if (i < a.pos.size()) return &a.pos[i];
    for (const auto &[k, v] : a.kw)
        if (k == kw) return &v;
    return nullptr;
}
Value arg(CallArgs &a, size_t i, const char *kw, Value def) {
    const Value *v = arg_at(a, i, kw);
    if (!v && def.is_undefined() && def.s.empty()) fail("missing required argument '{}'", kw);
    return v ? *v : std::move(def);
}
bool flag(CallArgs &a, size_t i, const char *kw, bool def) {
    const Value *v = arg_at(a, i, kw);
    return v ? truthy(*v) : def;
}
std::string need_str(const Value &v, const char *what) {
    if (!v.is_string()) fail("{} must be a string, not '{}'", what, type_name(v));
    return v.s;
}

int64_t float_to_int(double x) {
    if (!(x > -9223372036854775808.0 - 1024 && x < 9223372036854775808.0))
        fail("integer overflow (integers past 64 bits are not supported)");
    return int64_t(x);
}

Value str_list(const std::vector<std::string> &parts) {
    std::vector<Value> out;
    for (const auto &p : parts) out.push_back(Value::string(p));
    return Value::make_list(std::move(out));
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
