// What reading a chat answer as it streams costs (infer/chat_answer.h: the reasoning split off, then the words and
// tool calls in zaya's object or a model's own format), on the texts that make a careless reader quadratic: long runs
// the readers must hold back (whitespace, which may end the words or the reasoning) and long values they search for
// their end, each fed in pieces of a few bytes as tokens arrive. Each shape is timed at two lengths, 1× and 8×:
// linear cost shows as a time ratio near 8 (a reader that searched its held text again at each piece would show
// ~64). Prints one row per reader and shape, and exits non-zero if a ratio passes --max-ratio.
//
//   zaya_bench_answer_readers [--bytes N] [--piece B] [--max-ratio R]
//
// Defaults: N = 65536 bytes at 1× (524288 at 8×), pieces of 4 bytes, ratio limit 24 (a machine's noise moves the
// ratio of such short timings by ±2×; quadratic cost is 8× beyond linear).
#include "infer/chat_answer.h"
#include "infer/openai_api.h"
#include "infer/reasoning.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace zaya;

struct Shape {
    const char *name;
    std::string before, run, after; // the answer: before + run × n + after
};

// The texts, in a format's own call syntax where the run is inside a call.
std::vector<Shape> shapes(ToolFormat f, bool reasoning) {
    std::vector<Shape> out;
    const std::string think = reasoning ? "<think>\nLet me see." : "";
    const std::string closed = reasoning ? "</think>\n\n" : "";
    if (reasoning) {
        out.push_back({"whitespace in the reasoning", think, " ", "done.</think>\n\nOK."});
        out.push_back({"text in the reasoning", think, "a b ", "</think>\n\nOK."});
    }
    out.push_back({"whitespace in the words", closed + "Hello", " ", "world."});
    out.push_back({"words", closed, "lorem ipsum ", "."});
    std::string open, close;
    switch (f) {
    case ToolFormat::Json:
        open = R"({"tool_calls":[{"name":"f","arguments":{"n":")", close = R"("}}]})";
        break;
    case ToolFormat::ZayaXml:
        open = "<zyphra_tool_call>\n<function=f>\n<parameter=n>\n";
        close = "\n</parameter>\n</function>\n</zyphra_tool_call>";
        break;
    case ToolFormat::Qwen3Coder:
        open = "<tool_call>\n<function=f>\n<parameter=n>\n", close = "\n</parameter>\n</function>\n</tool_call>";
        break;
    case ToolFormat::Hermes:
        open = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": \"", close = "\"}}\n</tool_call>";
        break;
    }
    out.push_back({"a call's value", closed + "Calling." + open, "x <y> ", close});
    out.push_back({"whitespace in a value", closed + open + "a", " ", "b" + close});
    return out;
}

// Seconds to read the answer in pieces of `piece` bytes (best of 3), and what it read (to check 1× and 8× alike).
double read_seconds(const ApiRequest &r, const std::string &text, size_t piece, size_t &read_bytes) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        ChatAnswerStream s(r);
        size_t n = 0;
        auto take = [&](const ChatPiece &p) {
            n += p.reasoning.size() + p.answer.words.size();
            for (const AnswerPiece::Call &c : p.answer.calls) n += c.name.size() + c.arguments.size();
        };
        for (size_t at = 0; at < text.size(); at += piece) take(s.feed(std::string_view(text).substr(at, piece)));
        take(s.finish());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        read_bytes = n;
    }
    return best;
}

} // namespace

int main(int argc, char **argv) {
    size_t bytes = 65536, piece = 4;
    double max_ratio = 24;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--bytes")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--piece")) piece = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--max-ratio")) max_ratio = std::strtod(argv[i + 1], nullptr);
        else {
            fmt::print(stderr, "zaya_bench_answer_readers: unknown option {} (--bytes N, --piece B, --max-ratio R)\n",
                       argv[i]);
            return 2;
        }
    }
    if (bytes == 0 || piece == 0) {
        fmt::print(stderr, "zaya_bench_answer_readers: --bytes and --piece must be positive\n");
        return 2;
    }
    fmt::print("chat answer readers: {} and {} bytes fed {} bytes at a time (best of 3)\n", bytes, 8 * bytes, piece);
    fmt::print("{:<12} {:<9} {:<28} {:>9} {:>9} {:>7} {:>9}\n", "tools", "reasoning", "shape", "1x ms", "8x ms",
               "ratio", "MB/s 8x");
    int failed = 0;
    for (ToolFormat f : {ToolFormat::Json, ToolFormat::ZayaXml, ToolFormat::Qwen3Coder, ToolFormat::Hermes})
        for (bool reasoning : {false, true}) {
            ApiRequest r;
            r.chat = true;
            r.tools.choice = ApiTools::Choice::Auto;
            r.tools.format = f;
            r.tools.tools = {{"f", "", {{"type", "object"}, {"properties", {{"n", {{"type", "string"}}}}}}}};
            if (reasoning) r.reasoning = ReasoningTags{};
            for (const Shape &s : shapes(f, reasoning)) {
                double seconds[2];
                size_t read[2];
                for (int k = 0; k < 2; ++k) {
                    const size_t n = (k ? 8 * bytes : bytes) / s.run.size();
                    std::string text = s.before;
                    text.reserve(s.before.size() + n * s.run.size() + s.after.size());
                    for (size_t j = 0; j < n; ++j) text += s.run;
                    text += s.after;
                    seconds[k] = read_seconds(r, text, piece, read[k]);
                }
                const double ratio = seconds[1] / std::max(seconds[0], 1e-9);
                const bool bad = ratio > max_ratio;
                failed += bad;
                fmt::print("{:<12} {:<9} {:<28} {:>9.2f} {:>9.2f} {:>7.1f} {:>9.0f}{}\n", tool_format_name(f),
                           reasoning ? "<think>" : "none", s.name, seconds[0] * 1e3, seconds[1] * 1e3, ratio,
                           8.0 * double(bytes) / seconds[1] / 1e6, bad ? "  <- superlinear" : "");
            }
        }
    if (failed) fmt::print("{} shapes read in superlinear time (ratio above {})\n", failed, max_ratio);
    return failed ? 1 : 0;
}
