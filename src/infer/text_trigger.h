// A text found in another read a byte at a time: a lazy JSON constraint's trigger (infer/json_constraint.h), the
// tool reader's (infer/tool_calls.h), a reasoning block's close (infer/reasoning.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zaya {

// A lazy constraint's trigger found in a text read byte by byte, wherever it begins: `matched` is the length of the
// longest prefix of the trigger that the bytes read so far end with (a KMP automaton, its fallback found directly:
// triggers are short). True when the byte completes the trigger. The engine decides by it (JsonConstraint) and the
// server's reader of tool answers (AnswerStream, infer/tool_calls.h) reads by it, so the two agree on every text.
inline bool trigger_step(std::string_view trigger, size_t &matched, uint8_t b) {
    if (b == uint8_t(trigger[matched])) return ++matched == trigger.size();
    for (size_t j = matched; j > 0; --j) // the longest prefix, now ending in b: a border of the part matched, then b
        if (uint8_t(trigger[j - 1]) == b && trigger.substr(0, j - 1) == trigger.substr(matched - (j - 1), j - 1)) {
            matched = j;
            return false;
        }
    matched = 0;
    return false;
}

} // namespace zaya
