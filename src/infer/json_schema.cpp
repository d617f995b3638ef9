#include "infer/json_schema.h"

#include "core/error.h"
#include "core/hex.h"
#include "core/json_depth.h"
#include "core/utf8.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <set>

namespace zaya {

using ojson = nlohmann::ordered_json;

namespace {

// Keywords that constrain values in ways the acceptor does not enforce: refused, not ignored.
constexpr const char *kUnsupported[] = {"not", "if", "then", "else", "contains", "dependentRequired",
                                        "dependentSchemas", "unevaluatedProperties", "unevaluatedItems"};

constexpr const char *kSupported =
    "type, properties, required, additionalProperties, minProperties, maxProperties, items, prefixItems, minItems, "
    "maxItems, uniqueItems, minLength, maxLength, pattern, format, minimum, maximum, exclusiveMinimum, "
    "exclusiveMaximum, multipleOf, propertyNames, patternProperties (one pattern), enum, const, anyOf, oneOf, "
    "allOf of one schema, $ref";

// What may not stand beside "allOf" (its one schema is the node; an intersection with more is not built).
constexpr const char *kBesideAllOf[] = {"type",     "properties", "required", "additionalProperties", "items",
                                        "minItems", "maxItems",   "enum",     "const",                "anyOf",
                                        "oneOf",    "$ref"};

// The formats OpenAI's structured outputs enforce, as patterns (regex.h) of strings of them: RFC 3339's date-time,
// date, time (full-time) and duration (its Appendix A), RFC 5321's address with RFC 1123 hostnames, dotted-quad
// IPv4, RFC 4291's IPv6 text forms (without the embedded-IPv4 ones), RFC 4122's UUID. Each is a subset where parsers
// differ (no year 0, no leap second, 'T' and 'Z' upper-case), so that what is written parses (Python's datetime,
// pydantic).
// Other formats are annotations (JSON Schema's default) and ignored.
constexpr const char *kDate = // years 0001-9999 (Python's), days the month has (February 29 in any year)
    "(000[1-9]|00[1-9]\\d|0[1-9]\\d\\d|[1-9]\\d{3})-"
    "((0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31|02-29)";
constexpr const char *kTime = // no leap second, at most microseconds, upper-case Z: what strict parsers take
    "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
constexpr const char *kHostname =
    "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
constexpr const char *kDurTime = "T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S)";
constexpr const char *kH16 = "[0-9a-fA-F]{1,4}";

std::string format_pattern(const std::string &format) {
    const std::string date = kDate, time = kTime, host = kHostname, dur_time = kDurTime, h = kH16;
    const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    if (format == "date-time") return "^" + date + "T" + time + "$";
    if (format == "date") return "^" + date + "$";
    if (format == "time") return "^" + time + "$";
    if (format == "duration")
        return "^P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(" + dur_time + ")?|" + dur_time + "|\\d+W)$";
    if (format == "email") return "^" + atext + "(\\." + atext + ")*@" + host + "$";
    if (format == "hostname") return "^" + host + "$";
    if (format == "ipv4") return "^(" + octet + "\\.){3}" + octet + "$";
    if (format == "ipv6")
        return "^((" + h + ":){7}" + h + "|(" + h + ":){1,7}:|(" + h + ":){1,6}:" + h + "|(" + h + ":){1,5}(:" + h +
               "){1,2}|(" + h + ":){1,4}(:" + h + "){1,3}|(" + h + ":){1,3}(:" + h + "){1,4}|(" + h + ":){1,2}(:" + h +
               "){1,5}|" + h + ":(:" + h + "){1,6}|:((:" + h + "){1,7}|:))$";
    if (format == "uuid") return "^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$";
    return "";
}

// Keywords that constrain a string (its length, its pattern), a number (bounds, step) or an object's keys: applied by
// a node of that type, ignored by the other types (as JSON Schema does), refused where the node is not typed (enum,
// const, anyOf, $ref, no type), since the acceptor would not enforce them there.
constexpr const char *kStringKeys[] = {"minLength", "maxLength", "pattern"};
constexpr const char *kRangeKeys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"};
constexpr const char *kKeyKeys[] = {"propertyNames", "patternProperties"};

void refuse_bounds(const ojson &j, const std::string &path, const char *where) {
    for (const char *k : kStringKeys)
        if (j.contains(k)) fail("{}: '{}' is supported beside \"type\": \"string\" only, not {}", path, k, where);
    for (const char *k : kRangeKeys)
        if (j.contains(k))
            fail("{}: '{}' is supported beside \"type\": \"number\" or \"integer\" only, not {}", path, k, where);
    for (const char *k : kKeyKeys)
        if (j.contains(k)) fail("{}: '{}' is supported beside \"type\": \"object\" only, not {}", path, k, where);
}

// A count keyword (minItems, maxLength, ...): a non-negative integer, or dflt when absent.
uint64_t count_of(const ojson &j, const char *key, uint64_t dflt, const std::string &path) {
    if (!j.contains(key)) return dflt;
    const ojson &v = j[key]; // (parsed, a non-negative integer is unsigned; built in code, it may be signed)
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        fail("{}.{}: must be a non-negative integer, got {}", path, key, v.dump());
    return v.get<uint64_t>();
}

// A string's pattern, or its format's, compiled with its lengths; null if neither constrains it.
std::shared_ptr<const Regex> string_pattern(const ojson &j, const std::string &path, uint32_t min, uint32_t max) {
    std::string source;
    if (j.contains("pattern")) {
        if (!j["pattern"].is_string()) fail("{}.pattern: must be a string, got {}", path, j["pattern"].dump());
        source = j["pattern"].get<std::string>();
    }
    if (j.contains("format") && j["format"].is_string()) {
        const std::string format = format_pattern(j["format"].get<std::string>());
        if (!format.empty() && !source.empty())
            fail("{}: 'pattern' and 'format' together are not supported (one of them)", path);
        if (!format.empty()) source = format;
    }
    if (source.empty() && !j.contains("pattern")) return nullptr;
    try {
        return Regex::compile(source, min, max);
    } catch (const Error &e) {
        fail("{}: {}", path, e.what());
    }
}

NumberRange range_of(const ojson &j, const std::string &path, bool integer) {
    NumberRange r;
    Decimal step;
    std::string said;
    for (const char *k : kRangeKeys) {
        if (!j.contains(k)) continue;
        const ojson &v = j[k];
        if (v.is_boolean())
            fail("{}.{}: must be a number (a boolean is draft 4's form; write the bound itself, as draft 2020-12 "
                 "does)",
                 path, k);
        Decimal d;
        if (!v.is_number() || !Decimal::parse(v.dump(), d))
            fail("{}.{}: must be a finite number, got {}", path, k, v.dump());
        const std::string key = k;
        if (key == "minimum" || key == "exclusiveMinimum") r.limit_low(d, key != "minimum");
        else if (key == "multipleOf") step = d;
        else r.limit_high(d, key != "maximum");
        said += fmt::format("{}{} {}", said.empty() ? "" : ", ", k, v.dump());
    }
    if (integer) r.round_to_integers();
    if (j.contains("multipleOf")) {
        try {
            r.set_step(step, integer);
        } catch (const Error &e) {
            fail("{}: {}", path, e.what());
        }
    } else if (!integer && r.bounded() && !r.empty()) { // a fraction ends, as an unconstrained number's does
        const int64_t digits = NumberLexer::kMaxFractionDigits - NumberRange::kSpareZeros;
        Decimal finest;
        Decimal::parse("1e-" + std::to_string(digits), finest);
        r.set_step(finest, false);
        if (r.empty())
            fail("{}: no number of at most {} digits after the point lies within {}", path, digits, said);
    }
    if (r.empty()) fail("{}: no {} lies within {}", path, integer ? "integer" : "number", said);
    return r;
}

// One token of a $ref's JSON pointer (ref, for messages): percent-escapes (a URI fragment's) decoded, then RFC
// 6901's "~1" → "/" and "~0" → "~".
std::string pointer_token(const std::string &raw, const std::string &path, const std::string &ref) {
    std::string decoded;
    for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != '%') {
            decoded += raw[i];
            continue;
        }
        const int hi = i + 2 < raw.size() ? hex_digit(uint8_t(raw[i + 1])) : -1;
        const int lo = i + 2 < raw.size() ? hex_digit(uint8_t(raw[i + 2])) : -1;
        if (hi < 0 || lo < 0) fail("{}: '{}' has a '%' not followed by two hex digits", path, ref);
        decoded += char(hi * 16 + lo);
        i += 2;
    }
    std::string token;
    for (size_t i = 0; i < decoded.size(); ++i) {
        if (decoded[i] != '~') {
            token += decoded[i];
            continue;
        }
        const char next = i + 1 < decoded.size() ? decoded[i + 1] : '\0';
        if (next != '0' && next != '1') fail("{}: '{}' has a '~' not followed by 0 or 1 (RFC 6901)", path, ref);
        token += next == '0' ? '~' : '/';
        ++i;
    }
    return token;
}

