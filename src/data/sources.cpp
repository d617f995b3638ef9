#include "data/sources.h"

#include "core/error.h"
#include "core/atomic_file.h"
#include "core/json_depth.h"
#include "core/utf8.h"
#include "infer/openai_api.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace zaya {

bool is_utf8_text(std::string_view s) { return s.find('\0') == std::string_view::npos && is_utf8(s); }

namespace {

bool hidden(const fs::path &p) {
    const std::string name = p.filename().string();
    return !name.empty() && name[0] == '.';
}

SourceFile make_source(const fs::path &path, const std::string &key, uint64_t bytes) {
    return {path.string(), key, path.extension() == ".jsonl", bytes};
}

} // namespace

SourceList collect_sources(const std::vector<std::string> &inputs, const std::string &exclude_dir) {
    if (inputs.empty()) fail("no --input given");
    std::error_code xec;
    const fs::path exclude = exclude_dir.empty() ? fs::path() : fs::weakly_canonical(exclude_dir, xec);
    std::map<std::string, SourceFile> by_key;
    std::map<std::string, std::string> seen; // canonical path → input, so a file given twice is read once
    SourceList out;
    auto add = [&](const fs::path &p, const std::string &key, uint64_t bytes, const std::string &input) {
        std::error_code ec;
        const std::string canon = fs::weakly_canonical(p, ec).string();
        if (!seen.emplace(ec ? p.string() : canon, input).second) return;
        // Two inputs with the same base name ("a/docs", "b/docs") keep both files under distinct keys.
        std::string k = key;
        for (int n = 2; by_key.count(k); ++n) k = key + "#" + std::to_string(n);
        by_key.emplace(k, make_source(p, k, bytes));
    };
    for (const auto &input : inputs) {
        const fs::path root(input);
        std::error_code ec;
        const auto st = fs::status(root, ec);
        if (ec || !fs::exists(st)) fail("--input {}: no such file or directory", input);
        if (fs::is_regular_file(st)) {
            const std::string text = read_file_bytes(input);
            if (!is_utf8_text(text)) fail("--input {}: not a UTF-8 text file (binary, or another encoding)", input);
            add(root, root.filename().string(), text.size(), input);
            continue;
        }
        if (!fs::is_directory(st)) fail("--input {}: neither a regular file nor a directory", input);
        std::string root_name = root.lexically_normal().filename().string();
        if (root_name.empty()) root_name = root.lexically_normal().parent_path().filename().string();
        fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
        if (ec) fail("--input {}: cannot list directory: {}", input, ec.message());
        for (; it != end; it.increment(ec)) {
            if (ec) fail("--input {}: cannot list directory: {}", input, ec.message());
            const fs::path &p = it->path();
            if (hidden(p)) {
                if (it->is_directory()) it.disable_recursion_pending();
                continue;
            }
            if (!exclude.empty() && it->is_directory() && fs::weakly_canonical(p, ec) == exclude) {
                it.disable_recursion_pending();
                continue;
            }
            if (!it->is_regular_file()) continue;
            const std::string text = read_file_bytes(p.string());
            const std::string key = (fs::path(root_name) / p.lexically_relative(root)).generic_string();
            if (!is_utf8_text(text)) {
                out.skipped.push_back(key);
                continue;
            }
            add(p, key, text.size(), input);
        }
    }
    for (auto &[k, f] : by_key) out.files.push_back(std::move(f));
    std::sort(out.skipped.begin(), out.skipped.end());
    return out;
}

namespace {

constexpr size_t kMaxRecordDepth = 512; // JSON levels of a record, as of a server request

// A JSONL record's string field; `where` is file:line.
std::string string_field(const nlohmann::json &j, const char *name, const std::string &where) {
    const auto it = j.find(name);
    if (it == j.end()) fail("{}: no \"{}\" field", where, name);
    if (!it->is_string()) fail("{}: \"{}\" is {}, expected a string", where, name, it->type_name());
    return it->get<std::string>();
}

// One JSONL record (see sources.h), parsed from `line`; its text is empty when it has nothing to learn.
Document jsonl_document(const nlohmann::json &j, std::string_view line, const std::string &where,
                        ToolFormat tool_format) {
    const bool text = j.contains("text"), completion = j.contains("prompt") || j.contains("completion"),
               chat = j.contains("messages");
    if (int(text) + int(completion) + int(chat) != 1)
        fail("{}: expected exactly one of \"text\", \"prompt\"+\"completion\" or \"messages\"{}", where,
             text || completion || chat ? "" : " (found none)");
    Document d;
    if (text) {
        d.text = string_field(j, "text", where);
    } else if (completion) {
        d.kind = DocKind::Completion;
        d.prompt = string_field(j, "prompt", where);
        d.completion = string_field(j, "completion", where);
        if (!d.completion.empty()) d.text = d.prompt + d.completion;
    } else {
        d.kind = DocKind::Chat;
        // Read as the server reads a request's messages (infer/openai_api.h), so that a model learns its turns as it
        // will be prompted with them: tool calls and results included, with a record's "tools" (and "tool_choice",
        // "parallel_tool_calls") described as the server describes them.
        try {
            ApiTools tools;
            if (has_tool_fields(j))
                tools = parse_tools(nlohmann::ordered_json::parse(line)); // ordered: the parameters keep their order
            tools.format = tool_format;
            d.messages = chat_messages(j["messages"], tools);
            if (tools.native() && tools.active()) d.variables["tools"] = template_tools(tools);
        } catch (const ApiError &e) {
            fail("{}: {}", where, e.message);
        }
        bool answers = false;
        for (const ChatMessage &msg : d.messages) {
            answers |= msg.role == "assistant" && (!msg.content.empty() || msg.fields.contains("tool_calls"));
            if (!d.text.empty()) d.text += '\n';
            d.text += msg.content;
        }
        if (!answers) d.text.clear();
    }
    return d;
}

} // namespace

std::vector<Document> read_documents(const SourceFile &f, ToolFormat tool_format) {
    std::string bytes = read_file_bytes(f.path);
    std::vector<Document> docs;
    if (!f.jsonl) {
        if (!is_utf8_text(bytes)) fail("{}: not a UTF-8 text file", f.path);
        if (!bytes.empty()) {
            Document d;
            d.text = std::move(bytes);
            docs.push_back(std::move(d));
        }
        return docs;
    }
    uint64_t line_no = 0;
    size_t p = 0;
    while (p < bytes.size()) {
        size_t q = bytes.find('\n', p);
        if (q == std::string::npos) q = bytes.size();
        const std::string_view line(bytes.data() + p, q - p);
        p = q + 1;
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue; // blank lines separate nothing
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception &e) {
            fail("{}:{}: invalid JSON: {}", f.path, line_no, e.what());
        }
        if (!j.is_object()) fail("{}:{}: expected a JSON object", f.path, line_no);
        if (json_deeper_than(j, kMaxRecordDepth)) // (copies recurse: core/json_depth.h)
            fail("{}:{}: nests deeper than {} levels", f.path, line_no, kMaxRecordDepth);
        Document d = jsonl_document(j, line, fmt::format("{}:{}", f.path, line_no), tool_format);
        d.line = line_no;
        if (!d.text.empty()) docs.push_back(std::move(d));
    }
    return docs;
}

} // namespace zaya
