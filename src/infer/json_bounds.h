// A schema's numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) and step (multipleOf) tested on a
// number's text as it is written: whether a prefix can still become a number within them (structured outputs must
// never take a byte after which no valid value can follow), and whether a whole number is within them. Exact: bounds,
// steps and numbers are compared as decimal digit strings, never rounded to doubles, so that "minimum": 0.1 takes 0.1
// and refuses 0.09999999, and "multipleOf": 0.1 takes 0.3 (which in doubles is not 3 × 0.1).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

// ±0.d₁d₂… × 10^exp, normalised (no leading or trailing zero digit; zero has no digits and is not negative).
struct Decimal {
    bool neg = false;
    std::string digits;
    int64_t exp = 0;

    // A JSON number's text (RFC 8259); false if it is not one.
    static bool parse(std::string_view text, Decimal &out);
    // ±0.`digits` × 10^point, digits any run of '0'–'9'.
    static Decimal of(bool neg, std::string digits, int64_t point);
    bool is_zero() const { return digits.empty(); }
    bool is_integer() const { return int64_t(digits.size()) <= exp || is_zero(); }
    Decimal truncated() const;     // towards zero
    Decimal plus(int one) const;   // an integer's successor (+1) or predecessor (−1)
    std::string text() const;      // for messages: plain digits, or d.ddde±N
};

int compare(const Decimal &a, const Decimal &b); // −1, 0, 1

// One end of a range: absent (unbounded), or a value that is in the range (closed) or not (open).
struct RangeEnd {
    bool present = false, open = false;
    Decimal at;
};

class NumberRange {
  public:
    RangeEnd lo, hi;

    bool bounded() const { return lo.present || hi.present; }
    bool stepped() const { return !step_.is_zero(); }
    // Whether values are constrained at all: then written without exponent, and their text kept to test.
    bool constrained() const { return bounded() || stepped(); }
    // multipleOf: only multiples of `step` (> 0, at most 18 significant digits) are in the range; for an integer,
    // only integer multiples (the step becomes the least integer multiple of it: 0.5 → 1, 2.5 → 5). Fails naming the
    // value otherwise.
    void set_step(const Decimal &step, bool integer);
    // Tightens an end (minimum / exclusiveMinimum: low; maximum / exclusiveMaximum: high).
    void limit_low(const Decimal &v, bool open);
    void limit_high(const Decimal &v, bool open);
    // For an integer: the ends become the closed integer ends of the same integers (minimum 2.5 → 3, < 4 → 3).
    void round_to_integers();
    bool empty() const; // no number (of the ends' kind, a multiple of the step if one is set) is in the range

    // Whether some number written as `prefix` followed by more bytes (or nothing) lies in the range. The prefix is
    // '-'? digits ('.' digits*)?: the grammar keeps exponents out of constrained numbers, since with one any prefix
    // can go anywhere. With a step, a number has at most kSpareZeros fraction digits past the step's (which can
    // only be zeros): "multipleOf": 0.25 takes 0.2500, not 0.25000 — a model that writes zeros on must end (this
    // never strands a prefix: a multiple that begins with one is written in as many digits).
    bool viable(std::string_view prefix) const;
    static constexpr int64_t kSpareZeros = 2;
    // Whether the whole number `text` (same form) lies in the range.
    bool holds(std::string_view text) const;

  private:
    bool too_fine(size_t fraction_digits) const {
        return stepped() && int64_t(fraction_digits) > scale_ + kSpareZeros;
    }
    Decimal step_;        // multipleOf; zero: none
    uint64_t units_ = 0;  // the step as units_ × 10^−scale_ (units_ < 10^18)
    int64_t scale_ = 0;
};

} // namespace zaya