// A JSON pointer token as an array index ("0", or digits without a leading zero), −1 if it is none.
int64_t array_index(const std::string &token) {
    if (token.empty() || token.size() > 9 || (token[0] == '0' && token.size() > 1)) return -1;
    int64_t k = 0;
    for (char c : token) {
        if (c < '0' || c > '9') return -1;
        k = k * 10 + (c - '0');
    }
    return k;
}

} // namespace

class SchemaCompiler {
  public:
    explicit SchemaCompiler(const ojson &root) : root_(root) {}

    std::shared_ptr<const JsonSchema> run(bool compact) {
        auto s = std::make_shared<JsonSchema>();
        s->compact_ = compact;
        nodes_ = &s->nodes_;
        nodes_->emplace_back();
        paths_.emplace_back("schema");
        compile_into(JsonSchema::kRoot, root_, "schema");
        const SchemaNode &root = s->nodes_[0];
        if (root.kind != SchemaNode::Kind::Object && !(root.kind == SchemaNode::Kind::Any && root.object_only))
            fail("schema: the root must be an object (\"type\": \"object\"), as OpenAI's structured outputs require");
        firsts_.assign(nodes_->size(), {});
        first_state_.assign(nodes_->size(), 0);
        size_t leaves = 0;
        for (size_t i = 0; i < nodes_->size(); ++i) {
            if ((*nodes_)[i].kind != SchemaNode::Kind::Union) continue;
            first_bytes(int32_t(i)); // (refuses cycles of unions first)
            const std::vector<int32_t> &l = leaves_of(int32_t(i));
            leaves += l.size();
            if (leaves > kMaxLeaves)
                fail("{}: the schema's alternatives (anyOf, oneOf, $ref), counted through their nesting, pass {}",
                     paths_[i], kMaxLeaves);
            for (int32_t leaf : l) (*nodes_)[i].firsts.push_back(firsts_[size_t(leaf)]);
        }
        for (int32_t i : one_of_) check_one_of(i);
        for (int32_t i : unique_) check_unique(i);
        for (size_t i = 0; i < nodes_->size(); ++i)
            if ((*nodes_)[i].key_names >= 0) key_rules(int32_t(i));
        check_finite();
        return s;
    }

  private:
    int32_t add(const std::string &path) {
        nodes_->emplace_back();
        paths_.push_back(path);
        return int32_t(nodes_->size() - 1);
    }
    int32_t compile(const ojson &j, const std::string &path) {
        const int32_t i = add(path);
        compile_into(i, j, path);
        return i;
    }
    void compile_into(int32_t i, const ojson &j, const std::string &path);
    int32_t reference(const ojson &ref, const std::string &path);
    void object_into(SchemaNode &n, const ojson &j, const std::string &path);
    void array_items(SchemaNode &n, const ojson &j, const std::string &path);
    std::bitset<256> first_bytes(int32_t i);
    const std::vector<int32_t> &leaves_of(int32_t i);
    const SchemaNode &resolved(int32_t i) const; // through unions of one alternative ($ref, allOf)
    bool exclusive(int32_t a, int32_t b) const;  // no value matches both
    void check_one_of(int32_t i) const;
    void check_unique(int32_t i) const;
    void key_rules(int32_t i);
    void check_finite() const;

    const ojson &root_;
    std::vector<SchemaNode> *nodes_ = nullptr;
    std::vector<std::string> paths_;
    std::map<std::string, int32_t> refs_;
    std::vector<int32_t> one_of_;            // the unions that are oneOf
    std::vector<int32_t> unique_;            // the arrays with uniqueItems
    std::vector<std::bitset<256>> firsts_;   // first_bytes per node, once known
    std::vector<uint8_t> first_state_;       // first_bytes: 1 under way, 2 known
    std::vector<int32_t> stamp_;             // leaves_of: the union a node was last added to
    int depth_ = 0;

  public:
    static constexpr int kMaxDepth = 64;         // schema levels (OpenAI allows 10 levels of objects)
    static constexpr size_t kMaxLeaves = 100000; // alternatives of all unions, through nested ones
};

