// Structured outputs: a JSON schema (OpenAI's `response_format: {"type": "json_schema", "json_schema": {"schema":
// ...}}`, `zaya generate --json-schema FILE`) compiled into nodes, and SchemaGrammar, the byte acceptor of the texts
// of the values it describes — what JsonGrammar (json_grammar.h) is to any JSON object, and with the same whitespace
// and string rules. JSON mode (json_constraint.h) drives either through it.
//
// What a schema may say (OpenAI's strict subset, and more): "type" object (its "properties", written in the
// schema's order, keys as JSON writes them; those not "required" may be left out; other keys after them if
// "additionalProperties" is true or a schema, of their values: pydantic's dict[str, X]; without properties, keys
// by "propertyNames" or one "patternProperties" pattern: dict[Literal[...], X], dict[constr(pattern=...), X]),
// array ("prefixItems": by position, pydantic's tuples; "items", false for none after them; "minItems",
// "maxItems"), string ("minLength", "maxLength", "pattern", "format": date-time, date, time, duration, email,
// hostname, ipv4, ipv6, uuid; regex.h), number and integer ("minimum", "maximum", "exclusiveMinimum",
// "exclusiveMaximum", "multipleOf"), boolean, null, or a list of them; "enum" and "const" (each value written
// compactly, as JSON serialises it); "uniqueItems" where every item can be made unlike the others by writing on
// (strings without maxLength, pattern or format; numbers without bounds or step: pydantic's set[str], set[int]);
// "anyOf" (a value of any alternative: pydantic's Union[Cat, Dog], int | float, str | date); "oneOf" whose
// alternatives no value can match two of — they begin with different bytes, or they are objects with a required
// property of different constant values (pydantic's discriminated unions); "allOf" of one schema (pydantic v1's
// reference with a description); "$ref" to "#" or any place in the schema by JSON pointer, "#/$defs/NAME",
// "#/definitions/NAME", "#/properties/a" (zod-to-json-schema's reuse; recursion included); {} or
// true for any value. Every part must admit a finite value. Annotations are ignored (title, description, default,
// examples, discriminator, other formats, $schema, $id, strict). Anything that would constrain values in ways the
// acceptor does not enforce (not, if, contains, ...) is refused, naming it, rather than silently not enforced.
// The root must be an object.
//
// Alternatives that the text so far fits several of are read side by side (a reading each, equal readings merged:
// Union[Cat, Dog] reads two until a key or value tells them apart); at most kMaxReadings at once, later ones dropped
// (what is written still matches the schema; only some texts of the dropped alternatives are then not offered).
#pragma once
#include "core/copy_on_write.h"
#include "infer/json_bounds.h"
#include "infer/json_grammar.h"
#include "infer/regex.h"

#include <nlohmann/json.hpp>

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct SchemaNode {
    enum class Kind : uint8_t {
        Any,       // any JSON value (object_only: any object)
        Object,    // keys[i] then children[i], in order; required[i] says which may not be left out; then, with
                   // `extra`, any other keys, each with a value of node `extra`
        Array,     // prefix[k] at position k, then children[0] each; min_items to max_items of them (−1: no
                   // maximum; children[0] is −1 when no item may follow the prefix: max_items says so too)
        String,    // a string of min_length to max_length characters
        Number,    // a number in `range` (constrained: written without exponent)
        Integer,   // a number without fraction or exponent, in `range`
        Literals,  // one of `literals` exactly (enum, const, boolean, null)
        Union,     // one of `children`; read as one of `leaves` (`firsts`: the bytes each may begin with)
    };
    Kind kind = Kind::Any;
    bool object_only = false;
    std::vector<std::string> keys;     // Object: each key as JSON text, quotes included
    std::vector<std::string> names;    // Object: each key's name (the text decoded)
    int32_t extra = -1;                // Object: additionalProperties' schema, or −1: no other keys
    int64_t min_props = 0, max_props = -1; // Object: minProperties, maxProperties (−1: none)
    // Object without properties: what its keys must be (propertyNames, patternProperties): a pattern (null: any)
    // within key_min to key_max characters; key_names is propertyNames' node, read into them (or, an enum, into
    // keys) once compiled.
    std::shared_ptr<const Regex> key_pattern;
    uint32_t key_min = 0, key_max = UINT32_MAX;
    int32_t key_names = -1;
    std::vector<int32_t> prefix;       // Array: prefixItems, by position
    std::vector<uint8_t> required;     // Object
    std::vector<int32_t> children;     // Object: per key; Array: the items; Union: the alternatives
    std::vector<int32_t> leaves;          // Union: the nodes other than unions it may be, through nested unions
    std::vector<std::bitset<256>> firsts; // Union: per leaf
    std::vector<std::string> literals; // Literals: compact JSON texts
    int64_t min_items = 0, max_items = -1;
    bool unique_items = false;         // Array: no item equal (as a value) to an earlier one
    uint32_t min_length = 0, max_length = UINT32_MAX; // String: characters (code points)
    std::shared_ptr<const Regex> pattern;             // String: its pattern or format (with the lengths), or null
    NumberRange range;                                // Number, Integer (Integer: closed integer ends)
};

