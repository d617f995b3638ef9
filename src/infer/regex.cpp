#include "infer/regex.h"

#include "core/error.h"
#include "core/hex.h"
#include "core/utf8.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace zaya {

namespace {

constexpr size_t kMaxNfaStates = 50000;
constexpr size_t kMaxDfaStates = 4000;
// A request's pattern is untrusted: bounds on the work and memory its automaton may take (a few hundred ms, 16 MB).
constexpr size_t kMaxTableEntries = size_t(1) << 22; // states × classes
constexpr uint64_t kMaxSubsetWork = 10'000'000;     // NFA states and moves visited while building the DFA
constexpr uint64_t kMaxLengthWork = 200'000'000;    // edges × lengths measured
constexpr uint64_t kMaxReachBits = uint64_t(1) << 27; // states × lengths measured: 16 MB

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>; // sorted, disjoint, inclusive

Ranges normalised(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto &[lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
        else out.emplace_back(lo, hi);
    }
    return out;
}

Ranges complement(const Ranges &r) {
    Ranges out;
    uint32_t next = 0;
    for (const auto &[lo, hi] : r) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= Regex::kMaxCodePoint) out.emplace_back(next, Regex::kMaxCodePoint);
    return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kAny = {{0, Regex::kMaxCodePoint}};
const Ranges kDot = complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); // ECMA's '.': no line terminators

struct Node {
    enum class Kind : uint8_t { Empty, Set, Concat, Alt, Repeat };
    Kind kind = Kind::Empty;
    Ranges set;
    std::vector<Node> kids;
    uint32_t min = 0, max = 0; // Repeat: max UINT32_MAX for no bound
};

Node set_node(Ranges r) {
    Node n;
    n.kind = Node::Kind::Set;
    n.set = normalised(std::move(r));
    return n;
}

Node repeat(Node kid, uint32_t min, uint32_t max) {
    Node n;
    n.kind = Node::Kind::Repeat;
    n.min = min, n.max = max;
    n.kids.push_back(std::move(kid));
    return n;
}

// A pattern as messages show it: at most 80 bytes of it, cut between characters.
std::string shown(std::string_view pattern) {
    if (pattern.size() <= 80) return std::string(pattern);
    size_t n = 77;
    while (n > 0 && (uint8_t(pattern[n]) & 0xC0) == 0x80) --n; // not inside a UTF-8 character
    return std::string(pattern.substr(0, n)) + "...";
}

// Recursive descent over the pattern's code points.
class Parser {
  public:
    explicit Parser(std::string_view source) : source_(source) {
        // Decode UTF-8 (the JSON string's text): positions in messages are characters.
        if (!is_utf8(source)) fail("pattern: not valid UTF-8");
        for (size_t i = 0; i < source.size();) cps_.push_back(utf8_next(source, i));
    }

    Node parse() {
        Node top;
        top.kind = Node::Kind::Alt;
        for (;;) {
            // A top-level alternative: its own '^' and '$'; without them, anything may come before and after.
            const bool start = eat('^');
            Node body = concat(true);
            const bool end = eat('$');
            if (!at_end() && !peek('|')) fail_here("'$' may only end a top-level alternative");
            Node alt;
            alt.kind = Node::Kind::Concat;
            if (!start) alt.kids.push_back(repeat(set_node(kAny), 0, UINT32_MAX));
            alt.kids.push_back(std::move(body));
            if (!end) alt.kids.push_back(repeat(set_node(kAny), 0, UINT32_MAX));
            top.kids.push_back(std::move(alt));
            if (!eat('|')) break;
        }
        if (!at_end()) fail_here("unbalanced ')'");
        return top;
    }

  private:
    bool at_end() const { return pos_ >= cps_.size(); }
    bool peek(uint32_t c) const { return !at_end() && cps_[pos_] == c; }
    bool eat(uint32_t c) {
        if (!peek(c)) return false;
        ++pos_;
        return true;
    }
    uint32_t take() {
        if (at_end()) fail_here("the pattern ends early");
        return cps_[pos_++];
    }
    [[noreturn]] void fail_here(const std::string &what) const {
        fail("pattern '{}': {} (at character {})", shown(source_), what, pos_ + 1);
    }

    Node alternatives() {
        Node n;
        n.kind = Node::Kind::Alt;
        n.kids.push_back(concat(false));
        while (eat('|')) n.kids.push_back(concat(false));
        return n.kids.size() == 1 ? std::move(n.kids[0]) : n;
    }