void SchemaCompiler::compile_into(int32_t i, const ojson &j, const std::string &path) {
    // Nesting is bounded: a request's schema is untrusted, and each level is a frame of this recursion (a 1 MB body
    // of nested "items" overflowed the stack) and a longer path.
    if (depth_ >= kMaxDepth) fail("{}: the schema nests deeper than {} levels", path, kMaxDepth);
    struct Level {
        int &d;
        explicit Level(int &depth) : d(++depth) {}
        ~Level() { --d; }
    } level(depth_);
    SchemaNode n;
    if (j.is_boolean()) {
        if (!j.get<bool>()) fail("{}: the schema false admits no value", path);
        (*nodes_)[size_t(i)] = n; // any value
        return;
    }
    if (!j.is_object()) fail("{}: a schema must be an object or a boolean, got {}", path, j.dump());
    for (const char *k : kUnsupported)
        if (j.contains(k))
            fail("{}: '{}' is not supported in structured outputs (supported: {})", path, k, kSupported);
    const bool typed = j.contains("type") && !j.contains("$ref") && !j.contains("const") && !j.contains("enum") &&
                       !j.contains("anyOf") && !j.contains("oneOf") && !j.contains("allOf");
    if (!typed)
        refuse_bounds(j, path,
                      j.contains("type") ? "with $ref, const, enum, anyOf, oneOf or allOf" : "without a type");
    if (j.contains("allOf")) {
        const ojson &a = j["allOf"];
        if (!a.is_array() || a.empty()) fail("{}.allOf: must be a non-empty array of schemas", path);
        if (a.size() > 1)
            fail("{}.allOf: {} schemas: only allOf of one schema is supported (a value of all of them is not built)",
                 path, a.size());
        for (const char *k : kBesideAllOf)
            if (j.contains(k)) fail("{}: '{}' beside allOf is not supported (put it inside allOf's schema)", path, k);
        n.kind = SchemaNode::Kind::Union; // one alternative, as a $ref
        n.children = {compile(a[0], path + ".allOf[0]")};
    } else if (j.contains("$ref")) {
        const int32_t target = reference(j["$ref"], path + ".$ref");
        n.kind = SchemaNode::Kind::Union; // one alternative: the referenced node, chosen by its own first bytes
        n.children = {target};
    } else if (j.contains("const")) {
        n.kind = SchemaNode::Kind::Literals;
        n.literals = {j["const"].dump()};
    } else if (j.contains("enum")) {
        const ojson &e = j["enum"];
        if (!e.is_array() || e.empty()) fail("{}.enum: must be a non-empty array", path);
        n.kind = SchemaNode::Kind::Literals;
        for (const ojson &v : e) n.literals.push_back(v.dump());
    } else if (j.contains("anyOf") || j.contains("oneOf")) {
        const char *key = j.contains("anyOf") ? "anyOf" : "oneOf";
        if (j.contains("anyOf") && j.contains("oneOf")) fail("{}: anyOf and oneOf together are not supported", path);
        const ojson &a = j[key];
        if (!a.is_array() || a.empty()) fail("{}.{}: must be a non-empty array of schemas", path, key);
        n.kind = SchemaNode::Kind::Union;
        for (size_t k = 0; k < a.size(); ++k)
            n.children.push_back(compile(a[k], fmt::format("{}.{}[{}]", path, key, k)));
        if (j.contains("oneOf")) one_of_.push_back(i);
    } else if (j.contains("type") && j["type"].is_array()) {
        const ojson &types = j["type"];
        if (types.empty()) fail("{}.type: an empty list of types admits no value", path);
        n.kind = SchemaNode::Kind::Union;
        for (const ojson &t : types) {
            ojson one = j;
            one["type"] = t;
            n.children.push_back(compile(one, fmt::format("{}(type {})", path, t.dump())));
        }
    } else {
        std::string type;
        if (j.contains("type")) {
            if (!j["type"].is_string()) fail("{}.type: must be a string or a list of strings", path);
            type = j["type"].get<std::string>();
        } else if (j.contains("properties")) {
            type = "object";
        } else if (j.contains("items") || j.contains("prefixItems")) {
            type = "array";
        }
        if (type.empty()) {
            n.kind = SchemaNode::Kind::Any;
        } else if (type == "object") {
            object_into(n, j, path);
        } else if (type == "array") {
            n.kind = SchemaNode::Kind::Array;
            n.min_items = int64_t(std::min<uint64_t>(count_of(j, "minItems", 0, path), INT64_MAX));
            const uint64_t most = count_of(j, "maxItems", uint64_t(INT64_MAX), path);
            n.max_items = j.contains("maxItems") ? int64_t(std::min<uint64_t>(most, INT64_MAX)) : -1;
            if (n.max_items >= 0 && n.max_items < n.min_items)
                fail("{}: maxItems {} is below minItems {}", path, n.max_items, n.min_items);
            array_items(n, j, path);
            if (j.contains("uniqueItems")) {
                if (!j["uniqueItems"].is_boolean()) fail("{}.uniqueItems: must be a boolean", path);
                n.unique_items = j["uniqueItems"].get<bool>();
                if (n.unique_items && !n.prefix.empty())
                    fail("{}: uniqueItems with prefixItems is not supported", path);
                if (n.unique_items) unique_.push_back(i); // its items are checked once compiled
            }
        } else if (type == "string") {
            n.kind = SchemaNode::Kind::String;
            n.min_length = uint32_t(std::min<uint64_t>(count_of(j, "minLength", 0, path), UINT32_MAX - 1));
            n.max_length = uint32_t(std::min<uint64_t>(count_of(j, "maxLength", UINT32_MAX, path), UINT32_MAX));
            if (n.max_length < n.min_length)
                fail("{}: maxLength {} is below minLength {}", path, n.max_length, n.min_length);
            n.pattern = string_pattern(j, path, n.min_length, n.max_length);
        } else if (type == "number" || type == "integer") {
            n.kind = type == "number" ? SchemaNode::Kind::Number : SchemaNode::Kind::Integer;
            n.range = range_of(j, path, type == "integer");
        } else if (type == "boolean") {
            n.kind = SchemaNode::Kind::Literals;
            n.literals = {"true", "false"};
        } else if (type == "null") {
            n.kind = SchemaNode::Kind::Literals;
            n.literals = {"null"};
        } else {
            fail("{}.type: unknown type '{}' (object, array, string, number, integer, boolean, null)", path, type);
        }
    }
    (*nodes_)[size_t(i)] = std::move(n);
}

// An array's items: prefixItems (pydantic's tuple[int, str]) by position, then items (any value without it; none
// when it is false).
void SchemaCompiler::array_items(SchemaNode &n, const ojson &j, const std::string &path) {
    if (j.contains("prefixItems")) {
        const ojson &p = j["prefixItems"];
        if (!p.is_array()) fail("{}.prefixItems: must be an array of schemas", path);
        for (size_t k = 0; k < p.size(); ++k)
            n.prefix.push_back(compile(p[k], fmt::format("{}.prefixItems[{}]", path, k)));
    }
    const int64_t positions = int64_t(n.prefix.size());
    if (j.contains("items") && j["items"] == false) {
        if (n.min_items > positions)
            fail("{}: minItems {} is above the {} prefixItems, and items is false", path, n.min_items, positions);
        n.max_items = n.max_items < 0 ? positions : std::min(n.max_items, positions);
        n.children = {-1};
        return;
    }
    n.children = {j.contains("items") ? compile(j["items"], path + ".items") : compile(ojson(true), path)};
}

