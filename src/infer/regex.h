// A JSON schema's "pattern" (and the "format"s written as patterns, json_schema.cpp) as a DFA over code points, so
// that structured outputs can test each character of a string value as it is written: whether some string of the
// pattern, within the string's minLength and maxLength, still begins with what was written.
//
// Why not a library: RE2 and PCRE2 answer "does this string match", and PCRE2's partial matching re-reads the whole
// string on every call; a mask tests up to 262,144 tokens per step, each from the state the text so far left, which
// needs the automaton's state itself. The DFA is built once per schema (subset construction over code-point classes)
// and bounded in size.
//
// Syntax: ECMA-262's, as JSON Schema specifies, less what a finite automaton cannot do or zaya does not need:
// literals, '.', classes ([a-z], [^...], \d \w \s and their negations, \t \n \r \f \v \0 \xHH \uHHHH \u{H...} and
// escaped punctuation), groups ((...), (?:...), (?<name>...)), alternation, the quantifiers ? * + {n} {n,} {n,m}
// (lazy or not: the language is the same). '^' and '$' may begin and end a top-level alternative; a pattern is a
// search, so an alternative without them may be preceded and followed by anything. Refused with the position named:
// backreferences, lookaround, \b, \p{...}, anchors elsewhere.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace zaya {

class Regex {
  public:
    static constexpr int32_t kDead = -1;
    static constexpr uint32_t kMaxCodePoint = 0x10FFFF;

    // Fails (zaya::Error) naming the position and what is not supported. min_chars / max_chars (UINT32_MAX: none)
    // are the string's length bounds, which viable() takes into account.
    static std::shared_ptr<const Regex> compile(std::string_view pattern, uint32_t min_chars = 0,
                                                uint32_t max_chars = UINT32_MAX);

    int32_t start() const { return 0; }
    int32_t step(int32_t state, uint32_t code_point) const; // kDead if no string of the pattern continues so
    bool accepts(int32_t state) const { return accepting_[size_t(state)] != 0; }
    // Whether a string of the pattern with between min_chars and max_chars characters begins with the `count`
    // characters that led to `state`.
    bool viable(int32_t state, uint32_t count) const;
    // Whether some code point in [lo, hi] continues the text viably as its (count + 1)th character.
    bool viable_through(int32_t state, uint32_t count, uint32_t lo, uint32_t hi) const;
    int32_t states() const { return int32_t(accepting_.size()); }
    // With at most 64 code-point classes: a class's bit, and the classes whose characters keep `state` where it is
    // (json_constraint.h takes a token of such characters unread, as it takes plain tokens in a free string).
    bool small_alphabet() const { return atom_starts_.size() <= 64; }
    uint64_t class_bit(uint32_t code_point) const { return uint64_t(1) << atom_of(code_point); }
    uint64_t loops(int32_t state) const { return loops_[size_t(state)]; }
    // Whether every text of the pattern can go on into other strings of it without end (no maximum length, and no
    // state it reaches from which only finitely many strings end): a string written can always become another one.
    bool endless() const { return endless_; }

  private:
    int32_t atom_of(uint32_t code_point) const;
    void measure_lengths(uint32_t min_chars, uint32_t max_chars);

    std::vector<uint32_t> atom_starts_; // the code-point classes: atom i is [starts[i], starts[i + 1]) (the last to
                                        // 0x10FFFF)
    std::vector<int32_t> next_;         // [state × atoms]: the next state, or kDead
    std::vector<uint8_t> accepting_;
    std::vector<uint64_t> loops_; // [state]: the classes leading back to it (small alphabets only)
    // reach_[state] bit n: a string of the pattern ends exactly n characters after `state` (n ≤ horizon_).
    std::vector<std::vector<uint64_t>> reach_;
    uint32_t horizon_ = 0, min_chars_ = 0, max_chars_ = UINT32_MAX;
    bool endless_ = false;
};

} // namespace zaya