    Node concat(bool top) {
        Node n;
        n.kind = Node::Kind::Concat;
        while (!at_end() && !peek('|') && !peek(')')) {
            if (peek('$')) {
                if (top) break; // parse() checks that it ends the alternative
                fail_here("'$' may only end a top-level alternative");
            }
            if (peek('^')) fail_here("'^' may only begin a top-level alternative");
            Node atom = this->atom();
            n.kids.push_back(quantified(std::move(atom)));
        }
        if (top && peek(')')) fail_here("unbalanced ')'");
        return n;
    }

    // One quantifier, lazy or not (the same strings); a second one is "nothing to repeat", as in ECMA-262.
    Node quantified(Node atom) {
        uint32_t min = 0, max = 0;
        const size_t at = pos_;
        if (eat('*')) min = 0, max = UINT32_MAX;
        else if (eat('+')) min = 1, max = UINT32_MAX;
        else if (eat('?')) min = 0, max = 1;
        else if (!braces(min, max)) return atom;
        if (max < min) {
            pos_ = at;
            fail_here("a quantifier's maximum is below its minimum");
        }
        eat('?');
        return repeat(std::move(atom), min, max);
    }

    // {n}, {n,}, {n,m}; anything else leaves '{' a literal (ECMA-262 Annex B).
    bool braces(uint32_t &min, uint32_t &max) {
        if (!peek('{')) return false;
        size_t p = pos_ + 1;
        auto number = [&](uint32_t &out) {
            const size_t from = p;
            uint64_t v = 0;
            for (; p < cps_.size() && cps_[p] >= '0' && cps_[p] <= '9'; ++p)
                v = std::min<uint64_t>(v * 10 + (cps_[p] - '0'), 1u << 20);
            out = uint32_t(v);
            return p > from;
        };
        if (!number(min)) return false;
        max = min;
        if (p < cps_.size() && cps_[p] == ',') {
            ++p;
            if (!number(max)) max = UINT32_MAX;
        }
        if (p >= cps_.size() || cps_[p] != '}') return false;
        pos_ = p + 1;
        if (min > 1000 || (max != UINT32_MAX && max > 1000)) fail_here("a quantifier's count is over 1000");
        return true;
    }

    Node atom() {
        const uint32_t c = take();
        switch (c) {
        case '(': {
            if (++groups_ > kMaxGroupDepth) fail_here("groups nest too deeply");
            if (eat('?')) {
                if (eat(':')) {
                } else if (peek('<') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
                    while (!at_end() && take() != '>') {} // a named group: the name does not change the strings
                } else {
                    fail_here("lookaround ((?=, (?!, (?<=, (?<!) is not supported");
                }
            }
            Node inner = alternatives();
            if (!eat(')')) fail_here("missing ')'");
            --groups_;
            return inner;
        }
        case '[': return set_node(char_class());
        case '.': return set_node(kDot);
        case '\\': return set_node(escape(false));
        case '*':
        case '+':
        case '?':
            --pos_;
            fail_here("nothing to repeat");
        default: return set_node({{c, c}});
        }
    }

