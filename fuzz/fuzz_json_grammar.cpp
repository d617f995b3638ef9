// libFuzzer target: JSON mode's byte acceptor (infer/json_grammar.h) against nlohmann::json. The bytes are fed until
// one is refused; every prefix taken must be one the reference parser can still finish, and a text the grammar calls
// complete must parse as an object.
#include "infer/json_grammar.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

// The reference's verdict on a prefix: the offset of its first error (0: none; size + 1: only the end came early;
// SIZE_MAX: no verdict, a number beyond a double's range, which JSON allows and nlohmann refuses).
size_t first_error(const std::string &s) {
    try {
        (void)nlohmann::json::parse(s);
        return 0;
    } catch (const nlohmann::json::parse_error &e) {
        return e.byte;
    } catch (const nlohmann::json::out_of_range &) {
        return SIZE_MAX;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    zaya::JsonGrammar g;
    size_t taken = 0;
    while (taken < size && g.feed(data[taken])) ++taken;
    const std::string text(reinterpret_cast<const char *>(data), taken);
    const size_t error = first_error(text);
    if (error == SIZE_MAX) return 0;
    if (g.complete()) {
        if (error != 0 || !nlohmann::json::parse(text).is_object()) __builtin_trap();
    } else if (error != 0 && error != text.size() + 1) {
        __builtin_trap(); // the grammar took a byte the reference refuses
    }
    return 0;
}
