// The parser: jinja2's grammar (parser.py) for the statements and expressions chat templates use.
#include "data/jinja_ast.h"

#include "core/error.h"

#include <algorithm>
#include <initializer_list>

namespace zaya::jinja {

namespace {

using T = Token::Type;
using EK = Expr::Kind;
using SK = Stmt::Kind;

std::string describe(const Token &t) {
    switch (t.type) {
    case T::Eof: return "end of template";
    case T::VarEnd: return "end of print statement";
    case T::BlockEnd: return "end of statement block";
    case T::Data: return "template data";
    case T::VarBegin: return "begin of print statement";
    case T::BlockBegin: return "begin of statement block";
    default: return t.text;
    }
}

struct Parser {
    std::vector<Token> toks;
    const std::string &name;
    size_t p = 0;
    // Inside an if statement or conditional expression, an unknown filter or test fails only when it runs, as in
    // jinja2 (its "soft frames").
    int soft = 0;
    // Names seen so far, to tell whether a macro's body uses its special variables.
    int seen_varargs = 0, seen_kwargs = 0, seen_caller = 0;
    // Enclosing for-loop bodies within the current macro (break and continue need one).
    int loops = 0;
    // Nesting of expressions and blocks: a bound keeps a hostile template from overflowing the stack.
    int nesting = 0;
    struct Nest {
        Parser &ps;
        explicit Nest(Parser &p_) : ps(p_) {
            if (++ps.nesting > 256) ps.error_at(ps.cur(), "template nested too deeply");
        }
        ~Nest() { --ps.nesting; }
        Nest(const Nest &) = delete;
        Nest &operator=(const Nest &) = delete;
    };

    const Token &cur() const { return toks[p]; }
    const Token &peek(size_t n = 1) const { return toks[std::min(p + n, toks.size() - 1)]; }
    [[noreturn]] void error_at(const Token &t, const std::string &msg) const {
        fail("{}:{}:{}: {}", name, t.line, t.col, msg);
    }
    bool is_op(const char *op) const { return cur().type == T::Op && cur().text == op; }
    bool is_name(const char *n) const { return cur().type == T::Name && cur().text == n; }
    bool skip_op(const char *op) {
        if (!is_op(op)) return false;
        ++p;
        return true;
    }
    bool skip_name(const char *n) {
        if (!is_name(n)) return false;
        ++p;
        return true;
    }
    void expect_op(const char *op) {
        if (!skip_op(op)) error_at(cur(), fmt::format("expected '{}', got '{}'", op, describe(cur())));
    }
    void expect_type(T type, const char *what) {
        if (cur().type != type) error_at(cur(), fmt::format("expected {}, got '{}'", what, describe(cur())));
        ++p;
    }
    std::string expect_name() {
        if (cur().type != T::Name) error_at(cur(), fmt::format("expected name, got '{}'", describe(cur())));
        return toks[p++].text;
    }