    // After '\': a class escape, or one character. In a class, \b is a backspace.
    Ranges escape(bool in_class) {
        const uint32_t c = take();
        auto hex = [&](int digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; ++k) {
                const uint32_t h = take();
                const int d = hex_digit(h);
                if (d < 0) fail_here("a hexadecimal digit was expected");
                v = v << 4 | uint32_t(d);
            }
            return v;
        };
        auto one = [](uint32_t x) { return Ranges{{x, x}}; };
        switch (c) {
        case 'd': return kDigit;
        case 'D': return complement(kDigit);
        case 'w': return kWord;
        case 'W': return complement(kWord);
        case 's': return kSpace;
        case 'S': return complement(kSpace);
        case 't': return one('\t');
        case 'n': return one('\n');
        case 'r': return one('\r');
        case 'f': return one('\f');
        case 'v': return one('\v');
        case '0': return one(0);
        case 'x': return one(hex(2));
        case 'u': {
            if (eat('{')) {
                uint32_t v = 0;
                int n = 0;
                while (!eat('}')) {
                    v = v << 4 | hex(1);
                    if (++n > 6 || v > Regex::kMaxCodePoint) fail_here("\\u{...} beyond U+10FFFF");
                }
                return one(v);
            }
            uint32_t v = hex(4);
            if (v >= 0xD800 && v <= 0xDBFF && peek('\\') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] == 'u') {
                const size_t at = pos_;
                pos_ += 2;
                const uint32_t low = hex(4);
                if (low >= 0xDC00 && low <= 0xDFFF) return one(utf16_pair(v, low));
                pos_ = at;
            }
            return one(v);
        }
        case 'b':
            if (in_class) return one(8);
            break;
        default: break;
        }
        --pos_; // at the escape's letter, for the message
        if (c == 'b' || c == 'B') fail_here("word boundaries (\\b, \\B) are not supported");
        if (c == 'p' || c == 'P') fail_here("Unicode property escapes (\\p{...}) are not supported");
        if (c >= '1' && c <= '9') fail_here("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail_here(std::string("unknown escape \\") + char(c));
        ++pos_;
        return one(c); // escaped punctuation (and any other character) stands for itself
    }

    Ranges class_atom() {
        if (eat('\\')) return escape(true);
        const uint32_t c = take();
        return {{c, c}};
    }

    Ranges char_class() {
        const bool negated = eat('^');
        if (peek(']')) fail_here("an empty class ('[]' or '[^]') is not supported");
        Ranges r;
        while (!eat(']')) {
            if (at_end()) fail_here("missing ']'");
            const Ranges lo = class_atom();
            if (peek('-') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
                ++pos_;
                const Ranges hi = class_atom();
                if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second)
                    fail_here("a class range's ends must be single characters");
                if (hi[0].first < lo[0].first) fail_here("a class range is out of order");
                r.emplace_back(lo[0].first, hi[0].first);
                continue;
            }
            r.insert(r.end(), lo.begin(), lo.end());
        }
        r = normalised(std::move(r));
        return negated ? complement(r) : r;
    }

    static constexpr int kMaxGroupDepth = 64;
    std::string_view source_;
    std::vector<uint32_t> cps_;
    size_t pos_ = 0;
    int groups_ = 0; // open groups: the recursion's depth
};

// Thompson's construction: states with epsilon moves and moves on a code-point set.
struct Nfa {
    std::vector<std::vector<int32_t>> eps;
    std::vector<std::vector<std::pair<int32_t, int32_t>>> moves; // (set, target)
    std::vector<Ranges> sets;
    int32_t add() {
        if (eps.size() >= kMaxNfaStates)
            fail("pattern: too large (its repetitions expand to over {} states)", kMaxNfaStates);
        eps.emplace_back();
        moves.emplace_back();
        return int32_t(eps.size() - 1);
    }
    // The fragment for n: its entry and exit states.
    std::pair<int32_t, int32_t> build(const Node &n) {
        const int32_t in = add();
        int32_t out = in;
        switch (n.kind) {
        case Node::Kind::Empty: break;
        case Node::Kind::Set:
            out = add();
            sets.push_back(n.set);
            moves[size_t(in)].emplace_back(int32_t(sets.size() - 1), out);
            break;
        case Node::Kind::Concat:
            for (const Node &k : n.kids) {
                const auto [a, b] = build(k);
                eps[size_t(out)].push_back(a);
                out = b;
            }
            break;
        case Node::Kind::Alt:
            out = add();
            for (const Node &k : n.kids) {
                const auto [a, b] = build(k);
                eps[size_t(in)].push_back(a);
                eps[size_t(b)].push_back(out);
            }
            break;
        case Node::Kind::Repeat: {
            for (uint32_t i = 0; i < n.min; ++i) {
                const auto [a, b] = build(n.kids[0]);
                eps[size_t(out)].push_back(a);
                out = b;
            }
            if (n.max == UINT32_MAX) { // then any number more: a loop
                const auto [a, b] = build(n.kids[0]);
                const int32_t after = add();
                eps[size_t(out)].push_back(a);
                eps[size_t(out)].push_back(after);
                eps[size_t(b)].push_back(out);
                out = after;
            } else { // then up to max − min more, each optional
                const int32_t after = add();
                for (uint32_t i = n.min; i < n.max; ++i) {
                    const auto [a, b] = build(n.kids[0]);
                    eps[size_t(out)].push_back(a);
                    eps[size_t(out)].push_back(after);
                    out = b;
                }
                eps[size_t(out)].push_back(after);
                out = after;
            }
            break;
        }
        }
        return {in, out};
    }
};

} // namespace

