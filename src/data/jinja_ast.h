// The parsed form of a template: tokens (jinja_lex.cpp), expressions and statements (jinja_parse.cpp), evaluated
// by jinja_render.cpp. Immutable once parsed.
#pragma once
#include "data/jinja_value.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya::jinja {

struct Token {
    enum class Type { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
    Type type;
    std::string text; // Data's text, a name, an operator, a string's decoded value, a number's source
    int line = 1, col = 1;
    Value number; // Int and Float
};

// Splits `source` as jinja2's lexer does under trim_blocks and lstrip_blocks (whitespace control applied, raw blocks
// as Data). Errors name `name`:line:column.
std::vector<Token> lex(std::string_view source, const std::string &name);

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        Const, Name, List, Tuple, Dict, Getattr, Getitem, Slice, Call, Filter, Test, Neg, Pos, Not, Binary, And, Or,
        Compare, CondExpr, NsRef
    };
    Kind kind;
    int line = 0;
    Value value;      // Const
    std::string name; // Name, Getattr's attribute, Filter/Test name, Binary operator, NsRef's namespace
    std::string attr; // NsRef's attribute
    // Operands: the object first (Getattr, Getitem, Call, Filter, Test, unary, Binary), then arguments. Dict holds
    // keys and values alternately; Slice holds object, start, stop, step (null when absent); CondExpr holds test,
    // then-value, else-value (null when absent); Compare holds its first operand then one per operator in `ops`.
    std::vector<ExprP> args;
    std::vector<std::pair<std::string, ExprP>> kwargs;
    std::vector<std::string> ops;
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

struct Stmt {
    enum class Kind {
        Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Generation
    };
    Kind kind;
    int line = 0;
    std::string text;               // Text; Macro's name
    std::vector<ExprP> exprs;       // Output: the expression; If: the conditions; For: target, iterable, filter
                                    // (or null); Set: target, value; SetBlock: target, filter (or null);
                                    // CallBlock: the call; FilterBlock: the filter (its operand null)
    std::vector<Body> bodies;       // If: one per condition then the else; For: body, else; others: body
    std::vector<std::string> params; // Macro and CallBlock parameters
    std::vector<ExprP> defaults;    // defaults of the last parameters
    bool recursive = false;         // For
    // Macro and CallBlock: whether the body names varargs, kwargs or caller, which lets calls pass extra
    // positional arguments, unknown keywords or a caller (jinja2 refuses them otherwise).
    bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Program {
    std::string name;
    Body body;
};

// Parses tokens into a program; checks filter and test names as jinja2's compiler does.
void parse(std::vector<Token> tokens, Program &program);

// Filters and tests known by name (jinja_filters.cpp, jinja_tests.cpp), for the parse-time check.
bool has_filter(const std::string &name);
bool has_test(const std::string &name);

} // namespace zaya::jinja
