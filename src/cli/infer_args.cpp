#include "cli/infer_args.h"

#include "core/clock.h"
#include "core/error.h"
#include "data/hf_chat_template.h"
#include "infer/json_schema.h"
#include "train/start_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <unistd.h>

namespace zaya::cli {

namespace fs = std::filesystem;

void add_model_options(CLI::App *cmd, InferModelArgs &a) {
    cmd->add_option("model", a.model,
                    "Model directory (config.json + safetensors, mapped in place), training checkpoint directory "
                    "(its fp32 weights) or preset name")
        ->required();
    cmd->add_option("--dtype", a.dtype, "Preset only: dtype of the random weight matrices (bf16|f32)")
        ->capture_default_str();
    cmd->add_option("--layers", a.layers, "Preset only: keep the first N layers (0 = all)")->capture_default_str();
    cmd->add_option("--seed-weights", a.seed, "Preset only: seed of the random weights")->capture_default_str();
    cmd->add_option("--tokenizer", a.tokenizer,
                    "tokenizer.model (sentencepiece) or tokenizer.json (Hugging Face), or a directory holding one "
                    "(default: MODEL_DIR's own, tokenizer.model first unless its tokenizer.json's added tokens "
                    "differ; for a checkpoint, its run's data's)");
    add_quantize_option(cmd, a.quantize);
    add_chat_template_option(cmd, a.chat_template, "How chats are written: ");
    const std::string over = cmd->get_name() == "serve" ? "; a request's chat_template_kwargs go over them" : "";
    cmd->add_option("--chat-template-kwargs", a.chat_template_kwargs,
                    "The chat template's other variables, a JSON object (transformers' apply_chat_template keyword "
                    "arguments), e.g. '{\"enable_thinking\": false}'" + over);
    if (cmd->get_name() == "serve" || cmd->get_name() == "chat")
        cmd->add_option("--tool-call-parser", a.tool_call_parser,
                        "How the model writes tool calls: json (zaya's object, described to the model), zaya_xml "
                        "(ZAYA1-8B's <zyphra_tool_call>), qwen3_coder (<tool_call><function=...>), hermes "
                        "(<tool_call>{json}), or auto: the format its chat template writes, else json")
            ->capture_default_str();
    if (cmd->get_name() == "serve" || cmd->get_name() == "chat")
        cmd->add_option("--reasoning-parser", a.reasoning_parser,
                        "How chat answers' reasoning is read: think (<think>...</think> as reasoning_content; "
                        "also named qwen3, deepseek_r1), none (left in the answer), or auto: think when the chat "
                        "template writes </think>, else none")
            ->capture_default_str();
}

nlohmann::ordered_json chat_variables(const std::string &option_value) {
    if (option_value.empty()) return nullptr;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(option_value, nullptr, false);
    if (j.is_discarded()) fail("--chat-template-kwargs: not JSON: {}", option_value);
    check_chat_variables(j, "--chat-template-kwargs");
    return j;
}

void add_chat_template_option(CLI::App *cmd, std::string &chat_template, const std::string &when,
                              const std::string &more) {
    cmd->add_option("--chat-template", chat_template,
                    when + "a Jinja chat template file (Hugging Face's), or 'builtin' for ZAYA1's turn format "
                           "(default: the tokenizer's directory's own chat_template.jinja or tokenizer_config.json "
                           "chat_template, else builtin)" + more);
}

void add_quantize_option(CLI::App *cmd, std::string &quantize, const std::string &when) {
    cmd->add_option("--quantize", quantize,
                    when + "none, or int8: every weight matrix as int8 with a scale per 64 columns, quantized when "
                           "loaded, and each layer's input rows alike (about half of bf16's bytes and integer dot "
                           "products: over twice bf16's batch-1 decoding speed; cpu only)")
        ->check(CLI::IsMember({"none", "int8"}))
        ->capture_default_str();
}

void apply_quantize(InferModel &m, const std::string &quantize) {
    if (quantize == "int8") m.quantize_i8();
    else if (quantize != "none") fail("--quantize must be none or int8, got '{}'", quantize);
}

DType parse_weight_dtype(const std::string &name) {
    if (name == "bf16") return DType::BF16;
    if (name == "f32") return DType::F32;
    fail("--dtype must be bf16 or f32, got '{}'", name);
}

std::unique_ptr<InferModel> load_infer_model(const InferModelArgs &a) {
    if (fs::is_directory(a.model)) {
        if (a.layers != 0) fail("--layers applies to presets only; '{}' is a model directory", a.model);
        // A training checkpoint: its fp32 master weights, as its run's model/ would hold them (no export first).
        auto m = fs::exists(fs::path(a.model) / "config.json")
                     ? InferModel::load(a.model)
                     : InferModel::from_model(load_model_or_checkpoint(a.model, "model"), DType::F32);
        apply_quantize(*m, a.quantize);
        return m;
    }
    ZayaConfig c = config_preset(a.model); // fails naming the known presets
    if (a.layers < 0 || a.layers > c.num_hidden_layers)
        fail("--layers must be in [0, {}] for preset '{}', got {}", c.num_hidden_layers, a.model, a.layers);
    if (a.layers > 0) {
        c.num_hidden_layers = a.layers;
        c.layer_types.resize(size_t(a.layers));
    }
    auto m = InferModel::random(c, parse_weight_dtype(a.dtype), a.seed);
    apply_quantize(*m, a.quantize);
    return m;
}

std::optional<Tokenizer> load_infer_tokenizer(const InferModelArgs &a) {
    std::optional<Tokenizer> tok;
    if (!a.tokenizer.empty()) tok = Tokenizer::load(a.tokenizer);
    else if (fs::is_directory(a.model)) {
        if (const std::optional<std::string> own = Tokenizer::find_in(a.model)) tok = Tokenizer::load(*own);
        else if (const std::optional<std::string> t = checkpoint_tokenizer(a.model)) tok = Tokenizer::load(*t);
    }
    if (!a.chat_template.empty()) {
        if (!tok)
            fail("--chat-template {}: there is no tokenizer to write chats with (give --tokenizer)", a.chat_template);
        apply_chat_template_option(*tok, a.chat_template);
    }
    return tok;
}

std::string speed_summary(const Completion &r) {
    const double computed = double(r.prompt_tokens - r.cached_tokens), n = double(r.tokens.size());
    std::string s = fmt::format("prefill {:.1f} tok/s, decode {:.2f} tok/s",
                                r.prefill_seconds > 0 ? computed / r.prefill_seconds : 0.0,
                                n > 1 && r.decode_seconds > 0 ? (n - 1) / r.decode_seconds : 0.0);
    if (r.draft_tokens > 0)
        s += fmt::format(" (drafts: {} of {} tokens taken, {:.0f}%, in {} steps)", r.accepted_tokens, r.draft_tokens,
                         100.0 * double(r.accepted_tokens) / double(r.draft_tokens), r.draft_steps);
    return s;
}

Engine::OnPrompt prompt_progress_printer() {
    const bool tty = isatty(fileno(stderr)) != 0;
    const double t0 = monotonic_seconds();
    auto shown = std::make_shared<bool>(false);
    return [tty, t0, shown](int64_t fed, int64_t total) {
        if (fed == total) {
            if (tty && *shown) fmt::print(stderr, "\r\033[K");
            return;
        }
        *shown = true;
        fmt::print(stderr, "{}[prompt: {} of {} tokens read, {:.1f} tokens/s]{}", tty ? "\r\033[K" : "", fed, total,
                   double(fed) / std::max(monotonic_seconds() - t0, 1e-9), tty ? "" : "\n");
    };
}

void add_sampling_options(CLI::App *cmd, SampleOptions &o) {
    cmd->add_option("-n,--max-tokens", o.max_new_tokens, "Tokens to generate at most")->capture_default_str();
    cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", o.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str();
    cmd->add_option("--top-p", o.top_p, "Nucleus: keep the most likely tokens up to this probability")
        ->capture_default_str();
    cmd->add_option("--min-p", o.min_p, "Drop tokens less likely than min-p × the most likely one")
        ->capture_default_str();
    cmd->add_option("--repetition-penalty", o.repetition_penalty, "> 1 discourages tokens already seen")
        ->capture_default_str();
    cmd->add_option("--frequency-penalty", o.frequency_penalty,
                    "Subtract this × a token's count so far in the output from its logit (OpenAI's; -2 to 2)")
        ->capture_default_str();
    cmd->add_option("--presence-penalty", o.presence_penalty,
                    "Subtract this from the logit of a token already in the output (OpenAI's; -2 to 2)")
        ->capture_default_str();
    cmd->add_option("--seed", o.seed, "Sampling seed (same seed, same output)")->capture_default_str();
    cmd->add_option("--stop", o.stop_strings, "Stop when the text contains this string (repeatable)");
    cmd->add_option("--stop-token", o.stop_tokens,
                    "Stop at this token id (repeatable; default: EOS, <end_of_turn>; with --json or --json-schema the "
                    "text ends only as its value closes)");
    cmd->add_flag("--json", o.json_object,
                  "JSON mode: draw only tokens that continue a JSON object, and stop when it closes (needs the "
                  "model's tokenizer)");
    cmd->add_option_function<std::string>(
           "--json-schema",
           [&o](const std::string &path) {
               const nlohmann::ordered_json schema = read_json_file("--json-schema", path);
               try {
                   o.json_schema = JsonSchema::compile(schema);
               } catch (const Error &e) {
                   fail("--json-schema '{}': {}", path, e.what());
               }
           },
           "Structured output: draw only tokens that continue a value of this JSON schema (a file; docs/inference.md "
           "says which keywords it may use)")
        ->type_name("FILE");
}

nlohmann::ordered_json read_json_file(const std::string &option, const std::string &path) {
    std::ifstream in(path);
    if (!in) fail("{}: cannot read '{}'", option, path);
    try {
        return nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception &e) {
        fail("{}: '{}' is not JSON: {}", option, path, e.what());
    }
}

void add_engine_device_options(CLI::App *cmd, EngineOptions &o) {
    cmd->add_option("--device", o.device, "Where to decode: cpu, or cuda (the GPU)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--max-context", o.max_context,
                    "Tokens a sequence may hold, prompt and generated (0: the model's context; on cuda at most "
                    "32768, as the device cache is allocated up front)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 24))
        ->capture_default_str();
    add_kv_dtype_option(cmd, o.kv_dtype);
    add_infer_precision_option(cmd, o.precision);
    add_speculative_options(cmd, o.lookup);
    cmd->add_flag("--batch-invariant", o.batch_invariant,
                  "cpu: a request's tokens and log-probabilities are the same bits whatever requests run beside it, "
                  "however its prompt is cut into steps and its drafts fall (every op on its per-row path; prompts "
                  "read up to ~30 % slower, decoding as fast: docs/inference.md; AVX-512 builds)");
}

void add_speculative_options(CLI::App *cmd, LookupOptions &o) {
    cmd->add_option("--speculative-tokens", o.tokens,
                    "cpu: speculative decoding by prompt lookup: where the answer's last tokens occurred before (in "
                    "the prompt or the answer), the up to N tokens that followed them are checked in the next "
                    "step, and those the model draws alike are taken at once — decoding's answer (bit for bit with "
                    "bf16 or int8 weights on AVX-512 for a request's drafts of up to 14: docs/inference.md says "
                    "when; else up to the logits' last bits), "
                    "sooner where it repeats text (code edits, quotes, summaries); 0: off")
        ->check(CLI::Range(int64_t(0), int64_t(64)))
        ->capture_default_str();
    cmd->add_option("--prompt-lookup-max", o.max_ngram,
                    "With --speculative-tokens: the longest run of last tokens looked up")
        ->check(CLI::Range(int64_t(1), int64_t(64)))
        ->capture_default_str();
    cmd->add_option("--prompt-lookup-min", o.min_ngram,
                    "With --speculative-tokens: the shortest (no draft when even it never occurred)")
        ->check(CLI::Range(int64_t(1), int64_t(64)))
        ->capture_default_str();
    cmd->add_option("--lookup-history", o.history,
                    "With --speculative-tokens: also draft from the last N finished requests' prompts and answers "
                    "where the answer's own text has no match (an agent's repeated calls, a client's structured "
                    "answers; a request's speed then tells that such text was recent); 0: its own text only")
        ->check(CLI::Range(int64_t(0), int64_t(1024)))
        ->capture_default_str();
}

std::optional<cpu::MatmulPrecision> parse_infer_precision(const std::string &name) {
    if (name == "auto") return std::nullopt;
    if (name == "fp32" || name == "bf16") return cpu::matmul_precision_from_string(name);
    fail("--precision must be auto, fp32 or bf16, got '{}'", name);
}

void add_infer_precision_option(CLI::App *cmd, std::optional<cpu::MatmulPrecision> &p) {
    cmd->add_option_function<std::string>(
           "--precision", [&p](const std::string &v) { p = parse_infer_precision(v); },
           "cpu: the rows the linears take: auto (bf16 for a bf16 model, as transformers runs one: products exact, "
           "sums fp32, prompts ~2x faster on AVX512_BF16; else fp32), fp32 or bf16")
        ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
        ->default_str("auto");
}

void add_mib_option(CLI::App *cmd, const std::string &name, size_t &bytes, int64_t default_mib,
                    const std::string &help) {
    bytes = size_t(default_mib) << 20;
    cmd->add_option_function<int64_t>(name, [&bytes](int64_t mib) { bytes = size_t(mib) << 20; }, help)
        ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
        ->default_str(std::to_string(default_mib));
}

void add_prefix_cache_option(CLI::App *cmd, size_t &bytes, const std::string &when) {
    add_mib_option(cmd, "--prefix-cache-mb", bytes, 1024,
                   when + "MiB of finished sequences kept so that later prompts beginning with the same tokens (a "
                          "chat's next turn, a shared system prompt, few-shot examples) resume from them instead of "
                          "computing them again (0: off; on cuda a finished sequence stays in its slot until one is "
                          "needed)");
}

std::optional<DType> parse_kv_dtype(const std::string &name) {
    if (name == "auto") return std::nullopt;
    if (name == "bf16") return DType::BF16;
    if (name == "f32") return DType::F32;
    fail("--kv-dtype must be auto, bf16 or f32, got '{}'", name);
}

void add_kv_dtype_option(CLI::App *cmd, std::optional<DType> &kv) {
    cmd->add_option_function<std::string>(
           "--kv-dtype", [&kv](const std::string &v) { kv = parse_kv_dtype(v); },
           "The KV cache's element: auto (bf16 for a bf16 model: half the cache's bytes, and of what a step reads "
           "at long context; else f32), bf16 or f32")
        ->check(CLI::IsMember({"auto", "bf16", "f32"}))
        ->default_str("auto");
}

} // namespace zaya::cli