std::shared_ptr<const Regex> Regex::compile(std::string_view pattern, uint32_t min_chars, uint32_t max_chars) {
    const Node ast = Parser(pattern).parse();
    Nfa nfa;
    const auto [entry, exit] = nfa.build(ast);

    // The code-point classes: every set is a union of whole atoms.
    auto r = std::make_shared<Regex>();
    std::vector<uint32_t> bounds = {0};
    for (const Ranges &s : nfa.sets)
        for (const auto &[lo, hi] : s) {
            bounds.push_back(lo);
            if (hi < kMaxCodePoint) bounds.push_back(hi + 1);
        }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    r->atom_starts_ = bounds;
    const size_t atoms = bounds.size();
    std::vector<std::vector<int32_t>> set_atoms(nfa.sets.size());
    for (size_t s = 0; s < nfa.sets.size(); ++s)
        for (const auto &[lo, hi] : nfa.sets[s])
            for (int32_t a = r->atom_of(lo); a < int32_t(atoms) && bounds[size_t(a)] <= hi; ++a)
                set_atoms[s].push_back(a);

    // Subset construction.
    std::vector<uint32_t> seen(nfa.eps.size(), 0); // == stamp: in the closure under way
    uint32_t stamp = 0;
    uint64_t work = 0;
    auto too_complex = [&pattern](const char *what) {
        fail("pattern '{}': too complex ({})", shown(pattern), what);
    };
    auto closure = [&](const std::vector<int32_t> &from) {
        ++stamp;
        if (work > kMaxSubsetWork) too_complex("its automaton takes too long to build");
        std::vector<int32_t> states, todo;
        for (int32_t s : from)
            if (seen[size_t(s)] != stamp) seen[size_t(s)] = stamp, states.push_back(s), todo.push_back(s);
        while (!todo.empty()) {
            const int32_t s = todo.back();
            todo.pop_back();
            for (int32_t t : nfa.eps[size_t(s)])
                if (seen[size_t(t)] != stamp) seen[size_t(t)] = stamp, states.push_back(t), todo.push_back(t);
        }
        std::sort(states.begin(), states.end());
        work += states.size();
        return states;
    };
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> subsets = {closure({entry})};
    ids[subsets[0]] = 0;
    std::vector<std::vector<int32_t>> buckets(atoms);
    for (size_t d = 0; d < subsets.size(); ++d) {
        for (auto &b : buckets) b.clear();
        for (int32_t s : subsets[d])
            for (const auto &[set, target] : nfa.moves[size_t(s)]) {
                for (int32_t a : set_atoms[size_t(set)]) buckets[size_t(a)].push_back(target);
                work += set_atoms[size_t(set)].size();
            }
        if ((d + 1) * atoms > kMaxTableEntries) too_complex("its automaton's table would pass 16 MB");
        r->next_.resize((d + 1) * atoms, kDead);
        for (size_t a = 0; a < atoms; ++a) {
            if (buckets[a].empty()) continue;
            std::vector<int32_t> to = closure(buckets[a]);
            auto [it, added] = ids.emplace(std::move(to), int32_t(subsets.size()));
            if (added) {
                if (subsets.size() >= kMaxDfaStates) too_complex("over 4000 automaton states");
                subsets.push_back(it->first);
            }
            r->next_[d * atoms + a] = it->second;
        }
    }
    for (const auto &s : subsets) r->accepting_.push_back(std::binary_search(s.begin(), s.end(), exit));
    r->measure_lengths(min_chars, max_chars);
    r->loops_.assign(subsets.size(), 0);
    if (r->small_alphabet())
        for (size_t d = 0; d < subsets.size(); ++d)
            for (size_t a = 0; a < atoms; ++a)
                if (r->next_[d * atoms + a] == int32_t(d)) r->loops_[d] |= uint64_t(1) << a;
    if (!r->viable(0, 0)) {
        if (min_chars == 0 && max_chars == UINT32_MAX) fail("pattern '{}': matches no string", shown(pattern));
        fail("pattern '{}': matches no string of {} to {} characters", shown(pattern), min_chars,
             max_chars == UINT32_MAX ? std::string("any number of") : std::to_string(max_chars));
    }
    return r;
}

