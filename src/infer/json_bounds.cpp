#include "infer/json_bounds.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A run of decimal digits, as an unsigned integer, plus or minus one (the run then longer or shorter only by a carry).
std::string digits_plus_one(std::string s) {
    size_t i = s.size();
    while (i > 0 && s[i - 1] == '9') s[--i] = '0';
    if (i == 0) return "1" + s;
    ++s[i - 1];
    return s;
}

std::string digits_minus_one(std::string s) { // s > 0
    size_t i = s.size();
    while (i > 0 && s[i - 1] == '0') s[--i] = '9';
    --s[i - 1];
    return s;
}

// The parts of a number's text without exponent: sign, integer digits, whether a '.' came, fraction digits.
struct NumberText {
    bool neg = false, dot = false;
    std::string_view integer, fraction;
};

NumberText split(std::string_view t) {
    NumberText n;
    if (!t.empty() && t[0] == '-') n.neg = true, t.remove_prefix(1);
    const size_t dot = t.find('.');
    n.integer = t.substr(0, dot);
    if (dot != std::string_view::npos) n.dot = true, n.fraction = t.substr(dot + 1);
    return n;
}

// The digits of |d|'s integer part (none for |d| < 1).
std::string integer_digits(const Decimal &d) {
    if (d.exp <= 0) return {};
    const auto n = int64_t(d.digits.size());
    return d.digits.substr(0, size_t(std::min(d.exp, n))) + std::string(size_t(std::max<int64_t>(d.exp - n, 0)), '0');
}

// The integer `digits` (a run of '0'–'9') times m: m < 10^18, so a digit's product and carry stay below 2^64.
std::string times(const std::string &digits, uint64_t m) {
    std::string out(digits.size(), '0');
    uint64_t carry = 0;
    for (size_t i = digits.size(); i-- > 0;) {
        const uint64_t v = uint64_t(digits[i] - '0') * m + carry;
        out[i] = char('0' + v % 10);
        carry = v / 10;
    }
    return carry ? std::to_string(carry) + out : out;
}

// Whether some value lies in both ranges.
bool meets(const NumberRange &a, const NumberRange &b) {
    NumberRange r = b;
    if (a.lo.present) r.limit_low(a.lo.at, a.lo.open);
    if (a.hi.present) r.limit_high(a.hi.at, a.hi.open);
    return !r.empty();
}

} // namespace

Decimal Decimal::of(bool neg, std::string digits, int64_t point) {
    const size_t lead = std::min(digits.find_first_not_of('0'), digits.size());
    digits.erase(0, lead);
    point -= int64_t(lead);
    digits.erase(digits.find_last_not_of('0') + 1); // (npos + 1 = 0: all zeros, all erased)
    Decimal d;
    if (digits.empty()) return d;
    d.neg = neg;
    d.digits = std::move(digits);
    d.exp = point;
    return d;
}

bool Decimal::parse(std::string_view t, Decimal &out) {
    size_t i = 0;
    const bool neg = i < t.size() && t[i] == '-';
    if (neg) ++i;
    const size_t int_at = i;
    while (i < t.size() && is_digit(t[i])) ++i;
    const size_t int_len = i - int_at;
    if (int_len == 0 || (int_len > 1 && t[int_at] == '0')) return false;
    std::string digits(t.substr(int_at, int_len));
    if (i < t.size() && t[i] == '.') {
        const size_t frac_at = ++i;
        while (i < t.size() && is_digit(t[i])) ++i;
        if (i == frac_at) return false;
        digits += t.substr(frac_at, i - frac_at);
    }
    int64_t e = 0;
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        ++i;
        const bool eneg = i < t.size() && t[i] == '-';
        if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
        const size_t exp_at = i;
        for (; i < t.size() && is_digit(t[i]); ++i) e = std::min<int64_t>(e * 10 + (t[i] - '0'), 1'000'000'000);
        if (i == exp_at) return false;
        if (eneg) e = -e;
    }
    if (i != t.size()) return false;
    out = of(neg, std::move(digits), int64_t(int_len) + e);
    return true;
}

Decimal Decimal::truncated() const {
    if (is_zero() || exp <= 0) return Decimal{};
    return of(neg, digits.substr(0, size_t(std::min<int64_t>(int64_t(digits.size()), exp))), exp);
}