    ExprP node(EK k, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    // --- expressions ---

    ExprP expression(bool condexpr = true) {
        ExprP e = or_expr();
        while (condexpr && is_name("if")) {
            const int line = cur().line;
            ++p;
            ++soft;
            auto c = node(EK::CondExpr, line);
            c->args.push_back(or_expr());
            c->args.push_back(std::move(e));
            c->args.push_back(skip_name("else") ? expression() : nullptr);
            --soft;
            e = std::move(c);
        }
        return e;
    }
    ExprP binary(EK k, const std::string &op, ExprP a, ExprP b, int line) {
        auto e = node(k, line);
        e->name = op;
        e->args.push_back(std::move(a));
        e->args.push_back(std::move(b));
        return e;
    }
    ExprP or_expr() {
        ExprP e = and_expr();
        while (is_name("or")) {
            const int line = toks[p++].line;
            e = binary(EK::Or, "or", std::move(e), and_expr(), line);
        }
        return e;
    }
    ExprP and_expr() {
        ExprP e = not_expr();
        while (is_name("and")) {
            const int line = toks[p++].line;
            e = binary(EK::And, "and", std::move(e), not_expr(), line);
        }
        return e;
    }
    ExprP not_expr() {
        const Nest nest(*this);
        if (is_name("not")) {
            const int line = toks[p++].line;
            auto e = node(EK::Not, line);
            e->args.push_back(not_expr());
            return e;
        }
        return compare();
    }
    ExprP compare() {
        const int line = cur().line;
        ExprP first = math1();
        ExprP cmp;
        while (true) {
            std::string op;
            if (cur().type == T::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                 cur().text == ">" || cur().text == ">=")) {
                op = toks[p++].text;
            } else if (is_name("in")) {
                ++p;
                op = "in";
            } else if (is_name("not") && peek().type == T::Name && peek().text == "in") {
                p += 2;
                op = "notin";
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(EK::Compare, line);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }
    ExprP math1() {
        ExprP e = concat();
        while (is_op("+") || is_op("-")) {
            const Token &t = toks[p++];
            e = binary(EK::Binary, t.text, std::move(e), concat(), t.line);
        }
        return e;
    }
    ExprP concat() {
        ExprP e = math2();
        while (is_op("~")) {
            const int line = toks[p++].line;
            e = binary(EK::Binary, "~", std::move(e), math2(), line);
        }
        return e;
    }
    ExprP math2() {
        ExprP e = power();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token &t = toks[p++];
            e = binary(EK::Binary, t.text, std::move(e), power(), t.line);
        }
        return e;
    }
    ExprP power() {
        ExprP e = unary();
        while (is_op("**")) {
            const int line = toks[p++].line;
            e = binary(EK::Binary, "**", std::move(e), unary(), line);
        }
        return e;
    }
    ExprP unary(bool with_filter = true) {
        const Nest nest(*this);
        ExprP e;
        if (is_op("-") || is_op("+")) {
            const Token &t = toks[p++];
            e = node(t.text == "-" ? EK::Neg : EK::Pos, t.line);
            e->args.push_back(unary(false));
        } else {
            e = primary();
        }
        e = postfix(std::move(e));
        if (with_filter) e = filter_expr(std::move(e));
        return e;
    }
    ExprP primary(bool with_namespace = false) {
        const Token &t = cur();
        if (t.type == T::Name) {
            ++p;
            if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
                auto e = node(EK::Const, t.line);
                e->value = Value::boolean(t.text == "true" || t.text == "True");
                return e;
            }
            if (t.text == "none" || t.text == "None") {
                auto e = node(EK::Const, t.line);
                e->value = Value::none();
                return e;
            }
            if (with_namespace && is_op(".")) {
                ++p;
                auto e = node(EK::NsRef, t.line);
                e->name = t.text;
                e->attr = expect_name();
                return e;
            }
            auto e = node(EK::Name, t.line);
            e->name = t.text;
            if (t.text == "varargs") ++seen_varargs;
            if (t.text == "kwargs") ++seen_kwargs;
            if (t.text == "caller") ++seen_caller;
            return e;
        }
        if (t.type == T::String) {
            auto e = node(EK::Const, t.line);
            std::string s;
            while (cur().type == T::String) s += toks[p++].text;
            e->value = Value::string(std::move(s));
            return e;
        }
        if (t.type == T::Int || t.type == T::Float) {
            ++p;
            auto e = node(EK::Const, t.line);
            e->value = t.number;
            return e;
        }
        if (is_op("(")) {
            ++p;
            ExprP e = tuple(false, true, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            ++p;
            auto e = node(EK::List, t.line);
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(expression());
            }
            expect_op("]");
            return e;
        }
        if (is_op("{")) {
            ++p;
            auto e = node(EK::Dict, t.line);
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(expression());
                expect_op(":");
                e->args.push_back(expression());
            }
            expect_op("}");
            return e;
        }
        error_at(t, fmt::format("unexpected '{}'", describe(t)));
    }
    bool tuple_end(std::initializer_list<const char *> extra) const {
        const Token &t = cur();
        if (t.type == T::VarEnd || t.type == T::BlockEnd || t.type == T::Eof) return true;
        if (t.type == T::Op && t.text == ")") return true;
        for (const char *x : extra)
            if (t.type == T::Name && t.text == x) return true;
        return false;
    }
    // jinja2's parse_tuple: comma-separated expressions; one without a comma is itself.
    ExprP tuple(bool simplified, bool condexpr, bool explicit_parens, std::initializer_list<const char *> extra = {},
                bool with_namespace = false) {
        const int line = cur().line;
        auto e = node(EK::Tuple, line);
        bool comma = false;
        while (true) {
            if (!e->args.empty()) expect_op(",");
            if (tuple_end(extra)) break;
            e->args.push_back(simplified ? primary(with_namespace) : expression(condexpr));
            if (is_op(",")) comma = true;
            else break;
        }
        if (!comma) {
            if (!e->args.empty()) return std::move(e->args[0]);
            if (!explicit_parens) error_at(cur(), fmt::format("Expected an expression, got '{}'", describe(cur())));
        }
        return e;
    }
    ExprP postfix(ExprP e) {
        while (true) {
            if (is_op(".")) {
                const int line = toks[p++].line;
                if (cur().type == T::Name) {
                    auto g = node(EK::Getattr, line);
                    g->name = toks[p++].text;
                    g->args.push_back(std::move(e));
                    e = std::move(g);
                } else if (cur().type == T::Int) {
                    auto g = node(EK::Getitem, line);
                    g->args.push_back(std::move(e));
                    auto k = node(EK::Const, line);
                    k->value = toks[p++].number;
                    g->args.push_back(std::move(k));
                    e = std::move(g);
                } else {
                    error_at(cur(), "expected name or number");
                }
            } else if (is_op("[")) {
                const int line = toks[p++].line;
                std::vector<ExprP> subs;
                while (!is_op("]")) {
                    if (!subs.empty()) expect_op(",");
                    subs.push_back(subscribed());
                }
                expect_op("]");
                if (subs.empty()) error_at(cur(), "expected subscript expression");
                if (subs.size() == 1 && subs[0]->kind == EK::Slice) {
                    subs[0]->args[0] = std::move(e);
                    e = std::move(subs[0]);
                    continue;
                }
                auto g = node(EK::Getitem, line);
                g->args.push_back(std::move(e));
                if (subs.size() == 1) {
                    g->args.push_back(std::move(subs[0]));
                } else {
                    auto tup = node(EK::Tuple, line);
                    tup->args = std::move(subs);
                    g->args.push_back(std::move(tup));
                }
                e = std::move(g);
            } else if (is_op("(")) {
                e = call(std::move(e));
            } else {
                return e;
            }
        }
    }
    ExprP subscribed() {
        const int line = cur().line;
        ExprP start;
        if (!is_op(":")) {
            start = expression();
            if (!is_op(":")) return start;
        }
        ++p;
        auto s = node(EK::Slice, line);
        s->args.push_back(nullptr);
        s->args.push_back(std::move(start));
        s->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : expression());
        if (skip_op(":")) s->args.push_back(is_op("]") || is_op(",") ? nullptr : expression());
        else s->args.push_back(nullptr);
        return s;
    }
    void call_args(Expr &e) {
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            need_comma = true;
            if (is_op("*") || is_op("**")) error_at(cur(), "*args and **kwargs in calls are not supported");
            if (cur().type == T::Name && peek().type == T::Op && peek().text == "=") {
                std::string key = toks[p].text;
                p += 2;
                e.kwargs.emplace_back(std::move(key), expression());
            } else {
                if (!e.kwargs.empty()) error_at(cur(), "invalid syntax for function call expression");
                e.args.push_back(expression());
            }
        }
        expect_op(")");
    }
    ExprP call(ExprP fn) {
        auto e = node(EK::Call, cur().line);
        e->args.push_back(std::move(fn));
        call_args(*e);
        return e;
    }
    ExprP filter_expr(ExprP e) {
        while (true) {
            if (is_op("|")) {
                ++p;
                e = filter(std::move(e));
            } else if (is_name("is")) {
                e = test(std::move(e));
            } else if (is_op("(")) {
                e = call(std::move(e));
            } else {
                return e;
            }
        }
    }
    // One filter application after the '|' (the operand may be null: filter blocks and set blocks).
    ExprP filter(ExprP operand) {
        const Token &t = cur();
        auto e = node(EK::Filter, t.line);
        e->name = expect_name();
        while (skip_op(".")) e->name += "." + expect_name();
        if (!soft && !has_filter(e->name)) error_at(t, fmt::format("No filter named '{}'.", e->name));
        e->args.push_back(std::move(operand));
        if (is_op("(")) call_args(*e);
        return e;
    }
    ExprP test(ExprP operand) {
        const int line = toks[p++].line;
        const bool negated = skip_name("not");
        const Token &t = cur();
        auto e = node(EK::Test, line);
        e->name = expect_name();
        while (skip_op(".")) e->name += "." + expect_name();
        if (!soft && !has_test(e->name)) error_at(t, fmt::format("No test named '{}'.", e->name));
        e->args.push_back(std::move(operand));
        if (is_op("(")) {
            call_args(*e);
        } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int ||
                    cur().type == T::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) error_at(cur(), "You cannot chain multiple tests with is");
            e->args.push_back(postfix(primary()));
        }
        if (!negated) return e;
        auto n = node(EK::Not, line);
        n->args.push_back(std::move(e));
        return n;
    }

    // --- statements ---

    StmtP stmt(SK k, int line) {
        auto s = std::make_unique<Stmt>();
        s->kind = k;
        s->line = line;
        return s;
    }

    // Template data and tags up to a block tag named in `ends` (left as the current token, after the '{%').
    Body subparse(std::initializer_list<const char *> ends) {
        Body body;
        while (true) {
            const Token &t = cur();
            if (t.type == T::Eof) {
                if (ends.size() == 0) return body;
                std::string want;
                for (const char *x : ends) want += std::string(want.empty() ? "" : " or ") + "'" + x + "'";
                error_at(t, fmt::format("unexpected end of template, expected {}", want));
            }
            if (t.type == T::Data) {
                auto s = stmt(SK::Text, t.line);
                s->text = t.text;
                body.push_back(std::move(s));
                ++p;
            } else if (t.type == T::VarBegin) {
                ++p;
                auto s = stmt(SK::Output, cur().line);
                s->exprs.push_back(tuple(false, true, false));
                expect_type(T::VarEnd, "end of print statement");
                body.push_back(std::move(s));
            } else if (t.type == T::BlockBegin) {
                ++p;
                for (const char *x : ends)
                    if (is_name(x)) return body;
                body.push_back(statement(ends));
                expect_type(T::BlockEnd, "end of statement block");
            } else {
                error_at(t, fmt::format("unexpected '{}'", describe(t)));
            }
        }
    }
    Body block(std::initializer_list<const char *> ends) {
        skip_op(":");
        expect_type(T::BlockEnd, "end of statement block");
        return subparse(ends);
    }
    void end_tag(const char *tag) {
        if (!skip_name(tag)) error_at(cur(), fmt::format("expected '{}'", tag));
    }

    StmtP statement(std::initializer_list<const char *> ends) {
        const Nest nest(*this);
        const Token &t = cur();
        if (t.type != T::Name) error_at(t, "tag name expected");
        const std::string tag = t.text;
        const int line = t.line;
        if (tag == "if") {
            ++p;
            auto s = stmt(SK::If, line);
            ++soft;
            while (true) {
                s->exprs.push_back(tuple(false, false, false));
                s->bodies.push_back(block({"elif", "else", "endif"}));
                if (skip_name("elif")) continue;
                if (skip_name("else")) {
                    s->bodies.push_back(block({"endif"}));
                    end_tag("endif");
                } else {
                    end_tag("endif");
                }
                break;
            }
            --soft;
            return s;
        }
        // Loops, macros and blocks are frames of their own in jinja2: unknown filters fail at compile time again.
        const int saved_soft = soft;
        struct Restore {
            int &s;
            int v;
            ~Restore() { s = v; }
        } restore{soft, saved_soft};
        if (tag == "for") {
            ++p;
            soft = 0;
            auto s = stmt(SK::For, line);
            s->exprs.push_back(target(false, {"in"}));
            end_tag("in");
            s->exprs.push_back(tuple(false, false, false, {"recursive"}));
            s->exprs.push_back(skip_name("if") ? expression() : nullptr);
            s->recursive = skip_name("recursive");
            ++loops;
            s->bodies.push_back(block({"endfor", "else"}));
            --loops;
            if (skip_name("else")) {
                s->bodies.push_back(block({"endfor"}));
            } else {
                s->bodies.emplace_back();
            }
            end_tag("endfor");
            return s;
        }
        if (tag == "set") {
            ++p;
            ExprP tgt = target(true, {});
            if (skip_op("=")) {
                auto s = stmt(SK::Set, line);
                s->exprs.push_back(std::move(tgt));
                s->exprs.push_back(tuple(false, true, false));
                return s;
            }
            auto s = stmt(SK::SetBlock, line);
            s->exprs.push_back(std::move(tgt));
            soft = 0;
            if (skip_op("|")) s->exprs.push_back(filter_chain());
            else s->exprs.push_back(nullptr);
            s->bodies.push_back(block({"endset"}));
            end_tag("endset");
            return s;
        }
        if (tag == "macro" || tag == "call") {
            ++p;
            soft = 0;
            auto s = stmt(tag == "macro" ? SK::Macro : SK::CallBlock, line);
            if (tag == "macro") {
                s->text = expect_name();
                signature(*s);
            } else {
                if (is_op("(")) signature(*s);
                ExprP c = expression();
                if (c->kind != EK::Call) error_at(toks[p - 1], "expected call");
                s->exprs.push_back(std::move(c));
            }
            const char *end = tag == "macro" ? "endmacro" : "endcall";
            const int va = seen_varargs, kw = seen_kwargs, ca = seen_caller, outer_loops = loops;
            loops = 0;
            s->bodies.push_back(block({end}));
            loops = outer_loops;
            s->uses_varargs = seen_varargs > va;
            s->uses_kwargs = seen_kwargs > kw;
            s->uses_caller = seen_caller > ca;
            end_tag(end);
            return s;
        }
        if (tag == "filter") {
            ++p;
            soft = 0;
            auto s = stmt(SK::FilterBlock, line);
            s->exprs.push_back(filter_chain());
            s->bodies.push_back(block({"endfilter"}));
            end_tag("endfilter");
            return s;
        }
        if (tag == "generation") {
            ++p;
            auto s = stmt(SK::Generation, line);
            const int outer_loops = loops;
            loops = 0;
            s->bodies.push_back(block({"endgeneration"}));
            loops = outer_loops;
            end_tag("endgeneration");
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (!loops) error_at(t, fmt::format("'{}' outside loop", tag));
            ++p;
            return stmt(tag == "break" ? SK::Break : SK::Continue, line);
        }
        std::string msg = fmt::format("unexpected '{}'", tag);
        if (ends.size()) {
            std::string want;
            for (const char *x : ends) want += std::string(want.empty() ? "" : ", ") + "'" + x + "'";
            msg += " (expected " + want + ")";
        } else if (tag.starts_with("end") || tag == "else" || tag == "elif") {
            msg += " (no block is open)";
        } else {
            msg = fmt::format("unknown tag '{}'", tag);
        }
        error_at(t, msg);
    }
    // A filter chain without operand: `upper | replace('a', 'b')`.
    ExprP filter_chain() {
        ExprP e = filter(nullptr);
        while (skip_op("|")) e = filter(std::move(e));
        return e;
    }
    void signature(Stmt &s) {
        expect_op("(");
        while (!is_op(")")) {
            if (!s.params.empty()) expect_op(",");
            s.params.push_back(expect_name());
            if (skip_op("=")) s.defaults.push_back(expression());
            else if (!s.defaults.empty()) error_at(cur(), "non-default argument follows default argument");
        }
        expect_op(")");
    }
    // An assignment target: a name, a namespace attribute (set only) or a tuple of names.
    ExprP target(bool with_namespace, std::initializer_list<const char *> extra) {
        const Token &t = cur();
        ExprP e = tuple(true, true, false, extra, with_namespace);
        const auto ok = [](const Expr &x) { return x.kind == EK::Name || x.kind == EK::NsRef; };
        bool fine = ok(*e);
        if (e->kind == EK::Tuple) {
            fine = true;
            for (const auto &a : e->args) fine = fine && a->kind == EK::Name;
        }
        if (!fine) error_at(t, "can't assign to this expression");
        return e;
    }
};

} // namespace

void parse(std::vector<Token> tokens, Program &program) {
    Parser ps{std::move(tokens), program.name};
    program.body = ps.subparse({});
}

} // namespace zaya::jinja