void SchemaCompiler::object_into(SchemaNode &n, const ojson &j, const std::string &path) {
    // additionalProperties: absent or false, the listed properties only (OpenAI's strict mode); true or a schema,
    // other keys too, after them, with any value or one of the schema (pydantic's dict[str, X]).
    const ojson others = j.value("additionalProperties", ojson(false));
    if (!others.is_boolean() && !others.is_object())
        fail("{}.additionalProperties: must be a schema or a boolean, got {}", path, others.dump());
    n.min_props = int64_t(std::min<uint64_t>(count_of(j, "minProperties", 0, path), INT64_MAX));
    n.max_props = j.contains("maxProperties")
                      ? int64_t(std::min<uint64_t>(count_of(j, "maxProperties", 0, path), INT64_MAX))
                      : -1;
    const bool counted = n.min_props > 0 || n.max_props >= 0;
    // Keys by rule: propertyNames (pydantic's dict[Literal[...], X], dict[SomeEnum, X]: its schema is read once the
    // whole schema is compiled, see key_rules) or patternProperties of one pattern (dict[constr(pattern=...), X]),
    // for objects of other keys only.
    const bool named =
        j.contains("propertyNames") && j["propertyNames"] != true && j["propertyNames"] != ojson::object();
    const bool patterned = j.contains("patternProperties");
    if ((named || patterned) && j.contains("properties"))
        fail("{}: {} beside properties is not supported", path, named ? "propertyNames" : "patternProperties");
    if (named && patterned) fail("{}: propertyNames and patternProperties together are not supported", path);
    if (!j.contains("properties") && (others == true || !j.contains("additionalProperties")) && !counted && !named &&
        !patterned) {
        n.kind = SchemaNode::Kind::Any; // any object
        n.object_only = true;
        return;
    }
    n.kind = SchemaNode::Kind::Object;
    if (patterned) {
        const ojson &pp = j["patternProperties"];
        if (!pp.is_object() || pp.size() != 1)
            fail("{}.patternProperties: supported with one pattern (an object of one pattern and its schema)", path);
        if (others != false)
            fail("{}: patternProperties beside additionalProperties is not supported (other keys would have "
                 "to be told from the pattern's)",
                 path);
        const std::string &pattern = pp.begin().key();
        try {
            n.key_pattern = Regex::compile(pattern);
        } catch (const Error &e) {
            fail("{}.patternProperties: pattern '{}': {}", path, pattern, e.what());
        }
        n.extra = compile(pp.begin().value(), path + ".patternProperties." + pattern);
    } else if (others != false || (!j.contains("additionalProperties") && !j.contains("properties"))) {
        // (counted or named without additionalProperties: any values)
        n.extra = compile(others == false ? ojson(true) : others, path + ".additionalProperties");
    }
    if (named) n.key_names = compile(j["propertyNames"], path + ".propertyNames");
    const ojson props = j.value("properties", ojson::object());
    if (!props.is_object()) fail("{}.properties: must be an object", path);
    for (const auto &[key, sub] : props.items()) {
        n.names.push_back(key);
        n.keys.push_back(ojson(key).dump());
        n.children.push_back(compile(sub, path + ".properties." + key));
        n.required.push_back(0);
    }
    if (j.contains("required")) {
        const ojson &r = j["required"];
        if (!r.is_array()) fail("{}.required: must be an array of property names", path);
        for (const ojson &name : r) {
            if (!name.is_string()) fail("{}.required: must be an array of property names", path);
            const std::string text = ojson(name.get<std::string>()).dump();
            size_t k = 0;
            while (k < n.keys.size() && n.keys[k] != text) ++k;
            if (k == n.keys.size())
                fail("{}.required: '{}' is not among the properties", path, name.get<std::string>());
            n.required[k] = 1;
        }
    }
    const int64_t required = std::count(n.required.begin(), n.required.end(), uint8_t(1));
    if (n.max_props >= 0 && n.max_props < std::max(n.min_props, required))
        fail("{}: maxProperties {} is below {}", path, n.max_props,
             n.min_props > required ? fmt::format("minProperties {}", n.min_props)
                                    : fmt::format("the {} required properties", required));
    if (n.extra < 0 && n.min_props > int64_t(n.keys.size()))
        fail("{}: minProperties {} is above the {} properties (and additionalProperties is false)", path, n.min_props,
             n.keys.size());
}

// A reference within the schema: "#" (the root) or a JSON pointer in a URI fragment, "#/$defs/NAME",
// "#/properties/a/items" (RFC 6901: percent-escapes decoded first, then "~1" is "/" and "~0" is "~"; array elements by
// index). The target is compiled once per reference text, with the place it names as its path.
int32_t SchemaCompiler::reference(const ojson &ref, const std::string &path) {
    if (!ref.is_string()) fail("{}: must be a string", path);
    const std::string r = ref.get<std::string>();
    if (r == "#") return JsonSchema::kRoot;
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.size() < 2 || r[0] != '#' || r[1] != '/')
        fail("{}: '{}' is not supported (only references within the schema: \"#\" or a JSON pointer \"#/...\", such "
             "as \"#/$defs/NAME\")",
             path, r);
    const ojson *target = &root_;
    std::string where = "schema";
    size_t at = 2;
    while (true) {
        const size_t end = std::min(r.find('/', at), r.size());
        const std::string token = pointer_token(r.substr(at, end - at), path, r);
        if (target->is_object() && target->contains(token)) {
            target = &target->find(token).value();
            where += "." + token;
        } else if (const int64_t k = array_index(token); target->is_array() && k >= 0 && k < int64_t(target->size())) {
            target = &(*target)[size_t(k)];
            where += "[" + token + "]";
        } else {
            fail("{}: '{}' names no definition (nothing at '{}' in the schema)", path, r, r.substr(1, end - 1));
        }
        if (end == r.size()) break;
        at = end + 1;
    }
    const int32_t i = add(where);
    refs_[r] = i; // before compiling: a definition may refer to itself
    compile_into(i, *target, where);
    return i;
}

// The bytes a value of node i may begin with, each node's found once (alternatives shared by many unions are not
// walked again: a chain of definitions each referring twice to the next would take 2^depth walks). A union met again
// while its bytes are being found is a cycle of references that never reads a byte.
std::bitset<256> SchemaCompiler::first_bytes(int32_t i) {
    if (first_state_[size_t(i)] == 2) return firsts_[size_t(i)];
    if (first_state_[size_t(i)] == 1)
        fail("{}: the schema refers to itself without describing a value", paths_[size_t(i)]);
    first_state_[size_t(i)] = 1;
    const SchemaNode &n = (*nodes_)[size_t(i)];
    std::bitset<256> s;
    auto number = [&s] {
        s.set('-');
        for (int d = '0'; d <= '9'; ++d) s.set(size_t(d));
    };
    switch (n.kind) {
    case SchemaNode::Kind::Object: s.set('{'); break;
    case SchemaNode::Kind::Array: s.set('['); break;
    case SchemaNode::Kind::String: s.set('"'); break;
    case SchemaNode::Kind::Number:
    case SchemaNode::Kind::Integer: number(); break;
    case SchemaNode::Kind::Literals:
        for (const std::string &l : n.literals) s.set(uint8_t(l[0]));
        break;
    case SchemaNode::Kind::Any:
        s.set('{');
        if (n.object_only) break;
        for (char c : std::string_view("[\"tfn")) s.set(uint8_t(c));
        number();
        break;
    case SchemaNode::Kind::Union:
        for (int32_t c : n.children) s |= first_bytes(c);
        break;
    }
    firsts_[size_t(i)] = s;
    first_state_[size_t(i)] = 2;
    return s;
}

