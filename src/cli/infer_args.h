// What `zaya generate`, `zaya serve` and `zaya bench decode` share: the model argument (a directory, memory-mapped,
// or a preset with random weights), the tokenizer next to it, and the sampling flags.
#pragma once
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "infer/sample.h"
#include "infer/weights.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>

namespace zaya::cli {

struct InferModelArgs {
    std::string model;          // directory or preset
    std::string dtype = "bf16"; // presets only: the dtype of the random matrices
    int64_t layers = 0;         // presets only: keep this many layers (0: all)
    uint64_t seed = 1234;       // presets only
    std::string tokenizer;      // default: MODEL_DIR's tokenizer.model or .json (a checkpoint: its run's data's)
    std::string quantize = "none"; // none | int8 (InferModel::quantize_i8, after loading)
    std::string chat_template;     // a Jinja file, "builtin", or empty: the tokenizer's own (Tokenizer::chat_template)
    std::string chat_template_kwargs; // a JSON object: the template's other variables (chat_variables)
    std::string tool_call_parser = "auto"; // serve, chat: how the model writes tool calls (resolve_tool_format)
    std::string reasoning_parser = "auto"; // serve, chat: the markers of its reasoning (resolve_reasoning)
};

void add_model_options(CLI::App *cmd, InferModelArgs &a);
// --quantize none|int8 (InferModelArgs::quantize); `when` starts its help.
void add_quantize_option(CLI::App *cmd, std::string &quantize, const std::string &when = "");
// --chat-template FILE|builtin (data/hf_chat_template.h apply_chat_template_option); `when` starts its help, `more`
// ends it.
void add_chat_template_option(CLI::App *cmd, std::string &chat_template, const std::string &when = "",
                              const std::string &more = "");
// Quantizes the model as asked (`quantize`: none | int8), failing on another name.
void apply_quantize(InferModel &m, const std::string &quantize);
std::unique_ptr<InferModel> load_infer_model(const InferModelArgs &a);
// The tokenizer (--tokenizer, else the model directory's or the checkpoint's), with the chat template --chat-template
// names in place of its own. Fails where --chat-template is given without a tokenizer.
std::optional<Tokenizer> load_infer_tokenizer(const InferModelArgs &a);
// --chat-template-kwargs's value as a JSON object of a chat template's variables (null when empty); fails naming the
// option when it is not one, or sets the chat's own.
nlohmann::ordered_json chat_variables(const std::string &option_value);
DType parse_weight_dtype(const std::string &name); // "bf16" | "f32"

void add_sampling_options(CLI::App *cmd, SampleOptions &o);
// The JSON a file option names (--json-schema, chat's --tools), its keys in their order; fails naming the option and
// the file when it cannot be read or is not JSON.
nlohmann::ordered_json read_json_file(const std::string &option, const std::string &path);
// "prefill X tok/s, decode Y tok/s" of a completion: the prompt tokens computed (not those resumed from the prefix
// cache) over the time to the first token, the generated tokens after the first over the rest.
std::string speed_summary(const Completion &r);
// Engine::OnPrompt that prints a prompt's progress on stderr after each step but the last, `[prompt: N of M tokens
// read, R tokens/s]` (R since this call): on a terminal one line, rewritten and cleared before the answer;
// elsewhere a line a step. A prompt read in one step prints nothing.
Engine::OnPrompt prompt_progress_printer();
// --device, --max-context, --kv-dtype, --precision, the speculative options and --batch-invariant: where the engine
// decodes, how long a sequence may grow, the element of its KV cache, the precision of the rows its linears take, its
// drafts, and whether a request's bits may depend on the others beside it.
void add_engine_device_options(CLI::App *cmd, EngineOptions &o);
// --speculative-tokens, --prompt-lookup-max/-min, --lookup-history: speculative decoding by prompt lookup
// (EngineOptions::lookup).
void add_speculative_options(CLI::App *cmd, LookupOptions &o);
// --prefix-cache-mb into `bytes` (EngineOptions::prefix_cache_bytes), 1024 MiB unless given; `when` starts its help.
void add_prefix_cache_option(CLI::App *cmd, size_t &bytes, const std::string &when = "");
// An option of MiB (0 to 2^30) that sets `bytes`, default_mib until given.
void add_mib_option(CLI::App *cmd, const std::string &name, size_t &bytes, int64_t default_mib,
                    const std::string &help);
void add_kv_dtype_option(CLI::App *cmd, std::optional<DType> &kv);
std::optional<DType> parse_kv_dtype(const std::string &name); // "auto" (unset) | "bf16" | "f32"
// --precision auto|fp32|bf16 of the CPU decoder's linears (EngineOptions::precision; auto: unset).
void add_infer_precision_option(CLI::App *cmd, std::optional<cpu::MatmulPrecision> &p);
std::optional<cpu::MatmulPrecision> parse_infer_precision(const std::string &name);

} // namespace zaya::cli
