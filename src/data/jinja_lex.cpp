// The lexer: jinja2's rules for data, tags, whitespace control ({%- -%} {%+ +%}), trim_blocks (the newline after a
// block or comment tag is dropped), lstrip_blocks (spaces before a block or comment tag that starts its line are
// dropped), raw blocks, and the tokens inside tags.
#include "data/jinja_ast.h"

#include "core/error.h"
#include "core/utf8.h"

#include <cctype>
#include <cstdlib>

namespace zaya::jinja {

namespace {

using T = Token::Type;

// Python's str.rstrip() with no argument: the length of `s` without its trailing whitespace.
size_t rstrip_length(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
        const std::vector<uint32_t> cp = code_points(s.substr(start, end - start));
        if (cp.empty() || !py_space(cp[0])) break;
        end = start;
    }
    return end;
}

// The length of the whitespace (Python's \s) that starts at `pos`.
size_t space_run(std::string_view s, size_t pos) {
    size_t k = pos;
    while (k < s.size()) {
        const auto c = static_cast<unsigned char>(s[k]);
        if (c < 0x80) {
            if (!py_space(c)) break;
            ++k;
            continue;
        }
        // Only a whole, valid character: a stray byte would otherwise read as one of a longer length, past the end.
        const Utf8Step step = utf8_step(s, k);
        if (!step.valid) break;
        const std::vector<uint32_t> cp = code_points(s.substr(k, step.length));
        if (cp.empty() || !py_space(cp[0])) break;
        k += step.length;
    }
    return k - pos;
}

bool starts(std::string_view s, size_t pos, std::string_view what) { return s.substr(pos, what.size()) == what; }

struct Lexer {
    std::string src;
    const std::string &name;
    std::vector<Token> out;
    size_t pos = 0;
    // Line and column of `pos`, kept by advance().
    int line = 1, col = 1;
    size_t counted = 0;

    Lexer(std::string s, const std::string &n) : src(std::move(s)), name(n) {}

    void sync(size_t to) {
        for (; counted < to; ++counted) {
            if (src[counted] == '\n') {
                ++line;
                col = 1;
            } else if ((static_cast<unsigned char>(src[counted]) & 0xc0) != 0x80) {
                ++col;
            }
        }
    }
    [[noreturn]] void error(size_t at, const std::string &msg) {
        sync(at);
        fail("{}:{}:{}: {}", name, line, col, msg);
    }
    void emit(T type, std::string text, size_t at) {
        sync(at);
        out.push_back(Token{type, std::move(text), line, col, {}});
    }
    // A number token, its value already read, at `at`; returns `end`, where lexing goes on.
    size_t emit_number(Token t, size_t at, size_t end) {
        sync(at);
        t.line = line;
        t.col = col;
        out.push_back(std::move(t));
        return end;
    }

    // The end of a tag closed by `close` ("%}", "}}" or "#}") at `p`: its sign handling and the length it takes.
    // Returns 0 when no end starts at p. trim: whether a plain end drops one following newline.
    size_t tag_end(size_t p, std::string_view close, bool trim) {
        if (close != "}}" && starts(src, p, "+") && starts(src, p + 1, close)) return 1 + close.size();
        if (starts(src, p, "-") && starts(src, p + 1, close)) {
            const size_t e = p + 1 + close.size();
            return e + space_run(src, e) - p;
        }
        if (starts(src, p, close)) {
            size_t e = p + close.size();
            if (trim && e < src.size() && src[e] == '\n') ++e;
            return e - p;
        }
        return 0;
    }

    // Data before a tag at `tag` whose sign is `sign`: '-' strips all whitespace before it; otherwise lstrip_blocks
    // strips the spaces between the line's start and a block or comment tag.
    void data(size_t begin, size_t tag, char sign, bool is_variable) {
        std::string_view text(src.data() + begin, tag - begin);
        if (sign == '-') {
            text = text.substr(0, rstrip_length(text));
        } else if (sign != '+' && !is_variable) {
            const size_t nl = text.rfind('\n');
            const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
            const bool line_starting = begin == 0 || src[begin - 1] == '\n';
            if ((l_pos > 0 || line_starting) && l_pos < text.size() && space_run(text, l_pos) == text.size() - l_pos)
                text = text.substr(0, l_pos);
        }
        if (!text.empty()) emit(T::Data, std::string(text), begin);
    }