// A union's leaves, each once, in order, found once per union (after first_bytes refused cycles).
const std::vector<int32_t> &SchemaCompiler::leaves_of(int32_t i) {
    if (!(*nodes_)[size_t(i)].leaves.empty()) return (*nodes_)[size_t(i)].leaves;
    const std::vector<int32_t> children = (*nodes_)[size_t(i)].children;
    for (int32_t c : children) // the nested unions' first, so that the stamps below are this union's alone
        if ((*nodes_)[size_t(c)].kind == SchemaNode::Kind::Union) leaves_of(c);
    stamp_.resize(nodes_->size(), -1);
    std::vector<int32_t> out;
    auto add = [&](int32_t leaf) {
        if (stamp_[size_t(leaf)] == i) return;
        stamp_[size_t(leaf)] = i;
        out.push_back(leaf);
    };
    for (int32_t c : children) {
        if ((*nodes_)[size_t(c)].kind != SchemaNode::Kind::Union) add(c);
        else
            for (int32_t leaf : (*nodes_)[size_t(c)].leaves) add(leaf);
        if (out.size() > kMaxLeaves) break;
    }
    (*nodes_)[size_t(i)].leaves = std::move(out);
    return (*nodes_)[size_t(i)].leaves;
}

const SchemaNode &SchemaCompiler::resolved(int32_t i) const {
    for (int hops = 0; hops <= kMaxDepth; ++hops) { // (cycles were refused by first_bytes)
        const SchemaNode &n = (*nodes_)[size_t(i)];
        if (n.kind != SchemaNode::Kind::Union || n.children.size() != 1) return n;
        i = n.children[0];
    }
    return (*nodes_)[size_t(i)];
}

// Whether no value matches both a and b: they begin with different bytes, or they are objects with a property both
// require whose values are constants (const, enum) none of which are equal: a discriminator.
bool SchemaCompiler::exclusive(int32_t a, int32_t b) const {
    if ((firsts_[size_t(a)] & firsts_[size_t(b)]).none()) return true;
    const SchemaNode &x = resolved(a), &y = resolved(b);
    if (x.kind != SchemaNode::Kind::Object || y.kind != SchemaNode::Kind::Object) return false;
    for (size_t k = 0; k < x.keys.size(); ++k) {
        if (!x.required[k]) continue;
        const auto at = std::find(y.keys.begin(), y.keys.end(), x.keys[k]);
        if (at == y.keys.end() || !y.required[size_t(at - y.keys.begin())]) continue;
        const SchemaNode &u = resolved(x.children[k]), &v = resolved(y.children[size_t(at - y.keys.begin())]);
        if (u.kind != SchemaNode::Kind::Literals || v.kind != SchemaNode::Kind::Literals) continue;
        std::set<ojson> values; // as values: 1 and 1.0 are equal (and ordered alike)
        for (const std::string &p : u.literals) values.insert(ojson::parse(p));
        if (std::none_of(v.literals.begin(), v.literals.end(),
                         [&](const std::string &q) { return values.count(ojson::parse(q)) != 0; }))
            return true;
    }
    return false;
}

void SchemaCompiler::check_one_of(int32_t i) const {
    const SchemaNode &n = (*nodes_)[size_t(i)];
    for (size_t a = 0; a < n.children.size(); ++a)
        for (size_t b = a + 1; b < n.children.size(); ++b)
            if (!exclusive(n.children[a], n.children[b]))
                fail("{}.oneOf: alternatives {} and {} could both match a value, and oneOf admits values of exactly "
                     "one; supported are alternatives that begin with different bytes or objects with a required "
                     "property of different constant values (a discriminator); anyOf takes a value of any",
                     paths_[size_t(i)], a, b);
}

// uniqueItems is enforced by refusing the byte that would end an item equal to an earlier one: the item must then be
// able to go on into another value, whatever it is so far. Strings without a maximum length or a pattern can (one
// more character), numbers without bounds can (one more digit), except an integer 0, whose first digit is refused
// instead once 0 was written.
void SchemaCompiler::check_unique(int32_t i) const {
    const SchemaNode &array = (*nodes_)[size_t(i)];
    if (array.children[0] < 0) return; // no items
    const SchemaNode &item = (*nodes_)[size_t(array.children[0])];
    const std::vector<int32_t> leaves =
        item.kind == SchemaNode::Kind::Union ? item.leaves : std::vector<int32_t>{array.children[0]};
    for (int32_t leaf : leaves) {
        const SchemaNode &l = (*nodes_)[size_t(leaf)];
        const bool ok = (l.kind == SchemaNode::Kind::String && l.max_length == UINT32_MAX && !l.pattern) ||
                        ((l.kind == SchemaNode::Kind::Integer || l.kind == SchemaNode::Kind::Number) &&
                         !l.range.constrained());
        if (!ok)
            fail("{}.uniqueItems: supported for items that can always be written unlike the others — strings "
                 "without maxLength, pattern or format, numbers and integers without bounds or multipleOf — not for {}",
                 paths_[size_t(i)], paths_[size_t(leaf)]);
    }
}

// An object's propertyNames, compiled as a node of its own, as the rules its keys are read by: a string's pattern
// and lengths; an enum's or const's strings as optional properties of additionalProperties' schema, in its order
// (so no name comes twice); any value: no rule. A schema no string can match (a number's, an enum without strings)
// leaves no key: the object is {}.
void SchemaCompiler::key_rules(int32_t i) {
    SchemaNode &object = (*nodes_)[size_t(i)];
    const std::string &path = paths_[size_t(object.key_names)];
    const SchemaNode &k = resolved(object.key_names);
    switch (k.kind) {
    case SchemaNode::Kind::Any: return;
    case SchemaNode::Kind::String:
        object.key_pattern = k.pattern;
        object.key_min = k.min_length, object.key_max = k.max_length;
        return;
    case SchemaNode::Kind::Literals: // the names become optional properties, in the enum's order: none twice
        for (const std::string &literal : k.literals) {
            const ojson v = ojson::parse(literal);
            if (!v.is_string()) continue; // (keys are strings: true, 1 or null never name one)
            const std::string name = v.get<std::string>();
            if (std::find(object.names.begin(), object.names.end(), name) != object.names.end()) continue;
            object.names.push_back(name);
            object.keys.push_back(ojson(name).dump());
            object.children.push_back(object.extra);
            object.required.push_back(0);
        }
        if (object.keys.empty() || object.extra < 0) break;
        if (object.min_props > int64_t(object.keys.size()))
            fail("{}: minProperties {} is above its {} names", path, object.min_props, object.keys.size());
        object.extra = -1;
        return;
    case SchemaNode::Kind::Union: fail("{}: anyOf or oneOf of key schemas is not supported", path);
    default: break; // a number, object, array: no key is one
    }
    if (object.min_props > 0) fail("{}: no key is a value of it, and minProperties is {}", path, object.min_props);
    object.extra = -1;
}

