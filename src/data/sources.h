// Turning `--input` paths into documents: files, directories (recursive) and JSONL files.
//
// - A directory contributes every regular file below it, except hidden entries (".git", ".cache", ...), that
//   is UTF-8 text without NUL bytes; others (images, archives, Latin-1 text) are skipped and reported. Text is
//   recognised by content, not by extension, so .txt, .rst, .md, .py and any other text file all count.
// - A file named on the command line must be text; a binary one is an error rather than a silent skip.
// - A `.jsonl` file holds one document per non-blank line, a JSON object of one of three kinds:
//     {"text": "..."}                                  pretraining text: every token is learned;
//     {"prompt": "...", "completion": "..."}           fine-tuning: only the completion (and its EOS) is learned;
//     {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}, ...]}
//                                                      a chat (data/chat_template.h): only the assistant turns are
//                                                      learned; roles system (first only), user, assistant.
//   Anything else on a line is an error naming file:line. Every other text file is one document of text.
// - Files are sorted by key (below) so the document order does not depend on the directory listing order.
#pragma once
#include "data/chat_template.h"
#include "infer/tool_formats.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct SourceFile {
    std::string path; // as opened
    // Stable name, independent of where the corpus lives: the path relative to the parent of the input it
    // came from (input "/a/docs" → "docs/x/y.txt"; input "/a/b.txt" → "b.txt"). Drives order and val split.
    std::string key;
    bool jsonl = false;
    uint64_t bytes = 0;
};

struct SourceList {
    std::vector<SourceFile> files;        // sorted by key, no file twice
    std::vector<std::string> skipped;     // keys of the binary files found in directories
};

// `exclude_dir` (the output directory, when it lies inside an input) is not walked.
SourceList collect_sources(const std::vector<std::string> &inputs, const std::string &exclude_dir = "");

bool is_utf8_text(std::string_view bytes); // valid UTF-8, no NUL

enum class DocKind { Text, Completion, Chat };

// One document of a source file; `line` is the 1-based JSONL line, 0 for a whole-file document.
struct Document {
    uint64_t line = 0;
    std::string text; // Text: the document; the others: all their text, for tokenizer training
    DocKind kind = DocKind::Text;
    std::string prompt, completion;    // Completion
    std::vector<ChatMessage> messages; // Chat
    nlohmann::ordered_json variables;  // Chat: its template variables (its tools, in a model's own tool format)
};

// The documents of one file, in order; documents with nothing to learn (empty text, an empty completion, a chat
// without an assistant message that has content) are dropped. Errors name file:line. `tool_format`: how the
// model writes tool calls (infer/tool_formats.h): a chat's tools, calls and results are written as the server
// writes them for that model.
std::vector<Document> read_documents(const SourceFile &f, ToolFormat tool_format = ToolFormat::Json);

} // namespace zaya