    // A raw block: `{% raw %}` matched at `tag` with the given sign, its text up to `{% endraw %}` kept verbatim.
    bool raw(size_t tag, char sign, size_t begin) {
        size_t p = tag + 2 + (sign ? 1 : 0);
        p += space_run(src, p);
        if (!starts(src, p, "raw")) return false;
        p += 3;
        p += space_run(src, p);
        if (starts(src, p, "-%}")) p += 3 + space_run(src, p + 3);
        else if (starts(src, p, "%}")) p += 2;
        else return false;
        data(begin, tag, sign, false);
        for (size_t q = p; q < src.size(); ++q) {
            if (!starts(src, q, "{%")) continue;
            const char esign = q + 2 < src.size() && (src[q + 2] == '-' || src[q + 2] == '+') ? src[q + 2] : 0;
            size_t r = q + 2 + (esign ? 1 : 0);
            r += space_run(src, r);
            if (!starts(src, r, "endraw")) continue;
            r += 6;
            r += space_run(src, r);
            const size_t n = tag_end(r, "%}", true);
            if (!n) continue;
            data(p, q, esign, false);
            pos = r + n;
            return true;
        }
        error(tag, "Missing end of raw directive");
    }

    void tag_tokens(size_t p, bool variable) {
        const std::string_view close = variable ? "}}" : "%}";
        std::vector<char> balance;
        while (true) {
            if (p >= src.size()) error(p, variable ? "unexpected end of template, expected '}}'"
                                                   : "unexpected end of template, expected '%}'");
            if (balance.empty()) {
                if (const size_t n = tag_end(p, close, !variable)) {
                    emit(variable ? T::VarEnd : T::BlockEnd, std::string(close), p);
                    pos = p + n;
                    return;
                }
            }
            const char c = src[p];
            if (const size_t ws = space_run(src, p)) {
                p += ws;
                continue;
            }
            if (std::isdigit(static_cast<unsigned char>(c))) {
                p = number(p);
                continue;
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t e = p;
                while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
                emit(T::Name, src.substr(p, e - p), p);
                p = e;
                continue;
            }
            if (c == '\'' || c == '"') {
                p = string(p);
                continue;
            }
            static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
            std::string op;
            for (const char *t : two)
                if (starts(src, p, t)) op = t;
            if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) op = c;
            if (op.empty()) error(p, fmt::format("unexpected char '{}'", c));
            if (op == "(" || op == "[" || op == "{") balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
            if (op == ")" || op == "]" || op == "}") {
                if (balance.empty()) error(p, fmt::format("unexpected '{}'", op));
                if (balance.back() != op[0])
                    error(p, fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
                balance.pop_back();
            }
            emit(T::Op, op, p);
            p += op.size();
        }
    }

    size_t digits(size_t p, bool (*ok)(char)) {
        // Digits with single underscores between them, as Python literals allow.
        while (p < src.size() && (ok(src[p]) || (src[p] == '_' && p + 1 < src.size() && ok(src[p + 1])))) ++p;
        return p;
    }

    size_t number(size_t p) {
        const auto dec = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
        const auto strip = [](std::string s) {
            std::erase(s, '_');
            return s;
        };
        const bool after_dot = p > 0 && src[p - 1] == '.';
        const bool prefixed =
            p + 1 < src.size() && std::string_view("bBoOxX").find(src[p + 1]) != std::string_view::npos;
        if (src[p] == '0' && prefixed) {
            const char b = char(std::tolower(static_cast<unsigned char>(src[p + 1])));
            size_t e = p + 2;
            const auto ok = [&](char ch) {
                return b == 'x' ? std::isxdigit(static_cast<unsigned char>(ch)) != 0
                                : b == 'o' ? (ch >= '0' && ch <= '7') : (ch == '0' || ch == '1');
            };
            while (e < src.size() && (ok(src[e]) || (src[e] == '_' && e + 1 < src.size() && ok(src[e + 1])))) ++e;
            if (e > p + 2) {
                Token t{T::Int, src.substr(p, e - p), 0, 0, {}};
                try {
                    t.number = Value::integer(std::stoll(strip(src.substr(p + 2, e - p - 2)), nullptr,
                                                         b == 'x' ? 16 : b == 'o' ? 8 : 2));
                } catch (const std::out_of_range &) {
                    error(p, "integer literal too large");
                }
                return emit_number(std::move(t), p, e);
            }
        }
        size_t e = digits(p, dec);
        bool is_float = false;
        if (!after_dot) {
            size_t f = e;
            if (f + 1 < src.size() && src[f] == '.' && dec(src[f + 1])) {
                f = digits(f + 1, dec);
                is_float = true;
            }
            if (f < src.size() && (src[f] == 'e' || src[f] == 'E')) {
                size_t g = f + 1;
                if (g < src.size() && (src[g] == '+' || src[g] == '-')) ++g;
                if (g < src.size() && dec(src[g])) {
                    f = digits(g, dec);
                    is_float = true;
                }
            }
            if (is_float) e = f;
        }
        Token t{is_float ? T::Float : T::Int, src.substr(p, e - p), 0, 0, {}};
        const std::string text = strip(t.text);
        if (is_float) {
            // strtod, not stod: Python reads 1e999 as inf and 1e-999 as 0.0 where stod throws.
            t.number = Value::real(std::strtod(text.c_str(), nullptr));
        } else {
            try {
                t.number = Value::integer(std::stoll(text));
            } catch (const std::out_of_range &) {
                error(p, "integer literal too large");
            }
        }
        return emit_number(std::move(t), p, e);
    }