// Every node must admit a finite value, or a text could be begun that no byte can finish (a required property
// referring back to its own object). Found as Horn clauses are solved: from the nodes that admit one outright,
// through their parents (a union needs one alternative, an object its required properties, an array with
// minItems its items).
void SchemaCompiler::check_finite() const {
    const std::vector<SchemaNode> &nodes = *nodes_;
    const size_t N = nodes.size();
    std::vector<std::vector<int32_t>> parents(N);
    std::vector<int64_t> needs(N, 0); // children still without a finite value (a union needs one)
    std::vector<int32_t> ready;
    for (size_t i = 0; i < N; ++i) {
        const SchemaNode &n = nodes[i];
        if (n.kind == SchemaNode::Kind::Object) {
            for (size_t k = 0; k < n.children.size(); ++k)
                if (n.required[k]) parents[size_t(n.children[k])].push_back(int32_t(i)), ++needs[i];
            if (n.min_props > 0 && n.extra >= 0) parents[size_t(n.extra)].push_back(int32_t(i)), ++needs[i];
        } else if (n.kind == SchemaNode::Kind::Array && n.min_items > 0) { // the positions minItems needs
            const int64_t positions = int64_t(n.prefix.size());
            for (int64_t k = 0; k < std::min(n.min_items, positions); ++k)
                parents[size_t(n.prefix[size_t(k)])].push_back(int32_t(i)), ++needs[i];
            if (n.min_items > positions) parents[size_t(n.children[0])].push_back(int32_t(i)), ++needs[i];
        } else if (n.kind == SchemaNode::Kind::Union) {
            for (int32_t c : n.children) parents[size_t(c)].push_back(int32_t(i));
            needs[i] = 1;
        }
        if (needs[i] == 0) ready.push_back(int32_t(i));
    }
    std::vector<uint8_t> finite(N, 0);
    for (int32_t i : ready) finite[size_t(i)] = 1;
    while (!ready.empty()) {
        const int32_t c = ready.back();
        ready.pop_back();
        for (int32_t p : parents[size_t(c)])
            if (!finite[size_t(p)] && --needs[size_t(p)] == 0) {
                finite[size_t(p)] = 1;
                ready.push_back(p);
            }
    }
    for (size_t i = 0; i < N; ++i)
        if (!finite[i])
            fail("{}: admits no finite value (what it requires refers back to it with no way out), so a text of it "
                 "could never end",
                 paths_[i]);
}

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::ordered_json &schema, bool compact) {
    // Before anything copies or dumps a part of it (both recurse): each schema level is at most a few JSON levels.
    if (json_deeper_than(schema, 4 * size_t(SchemaCompiler::kMaxDepth)))
        fail("schema: nests deeper than {} levels of JSON", 4 * SchemaCompiler::kMaxDepth);
    return SchemaCompiler(schema).run(compact);
}

std::shared_ptr<const JsonSchema> JsonSchema::any_object() {
    static const std::shared_ptr<const JsonSchema> s = compile(ojson{{"type", "object"}});
    return s;
}

// The grammar.

SchemaGrammar::SchemaGrammar(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
    main_.stack.push_back(frame_for(JsonSchema::kRoot));
}

SchemaGrammar::Frame SchemaGrammar::frame_for(int32_t node) const {
    const SchemaNode &n = schema_->node(node);
    Frame f;
    f.node = node;
    if (n.kind == SchemaNode::Kind::Integer || n.kind == SchemaNode::Kind::Number)
        f.number = NumberLexer(n.kind == SchemaNode::Kind::Integer, !n.range.constrained());
    if (n.kind == SchemaNode::Kind::Any) f.any = JsonGrammar(!n.object_only, schema_->compact());
    if (n.kind == SchemaNode::Kind::String) f.string.limit(n.min_length, n.max_length);
    if (n.pattern) f.string.match(n.pattern.get());
    return f;
}

void SchemaGrammar::copy_more(const SchemaGrammar &o) { more_ = o.more_; }

bool SchemaGrammar::complete() const {
    if (main_.stack.empty()) return true;
    for (const Reading &r : more_)
        if (r.stack.empty()) return true;
    return false;
}

bool SchemaGrammar::in_plain_string(const Reading &r) const {
    if (r.stack.empty()) return false;
    const Frame &f = r.stack.back();
    const SchemaNode::Kind k = schema_->node(f.node).kind;
    return (k == SchemaNode::Kind::String && f.phase == 1 && f.string.plain() && !f.string.matches()) ||
           (k == SchemaNode::Kind::Object && f.phase == 3 && free_keys(f, schema_->node(f.node)) &&
            f.string.plain() && !f.string.matches()) ||
           (k == SchemaNode::Kind::Any && f.any.in_plain_string());
}

bool SchemaGrammar::in_plain_string() const {
    if (!in_plain_string(main_)) return false;
    for (const Reading &r : more_)
        if (!in_plain_string(r)) return false;
    return true;
}

const StringLexer *SchemaGrammar::string_lexer(size_t reading) const {
    const Reading &r = reading == 0 ? main_ : more_[reading - 1];
    if (r.stack.empty()) return nullptr;
    const Frame &f = r.stack.back();
    const SchemaNode::Kind k = schema_->node(f.node).kind;
    if (k == SchemaNode::Kind::String && f.phase == 1) return &f.string;
    if (k == SchemaNode::Kind::Object && f.phase == 3 && free_keys(f, schema_->node(f.node))) return &f.string;
    return k == SchemaNode::Kind::Any ? f.any.string_lexer() : nullptr;
}

bool SchemaGrammar::between_tokens(const Frame &f) const {
    switch (schema_->node(f.node).kind) {
    case SchemaNode::Kind::Any: return false; // its JsonGrammar reads its own whitespace
    case SchemaNode::Kind::Object: return f.phase != 3;
    case SchemaNode::Kind::Array: return true;
    default: return f.phase == 0;
    }
}