// reach_[s] bit n for n ≤ horizon_: an accepting state is exactly n characters away. If a string within the lengths
// is reachable at all, one is within `states` characters of the least length allowed (a longer path repeats a state,
// and cutting the cycle out keeps it long enough), so the horizon is min(max, min + states).
void Regex::measure_lengths(uint32_t min_chars, uint32_t max_chars) {
    min_chars_ = min_chars, max_chars_ = max_chars;
    const size_t n_states = accepting_.size(), atoms = atom_starts_.size();
    horizon_ = uint32_t(std::min<uint64_t>(max_chars, uint64_t(min_chars) + n_states));
    if ((uint64_t(horizon_) + 1) * n_states > kMaxReachBits)
        fail("pattern: minLength {} is too large to combine with this pattern", min_chars);
    std::vector<std::vector<int32_t>> succ(n_states);
    for (size_t s = 0; s < n_states; ++s) {
        for (size_t a = 0; a < atoms; ++a)
            if (next_[s * atoms + a] != kDead) succ[s].push_back(next_[s * atoms + a]);
        std::sort(succ[s].begin(), succ[s].end());
        succ[s].erase(std::unique(succ[s].begin(), succ[s].end()), succ[s].end());
    }
    uint64_t edges = 0;
    for (const auto &s : succ) edges += s.size();
    if (edges * (uint64_t(horizon_) + 1) > kMaxLengthWork)
        fail("pattern: too complex to combine with minLength {} and maxLength {}", min_chars, max_chars);
    const size_t words = horizon_ / 64 + 1;
    reach_.assign(n_states, std::vector<uint64_t>(words, 0));
    for (size_t s = 0; s < n_states; ++s)
        if (accepting_[s]) reach_[s][0] |= 1;
    for (uint32_t n = 1; n <= horizon_; ++n)
        for (size_t s = 0; s < n_states; ++s)
            for (int32_t t : succ[s])
                if (reach_[size_t(t)][(n - 1) / 64] >> ((n - 1) % 64) & 1) {
                    reach_[s][n / 64] |= uint64_t(1) << (n % 64);
                    break;
                }
    // A state from which no string of the pattern ends within the horizon is dead: transitions into it go nowhere.
    auto dead = [&](int32_t t) {
        return std::all_of(reach_[size_t(t)].begin(), reach_[size_t(t)].end(), [](uint64_t w) { return w == 0; });
    };
    for (int32_t &t : next_)
        if (t != kDead && dead(t)) t = kDead;
    // Endless: no state reachable from the start is finite — one whose every path ends (states without a live
    // successor, then those whose successors are all finite, as a topological order peels them off).
    if (max_chars != UINT32_MAX) return;
    std::vector<std::vector<int32_t>> pred(n_states);
    std::vector<size_t> out(n_states, 0);
    for (size_t s = 0; s < n_states; ++s) {
        std::erase_if(succ[s], dead);
        out[s] = succ[s].size();
        for (int32_t t : succ[s]) pred[size_t(t)].push_back(int32_t(s));
    }
    std::vector<uint8_t> finite(n_states, 0);
    std::vector<int32_t> peel;
    for (size_t s = 0; s < n_states; ++s)
        if (out[s] == 0) finite[s] = 1, peel.push_back(int32_t(s));
    while (!peel.empty()) {
        const int32_t t = peel.back();
        peel.pop_back();
        for (int32_t s : pred[size_t(t)])
            if (--out[size_t(s)] == 0) finite[size_t(s)] = 1, peel.push_back(s);
    }
    std::vector<uint8_t> seen(n_states, 0);
    std::vector<int32_t> todo{0};
    seen[0] = 1;
    endless_ = true;
    while (!todo.empty() && endless_) {
        const int32_t s = todo.back();
        todo.pop_back();
        endless_ = !finite[size_t(s)];
        for (int32_t t : succ[size_t(s)])
            if (!seen[size_t(t)]) seen[size_t(t)] = 1, todo.push_back(t);
    }
}

int32_t Regex::atom_of(uint32_t c) const {
    return int32_t(std::upper_bound(atom_starts_.begin(), atom_starts_.end(), c) - atom_starts_.begin()) - 1;
}

int32_t Regex::step(int32_t state, uint32_t c) const {
    if (state == kDead || c > kMaxCodePoint) return kDead;
    return next_[size_t(state) * atom_starts_.size() + size_t(atom_of(c))];
}

bool Regex::viable(int32_t state, uint32_t count) const {
    if (state == kDead || count > max_chars_) return false;
    const uint64_t lo = count < min_chars_ ? min_chars_ - count : 0;
    const uint64_t hi = std::min<uint64_t>({uint64_t(max_chars_) - count, lo + accepting_.size() - 1, horizon_});
    const std::vector<uint64_t> &bits = reach_[size_t(state)];
    for (uint64_t n = lo; n <= hi;) {
        const uint64_t word = bits[n / 64] >> (n % 64);
        if (word != 0) return n + uint64_t(__builtin_ctzll(word)) <= hi;
        n = (n / 64 + 1) * 64;
    }
    return false;
}

bool Regex::viable_through(int32_t state, uint32_t count, uint32_t lo, uint32_t hi) const {
    if (state == kDead || lo > hi) return false;
    const size_t atoms = atom_starts_.size();
    for (int32_t a = atom_of(lo); a < int32_t(atoms) && atom_starts_[size_t(a)] <= hi; ++a)
        if (viable(next_[size_t(state) * atoms + size_t(a)], count + 1)) return true;
    return false;
}

} // namespace zaya