class JsonSchema {
  public:
    // Fails (zaya::Error) naming the place in the schema ("schema.properties.age: 'minimum' is not supported ...").
    // Keys keep their order when the schema was parsed as an ordered_json.
    // compact: its texts have no whitespace between tokens (as nlohmann's dump() writes them), not even before the
    // root (tool calls, infer/tool_calls.h: a weak model cannot spend its tokens on spaces).
    static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json &schema, bool compact = false);
    // JSON mode without a schema: any object.
    static std::shared_ptr<const JsonSchema> any_object();

    const SchemaNode &node(int32_t i) const { return nodes_[size_t(i)]; }
    bool compact() const { return compact_; }
    static constexpr int32_t kRoot = 0;

  private:
    std::vector<SchemaNode> nodes_;
    bool compact_ = false;
    friend class SchemaCompiler;
};

class SchemaGrammar {
  public:
    explicit SchemaGrammar(std::shared_ptr<const JsonSchema> schema);
    // Masks copy the grammar for most tokens they read: the one reading inline, the others out of line.
    SchemaGrammar(const SchemaGrammar &o) : schema_(o.schema_), main_(o.main_) {
        if (!o.more_.empty()) copy_more(o);
    }
    SchemaGrammar(SchemaGrammar &&) = default;
    SchemaGrammar &operator=(const SchemaGrammar &) = default;
    SchemaGrammar &operator=(SchemaGrammar &&) = default;

    // Whether `byte` can follow what was read; if so, reads it. After a refused byte the state is undefined: to test
    // a byte, feed a copy (as JsonConstraint does).
    bool feed(uint8_t byte);
    bool feed(std::string_view bytes) {
        for (char b : bytes)
            if (!feed(uint8_t(b))) return false;
        return true;
    }
    bool complete() const; // the root value is closed (in every reading alike: they read the same bytes)
    // Every reading is inside a string of plain text, without a pattern.
    bool in_plain_string() const;
    // Readings of the text so far: one unless alternatives (anyOf, oneOf) that it fits several of are under way.
    size_t readings() const { return 1 + more_.size(); }
    static constexpr size_t kMaxReadings = 16;
    // Reading r's string value under way, or null: while a token's bytes stay inside it, only this lexer changes
    // (JsonConstraint reads them with a copy of it instead of a copy of the whole state).
    const StringLexer *string_lexer(size_t r = 0) const;

  private:
    struct Frame {
        int32_t node = 0;
        uint8_t phase = 0;   // per kind: 0 before the value's first byte, then see step()
        int32_t next = 0;    // Object: the first property that may still come; Array: items so far
        bool free_key = false; // Object: the key read is not a declared one (its value: the node's `extra`)
        int32_t props = 0;     // Object: properties written
        bool record = false;   // an item of a uniqueItems array: its text is kept (in `text`) to compare
        // Array with uniqueItems: the items so far, as values; Object: the free keys so far (where checked)
        CopyOnWrite<std::vector<nlohmann::json>> seen;
        std::string text;    // the bytes so far: Object, of the key; Literals, bounded numbers, unique items
        StringLexer string;  // String
        NumberLexer number{false}; // Number, Integer
        JsonGrammar any{false};    // Any
        bool operator==(const Frame &) const = default;
    };
    // One reading: the values open, innermost last (empty: the root value is complete), and the whitespace run.
    struct Reading {
        std::vector<Frame> stack;
        WhitespaceRun ws;
        bool operator==(const Reading &) const = default;
    };
    // Done: b closed the value; Ended: the value ended before b; Child: a child frame was pushed to read b; Union:
    // the frame is a union's, to be replaced by its leaves that may begin with b.
    enum class Step : uint8_t { Refused, Taken, Done, Ended, Child, Union };
    static constexpr uint8_t kAfterValue = 5; // an object's or array's phase once a child value is complete
    // Reads b in reading r; alternatives begun at b beside the first go to `forks`, each still to read b.
    bool feed_reading(Reading &r, uint8_t b, std::vector<Reading> &forks) const;
    // Steps push children onto `stack` (f, its top, may dangle after a push).
    Step step(std::vector<Frame> &stack, Frame &f, uint8_t b) const;
    Step object_step(std::vector<Frame> &stack, Frame &f, const SchemaNode &n, uint8_t b) const;
    Step array_step(std::vector<Frame> &stack, Frame &f, const SchemaNode &n, uint8_t b) const;
    Step literal_step(Frame &f, const SchemaNode &n, uint8_t b) const;
    Step free_key_step(Frame &f, const SchemaNode &n, uint8_t b) const;
    static bool required_left(const Frame &f, const SchemaNode &n);
    static bool free_keys(const Frame &f, const SchemaNode &n);
    static bool key_fits(const Frame &f, const SchemaNode &n, int32_t k);
    static bool key_may_come(const Frame &f, const SchemaNode &n);
    Frame frame_for(int32_t node) const;
    bool between_tokens(const Frame &f) const; // where whitespace may come
    bool in_plain_string(const Reading &r) const;
    static bool distinct_item(std::vector<Frame> &stack);
    static bool first_time(CopyOnWrite<std::vector<nlohmann::json>> &seen, nlohmann::json value);
    void copy_more(const SchemaGrammar &o);

    std::shared_ptr<const JsonSchema> schema_;
    Reading main_;              // the first reading
    std::vector<Reading> more_; // the others (none, and no allocation, unless alternatives are under way)
};

} // namespace zaya