bool SchemaGrammar::feed(uint8_t b) {
    std::vector<Reading> forks; // alternatives begun at b beside a reading's first (none: no allocation)
    const bool first = feed_reading(main_, b, forks);
    if (more_.empty() && forks.empty()) return first; // one reading, as most of the time
    size_t kept = 0;
    for (size_t i = 0; i < more_.size(); ++i)
        if (feed_reading(more_[i], b, forks)) {
            if (kept != i) more_[kept] = std::move(more_[i]);
            ++kept;
        }
    more_.erase(more_.begin() + std::ptrdiff_t(kept), more_.end());
    for (size_t i = 0; i < forks.size(); ++i) { // (a fork may fork again: forks grows)
        Reading r = std::move(forks[i]);
        if (feed_reading(r, b, forks)) more_.push_back(std::move(r));
    }
    if (!first) {
        if (more_.empty()) return false;
        main_ = std::move(more_.front());
        more_.erase(more_.begin());
    }
    if (more_.empty()) return true;
    // Readings that have come to the same state (Union[int, float] after "1,", or alternatives that share a
    // property's value) are one; beyond kMaxReadings the later alternatives are dropped.
    std::vector<Reading> distinct;
    for (Reading &r : more_)
        if (!(r == main_) && std::find(distinct.begin(), distinct.end(), r) == distinct.end() &&
            distinct.size() + 1 < kMaxReadings)
            distinct.push_back(std::move(r));
    more_ = std::move(distinct);
    return true;
}

bool SchemaGrammar::feed_reading(Reading &r, uint8_t b, std::vector<Reading> &forks) const {
    for (;;) {
        if (r.stack.empty()) return false; // the value is complete: nothing follows
        Frame &f = r.stack.back();
        if (json_whitespace(b) && between_tokens(f)) return !schema_->compact() && r.ws.take(b);
        const Step s = step(r.stack, f, b); // f may dangle after it (a child pushed)
        if (s == Step::Union) {
            const SchemaNode &n = schema_->node(f.node);
            // The leaves that may begin with b: this reading takes the first, a copy of it each other one (up to
            // kMaxReadings copies at this byte, over all readings).
            auto leaf = [&](size_t k) { // (an item of a uniqueItems array stays one)
                Frame g = frame_for(n.leaves[k]);
                g.record = f.record;
                return g;
            };
            size_t chosen = n.leaves.size();
            for (size_t k = 0; k < n.leaves.size(); ++k) {
                if (!n.firsts[k].test(b)) continue;
                if (chosen == n.leaves.size()) {
                    chosen = k;
                    continue;
                }
                if (forks.size() >= kMaxReadings) break;
                Reading other = r;
                other.stack.back() = leaf(k);
                forks.push_back(std::move(other));
            }
            if (chosen == n.leaves.size()) return false;
            f = leaf(chosen); // (not a union)
            continue;
        }
        if (s == Step::Refused) return false;
        if (s == Step::Child) continue; // a child was pushed to read b
        if (s == Step::Done || s == Step::Ended) {
            if (r.stack.back().record && !distinct_item(r.stack)) return false;
            r.stack.pop_back();
            if (!r.stack.empty()) r.stack.back().phase = kAfterValue; // the parent has its value
            if (s == Step::Ended) continue;                           // b comes after the value: the parent's
        }
        r.ws.reset();
        return true;
    }
}

// Phases: Object 0 before '{', 1 after it, 2 after ',', 3 in a key, 4 before ':', 5 after a value; Array 0 before
// '[', 1 after it, 2 after ',', 5 after a value; String, Number, Literals 0 before the first byte, 1 after. Unions
// are not stepped: a reading takes an alternative's frame in their place before their first byte.
SchemaGrammar::Step SchemaGrammar::step(std::vector<Frame> &stack, Frame &f, uint8_t b) const {
    const SchemaNode &n = schema_->node(f.node);
    switch (n.kind) {
    case SchemaNode::Kind::Object: return object_step(stack, f, n, b);
    case SchemaNode::Kind::Array: return array_step(stack, f, n, b);
    case SchemaNode::Kind::Literals: return literal_step(f, n, b);
    case SchemaNode::Kind::String: {
        if (f.phase == 0) {
            if (b != '"') return Step::Refused;
            f.phase = 1;
            if (f.record) f.text = "\"";
            return Step::Taken;
        }
        const Lexed l = f.string.feed(b);
        if (l == Lexed::Refused) return Step::Refused;
        if (f.record) f.text += char(b);
        return l == Lexed::Closed ? Step::Done : Step::Taken;
    }
    case SchemaNode::Kind::Number:
    case SchemaNode::Kind::Integer:
        if (f.record && n.kind == SchemaNode::Kind::Integer && b == '0' && (f.text.empty() || f.text == "-")) {
            // An integer item beginning 0 can only be 0: refused at once if 0 was written (see check_unique).
            const auto &seen = stack[stack.size() - 2].seen.get();
            if (std::find(seen.begin(), seen.end(), nlohmann::json(0)) != seen.end()) return Step::Refused;
        }
        switch (f.number.feed(b)) {
        case Lexed::Taken:
            f.phase = 1;
            if (f.record || n.range.constrained()) f.text += char(b); // (to compare, to bound)
            if (!n.range.constrained()) return Step::Taken;
            if (b == 'e' || b == 'E') return Step::Refused; // with an exponent any prefix could go anywhere
            return n.range.viable(f.text) ? Step::Taken : Step::Refused;
        case Lexed::Ended: return !n.range.constrained() || n.range.holds(f.text) ? Step::Ended : Step::Refused;
        default: return Step::Refused;
        }
    case SchemaNode::Kind::Any:
        if (f.any.feed(b)) return f.any.complete() ? Step::Done : Step::Taken;
        return f.any.can_end() ? Step::Ended : Step::Refused;
    case SchemaNode::Kind::Union: return Step::Union;
    }
    return Step::Refused;
}

// Whether a required property of the object is still to come.
bool SchemaGrammar::required_left(const Frame &f, const SchemaNode &n) {
    for (size_t k = size_t(f.next); k < n.keys.size(); ++k)
        if (n.required[k]) return true;
    return false;
}

// Whether an object may take a key other than its declared ones now: it has additionalProperties, and no required
// property is left (the declared properties come first, in order; the others after them).
bool SchemaGrammar::free_keys(const Frame &f, const SchemaNode &n) { return n.extra >= 0 && !required_left(f, n); }

// Whether declared property k may be written next: with the required ones after it the object stays within
// maxProperties, and minProperties stays within reach (other keys always can reach it).
bool SchemaGrammar::key_fits(const Frame &f, const SchemaNode &n, int32_t k) {
    if (n.max_props < 0 && n.min_props == 0) return true;
    const int64_t with = f.props + 1, after = int64_t(n.keys.size()) - k - 1;
    int64_t required_after = 0;
    for (size_t j = size_t(k) + 1; j < n.keys.size(); ++j) required_after += n.required[j];
    if (n.max_props >= 0 && with + required_after > n.max_props) return false;
    return n.extra >= 0 || with + after >= n.min_props;
}