    // A string literal, decoded as jinja2 does (Python's unicode-escape).
    size_t string(size_t p) {
        const char q = src[p];
        std::string v;
        size_t k = p + 1;
        for (;; ++k) {
            if (k >= src.size()) error(p, "unexpected end of string");
            const char c = src[k];
            if (c == q) break;
            if (c != '\\') {
                v += c;
                continue;
            }
            if (++k >= src.size()) error(p, "unexpected end of string");
            const char e = src[k];
            const auto hex = [&](size_t n) {
                if (k + n >= src.size()) error(p, "truncated escape");
                const std::string h = src.substr(k + 1, n);
                for (char ch : h)
                    if (!std::isxdigit(static_cast<unsigned char>(ch))) error(p, "truncated escape");
                k += n;
                append_utf8(v, uint32_t(std::stoul(h, nullptr, 16)));
            };
            switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            case 'a': v += '\a'; break;
            case 'b': v += '\b'; break;
            case 'f': v += '\f'; break;
            case 'v': v += '\v'; break;
            case '\n': break;
            case 'x': hex(2); break;
            case 'u': hex(4); break;
            case 'U': hex(8); break;
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t o = 0;
                    size_t n = 0;
                    for (; n < 3 && k < src.size() && src[k] >= '0' && src[k] <= '7'; ++n, ++k)
                        o = o * 8 + uint32_t(src[k] - '0');
                    --k;
                    append_utf8(v, o);
                } else {
                    v += '\\';
                    v += e;
                }
            }
        }
        emit(T::String, std::move(v), p);
        return k + 1;
    }

    void run() {
        while (pos < src.size()) {
            size_t tag = src.find('{', pos);
            while (tag != std::string::npos &&
                   !(tag + 1 < src.size() && (src[tag + 1] == '{' || src[tag + 1] == '%' || src[tag + 1] == '#')))
                tag = src.find('{', tag + 1);
            if (tag == std::string::npos) {
                emit(T::Data, src.substr(pos), pos);
                return;
            }
            const char kind = src[tag + 1];
            const char sign = tag + 2 < src.size() && (src[tag + 2] == '-' || src[tag + 2] == '+') ? src[tag + 2] : 0;
            const size_t begin = pos;
            if (kind == '%' && raw(tag, sign, begin)) continue;
            data(begin, tag, sign, kind == '{');
            const size_t inner = tag + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                size_t q = inner;
                for (; q < src.size(); ++q)
                    if (const size_t n = tag_end(q, "#}", true)) {
                        pos = q + n;
                        break;
                    }
                if (q >= src.size()) error(tag, "Missing end of comment tag");
                continue;
            }
            emit(kind == '{' ? T::VarBegin : T::BlockBegin, src.substr(tag, 2), tag);
            tag_tokens(inner, kind == '{');
        }
    }
};

// jinja2 treats \r\n, \r and \n alike as "\n" and (keep_trailing_newline off) drops one final newline.
std::string normalize_newlines(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\r') {
            out += '\n';
            if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
        } else {
            out += s[k];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

} // namespace

std::vector<Token> lex(std::string_view source, const std::string &name) {
    Lexer lx(normalize_newlines(source), name);
    lx.run();
    lx.sync(lx.src.size());
    lx.out.push_back(Token{T::Eof, "", lx.line, lx.col, {}});
    return std::move(lx.out);
}

} // namespace zaya::jinja