Decimal Decimal::plus(int one) const {
    if (is_zero()) return of(one < 0, "1", 1);
    std::string m = digits + std::string(size_t(std::max<int64_t>(exp - int64_t(digits.size()), 0)), '0');
    m = (one > 0) != neg ? digits_plus_one(std::move(m)) : digits_minus_one(std::move(m)); // away from or towards 0
    const int64_t len = int64_t(m.size());
    return of(neg, std::move(m), len);
}

std::string Decimal::text() const {
    if (is_zero()) return "0";
    std::string s = neg ? "-" : "";
    const int64_t n = int64_t(digits.size());
    if (exp > 21 || exp < -6) return s + digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "") + "e" +
                                     std::to_string(exp - 1);
    if (exp <= 0) return s + "0." + std::string(size_t(-exp), '0') + digits;
    if (n <= exp) return s + digits + std::string(size_t(exp - n), '0');
    return s + digits.substr(0, size_t(exp)) + "." + digits.substr(size_t(exp));
}

int compare(const Decimal &a, const Decimal &b) {
    if (a.neg != b.neg) return a.neg ? -1 : 1;
    int m = 0; // the magnitudes
    if (a.is_zero() || b.is_zero()) m = int(!a.is_zero()) - int(!b.is_zero());
    else if (a.exp != b.exp) m = a.exp < b.exp ? -1 : 1;
    else m = std::clamp(a.digits.compare(b.digits), -1, 1); // no trailing zeros: "12" < "123" as 0.12 < 0.123
    return a.neg ? -m : m;
}

void NumberRange::limit_low(const Decimal &v, bool open) {
    const int c = lo.present ? compare(v, lo.at) : 1;
    if (c > 0) lo = {true, open, v};
    else if (c == 0) lo.open = lo.open || open;
}

void NumberRange::limit_high(const Decimal &v, bool open) {
    const int c = hi.present ? compare(v, hi.at) : -1;
    if (c < 0) hi = {true, open, v};
    else if (c == 0) hi.open = hi.open || open;
}

void NumberRange::round_to_integers() {
    if (lo.present) { // the least integer in the range: the bound's ceiling, or the next one if open and whole
        const Decimal &x = lo.at;
        lo.at = x.is_integer() ? (lo.open ? x.plus(1) : x) : (x.neg ? x.truncated() : x.truncated().plus(1));
        lo.open = false;
    }
    if (hi.present) { // the greatest: the bound's floor, or the one before if open and whole
        const Decimal &x = hi.at;
        hi.at = x.is_integer() ? (hi.open ? x.plus(-1) : x) : (x.neg ? x.truncated().plus(-1) : x.truncated());
        hi.open = false;
    }
}

void NumberRange::set_step(const Decimal &step, bool integer) {
    if (step.is_zero() || step.neg) fail("multipleOf must be greater than 0, got {}", step.text());
    if (step.digits.size() > 18)
        fail("multipleOf {}: at most 18 significant digits are supported", step.text());
    // step = 0.d₁…dₙ × 10^exp = units × 10^−scale, the units the digits and any zeros the exponent adds after them.
    const int64_t n = int64_t(step.digits.size());
    if (step.exp > 18) fail("multipleOf {}: steps of 10^18 or more are not supported", step.text());
    units_ = std::stoull(step.digits + std::string(size_t(std::max<int64_t>(step.exp - n, 0)), '0'));
    scale_ = std::max<int64_t>(n - step.exp, 0);
    if (integer) { // the least integer multiple: units / gcd(units, 10^scale)
        for (int64_t i = 0; i < scale_ && units_ % 2 == 0; ++i) units_ /= 2;
        for (int64_t i = 0; i < scale_ && units_ % 5 == 0; ++i) units_ /= 5;
        scale_ = 0;
    }
    std::string digits = std::to_string(units_);
    const auto len = int64_t(digits.size());
    step_ = Decimal::of(false, std::move(digits), len - scale_);
}