// Whether a key may begin: a declared one that fits, up to and with the next required one, or a free one.
bool SchemaGrammar::key_may_come(const Frame &f, const SchemaNode &n) {
    for (int32_t k = f.next; k < int32_t(n.keys.size()); ++k) {
        if (key_fits(f, n, k)) return true;
        if (n.required[size_t(k)]) return false;
    }
    return free_keys(f, n) && (n.max_props < 0 || f.props < n.max_props);
}

// The item on top of `stack` is whole: false if it equals an earlier item of its array, else it joins them.
bool SchemaGrammar::distinct_item(std::vector<Frame> &stack) {
    nlohmann::json value;
    try {
        value = nlohmann::json::parse(stack.back().text);
    } catch (const nlohmann::json::out_of_range &) { // a number beyond a double: not compared
        return true;
    }
    return first_time(stack[stack.size() - 2].seen, std::move(value));
}

// False if `value` is among `seen` (a unique array's items, an object's free keys), else it joins them.
bool SchemaGrammar::first_time(CopyOnWrite<std::vector<nlohmann::json>> &seen, nlohmann::json value) {
    const std::vector<nlohmann::json> &all = seen.get();
    if (std::find(all.begin(), all.end(), value) != all.end()) return false;
    seen.edit().push_back(std::move(value));
    return true;
}

SchemaGrammar::Step SchemaGrammar::object_step(std::vector<Frame> &stack, Frame &f, const SchemaNode &n,
                                                 uint8_t b) const {
    const int32_t count = int32_t(n.keys.size());
    switch (f.phase) {
    case 0:
        if (b != '{') return Step::Refused;
        f.phase = 1;
        return Step::Taken;
    case 1:
    case 2:
        if (b == '"' && key_may_come(f, n)) {
            f.phase = 3;
            f.text = "\"";
            f.string = StringLexer(); // (read by free keys, by the object's key rules)
            f.string.limit(n.key_min, n.key_max);
            if (n.key_pattern) f.string.match(n.key_pattern.get());
            return Step::Taken;
        }
        if (b != '}' || f.phase != 1) return Step::Refused;
        return !required_left(f, n) && f.props >= n.min_props ? Step::Done : Step::Refused;
    case 3: {
        if (free_keys(f, n)) return free_key_step(f, n, b);
        // The keys that may come: the next ones, up to and with the first required one.
        f.text += char(b);
        bool prefix = false;
        for (int32_t k = f.next; k < count; ++k) {
            const std::string &key = n.keys[size_t(k)];
            const bool fits = key_fits(f, n, k);
            if (fits && key == f.text) {
                f.next = k + 1;
                ++f.props;
                f.phase = 4;
                f.text.clear();
                return Step::Taken;
            }
            prefix = prefix || (fits && key.compare(0, f.text.size(), f.text) == 0);
            if (n.required[size_t(k)]) break;
        }
        return prefix ? Step::Taken : Step::Refused;
    }
    case 4: {
        if (b != ':') return Step::Refused;
        f.phase = kAfterValue;
        const int32_t child = f.free_key ? n.extra : n.children[size_t(f.next - 1)];
        f.free_key = false;
        stack.push_back(frame_for(child)); // f is not used after this
        return Step::Taken;
    }
    default: // kAfterValue
        if (b == ',' && key_may_come(f, n)) {
            f.phase = 2;
            return Step::Taken;
        }
        return b == '}' && !required_left(f, n) && f.props >= n.min_props ? Step::Done : Step::Refused;
    }
}

// A key where any may come (no required property left): any string, by its lexer. Closed, it is the next declared
// property it names (by value: escapes decoded), else a free one, unless it names a declared property already
// passed or (where a key can always go on to another name: no maximum length, no pattern or an endless one) a free
// key already written (JSON objects do not repeat a name).
SchemaGrammar::Step SchemaGrammar::free_key_step(Frame &f, const SchemaNode &n, uint8_t b) const {
    const Lexed l = f.string.feed(b);
    if (l == Lexed::Refused) return Step::Refused;
    f.text += char(b);
    if (l != Lexed::Closed) return Step::Taken;
    const std::string name = nlohmann::json::parse(f.text).get<std::string>(); // (valid: the lexer took it)
    const auto at = std::find(n.names.begin(), n.names.end(), name);
    const int32_t k = int32_t(at - n.names.begin());
    if (at != n.names.end() && (k < f.next || !key_fits(f, n, k))) return Step::Refused;
    if (at == n.names.end() && n.key_max == UINT32_MAX && (!n.key_pattern || n.key_pattern->endless())) {
        // (a key can always go on to another name: refusing a repeat at its closing quote never leaves it stuck)
        if (!first_time(f.seen, name)) return Step::Refused;
    }
    if (at != n.names.end()) f.next = k + 1;
    else f.next = int32_t(n.keys.size()), f.free_key = true;
    ++f.props; // (a free key fits whenever this path was entered: see key_may_come)
    f.phase = 4;
    f.text.clear();
    return Step::Taken;
}

SchemaGrammar::Step SchemaGrammar::array_step(std::vector<Frame> &stack, Frame &f, const SchemaNode &n,
                                                uint8_t b) const {
    switch (f.phase) {
    case 0:
        if (b != '[') return Step::Refused;
        f.phase = 1;
        return Step::Taken;
    case 1:
    case 2:
        if (f.phase == 1 && b == ']') return n.min_items == 0 ? Step::Done : Step::Refused;
        if (n.max_items >= 0 && f.next >= n.max_items) return Step::Refused;
        ++f.next;
        f.phase = kAfterValue;
        // reads b (f is not used after this)
        stack.push_back(frame_for(f.next <= int64_t(n.prefix.size()) ? n.prefix[size_t(f.next - 1)] : n.children[0]));
        stack.back().record = n.unique_items;
        return Step::Child;
    default: // kAfterValue
        if (b == ',' && (n.max_items < 0 || f.next < n.max_items)) {
            f.phase = 2;
            return Step::Taken;
        }
        return b == ']' && f.next >= n.min_items ? Step::Done : Step::Refused;
    }
}

SchemaGrammar::Step SchemaGrammar::literal_step(Frame &f, const SchemaNode &n, uint8_t b) const {
    const std::string t = f.text + char(b);
    bool prefix = false, longer = false;
    for (const std::string &l : n.literals)
        if (l.compare(0, t.size(), t) == 0) {
            prefix = true;
            longer = longer || l.size() > t.size();
        }
    if (!prefix) { // b is not part of the literal: it follows one that is whole (a number: 1 of enum [1, 12])
        for (const std::string &l : n.literals)
            if (f.phase == 1 && l == f.text) return Step::Ended;
        return Step::Refused;
    }
    f.text = t;
    f.phase = 1;
    return longer ? Step::Taken : Step::Done;
}

} // namespace zaya