bool NumberRange::empty() const {
    if (!lo.present || !hi.present) return false; // a half-line holds multiples of any step
    const int c = compare(lo.at, hi.at);
    if (c > 0 || (c == 0 && (lo.open || hi.open))) return true;
    if (!stepped()) return false;
    // The least multiple q·step not below lo (above it if open), against hi. In units of 10^−scale lo is L, whose
    // integer part |L| splits as quotient Q and remainder R by the step's units; q = sign(L)·Q, plus one where that
    // multiple is below L (L > 0 with R or a fraction left) or is L itself but lo is open.
    Decimal L = lo.at;
    if (!L.is_zero()) L.exp += scale_;
    std::string quotient;
    uint64_t rem = 0;
    for (char d : integer_digits(L)) { // rem < units_ < 10^18: rem·10 + 9 < 2^64
        rem = rem * 10 + uint64_t(d - '0');
        quotient += char('0' + rem / units_);
        rem %= units_;
    }
    const bool exact = rem == 0 && L.is_integer();
    Decimal q = Decimal::of(L.neg, quotient, int64_t(quotient.size()));
    if ((!exact && !L.neg) || (exact && lo.open)) q = q.plus(1);
    std::string m = times(integer_digits(q), units_);
    const int64_t len = int64_t(m.size());
    const Decimal least = Decimal::of(q.neg, std::move(m), len - scale_);
    const int h = compare(least, hi.at);
    return h > 0 || (h == 0 && hi.open);
}

bool NumberRange::viable(std::string_view prefix) const {
    const NumberText n = split(prefix);
    if (too_fine(n.fraction.size())) return false;
    // The numbers that begin with the prefix, on the positive side: [a, b); their negatives for a '-'.
    auto reachable = [&](const Decimal &a, const Decimal &b) {
        NumberRange r;
        if (n.neg) {
            r.lo = {true, true, Decimal::of(true, b.digits, b.exp)};
            r.hi = {true, false, Decimal::of(true, a.digits, a.exp)};
        } else {
            r.lo = {true, false, a};
            r.hi = {true, true, b};
        }
        return meets(r, *this);
    };
    if (n.integer.empty()) { // "-": any number ≤ 0 ("-0" is 0)
        NumberRange r;
        r.limit_high(Decimal{}, false);
        return meets(r, *this);
    }
    if (n.dot || n.integer == "0") { // I.F… ∈ [I.F, I.F + 10^−|F|)
        const std::string d = std::string(n.integer) + std::string(n.fraction), up = digits_plus_one(d);
        const int64_t point = int64_t(n.integer.size());
        return reachable(Decimal::of(false, d, point), Decimal::of(false, up, point + int64_t(up.size() - d.size())));
    }
    // More integer digits may follow: I followed by k digits lies in [I·10^k, (I+1)·10^k), k = 0, 1, …
    const RangeEnd &outward = n.neg ? lo : hi;
    if (!outward.present) return true; // far enough out, any bound on the other side is passed
    const Decimal limit = Decimal::of(false, outward.at.digits, outward.at.exp); // its magnitude
    const std::string i(n.integer), up = digits_plus_one(i);
    const int64_t carry = int64_t(up.size() - i.size());
    // The inner bound (minimum for a positive prefix, maximum for a negative one), if on the prefix's side of 0,
    // rules out every k with (I+1)·10^k ≤ 10^(|I|+k) ≤ 10^(exp−1) ≤ its magnitude: start past them.
    const RangeEnd &inward = n.neg ? hi : lo;
    int64_t k0 = 0;
    if (inward.present && !inward.at.is_zero() && inward.at.neg == n.neg)
        k0 = std::max<int64_t>(0, inward.at.exp - int64_t(i.size()));
    for (int64_t k = k0;; ++k) {
        const Decimal a = Decimal::of(false, i, int64_t(i.size()) + k);
        if (compare(a, limit) > 0) return false; // beyond the outer bound from here on
        if (reachable(a, Decimal::of(false, up, int64_t(i.size()) + carry + k))) return true;
    }
}

bool NumberRange::holds(std::string_view text) const {
    const NumberText n = split(text);
    if (too_fine(n.fraction.size())) return false;
    const Decimal v = Decimal::of(n.neg, std::string(n.integer) + std::string(n.fraction), int64_t(n.integer.size()));
    NumberRange point;
    point.lo = point.hi = {true, false, v};
    return meets(point, *this);
}

} // namespace zaya
