// zaya info MODEL_DIR|CHECKPOINT_DIR|PRESET — config summary, parameter counts and memory needs, without loading
// weights.
#include "cli/commands.h"
#include "core/error.h"
#include "data/hf_chat_template.h"
#include "data/tokenizer.h"
#include "dist/context_parallel.h"
#include "infer/answer_formats.h"
#include "io/config_json.h"
#include "io/safetensors.h"
#include "model/activations.h"
#include "model/params.h"
#include "optim/param_groups.h"
#include "optim/zero_shard.h"
#include "train/checkpoint.h"
#include "train/memory.h"

#include <filesystem>
#include <fmt/format.h>
#include <omp.h>

namespace zaya::cli {

namespace {

std::string human(double v) {
    const char *units[] = {"", "K", "M", "B", "T"};
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, ++u;
    return fmt::format("{:.2f}{}", v, units[u]);
}
std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1ull << 30)); }
std::string mib(size_t bytes) { return fmt::format("{:9.1f} MiB", double(bytes) / double(1 << 20)); } // a column

struct InfoArgs {
    std::string target;
    int64_t seq_len = 2048;
    bool train = false, doc_mask = false;
    int64_t micro_batch = 8;
    int ranks = 1, context_parallel = 1;
    std::string device = "cpu", precision = "fp32";
};

// The GPU's plan (train/memory_device.cpp): what zaya allocates on each rank's device.
void print_device_train_memory(const ZayaConfig &c, const InfoArgs &a) {
    const std::vector<MemoryItem> items =
        device_train_memory(c, a.micro_batch, a.seq_len, a.ranks, a.precision == "bf16", a.doc_mask);
    fmt::print("training memory  micro-batch {} × {} tokens, matmuls {}, on the GPU{}, allocated by the end of the "
               "first step:\n",
               a.micro_batch, a.seq_len, a.precision, a.ranks > 1 ? fmt::format(", per rank of {}", a.ranks) : "");
    for (const MemoryItem &i : items)
        fmt::print("  {:<14} {}  ({})\n", i.name, mib(i.bytes), i.what);
    const size_t total = total_bytes(items);
    fmt::print("  total          {}  = {} (the CUDA context and cuBLASLt's own allocations come on top)\n", mib(total),
               gib(double(total)));
}

void run_info(const InfoArgs &a) {
    const std::string &target = a.target;
    const int64_t seq_len = a.seq_len;
    ZayaConfig c;
    std::string checkpoint;
    std::optional<Tokenizer> tokenizer;        // a model directory's
    if (std::filesystem::exists(std::filesystem::path(target) / "manifest.json")) { // a training checkpoint
        const nlohmann::json m = checkpoint_manifest(target);
        c = checkpoint_model_config(target, m);
        if (!m.contains("files") || !m.at("files").is_object())
            fail("{}: malformed manifest: no files table", (std::filesystem::path(target) / "manifest.json").string());
        const nlohmann::json &files = m.at("files");
        uint64_t bytes = 0;
        for (const auto &f : files) bytes += f.value("bytes", uint64_t(0));
        const int64_t ranks = m.value("world_size", int64_t(1));
        checkpoint = fmt::format("training checkpoint, step {}, written by {} rank{}: {} files, {:.1f} MB",
                                 m.value("step", int64_t(-1)), ranks, ranks == 1 ? "" : "s", files.size(),
                                 double(bytes) / 1e6);
    } else if (std::filesystem::is_directory(target)) {
        c = config_load((std::filesystem::path(target) / "config.json").string());
        SafetensorSet set = SafetensorSet::open(target);
        checkpoint = fmt::format("{} tensors{}", set.size(), c.legacy_layout ? " (legacy Megatron-export names)" : "");
        if (const auto file = Tokenizer::find_in(target)) tokenizer = Tokenizer::load(*file);
    } else {
        c = config_preset(target);
        checkpoint = "preset (no weights on disk)";
    }
    ParamCounts pc = param_counts(c);
    int64_t sliding = 0;
    for (LayerType t : c.layer_types) sliding += t == LayerType::HybridSliding;
    fmt::print("model            {}\n", target);
    fmt::print("checkpoint       {}\n", checkpoint);
    fmt::print("layers           {} ({} sliding-window{})\n", c.num_hidden_layers, sliding,
               c.sliding_window ? fmt::format(", window {}", *c.sliding_window) : "");
    fmt::print("hidden           {}\n", c.hidden_size);
    fmt::print("attention (CCA)  {} query heads, {} KV heads, head_dim {}, conv kernels {}+{}\n",
               c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.cca_time0, c.cca_time1);
    fmt::print("rope             theta {} (hybrid), {} (sliding), rotary dims {}\n", c.rope_hybrid.rope_theta,
               c.rope_sliding.rope_theta, int64_t(double(c.head_dim) * c.rope_hybrid.partial_rotary_factor));
    fmt::print("moe              {} experts + skip slot, top-1, intermediate {}, router latent {}\n", c.num_experts,
               c.moe_intermediate_size, c.router_hidden_size);
    fmt::print("vocab            {} ({} embeddings{})\n", c.vocab_size, c.tie_word_embeddings ? "tied" : "untied",
               c.lm_head_bias ? ", lm_head bias" : "");
    if (tokenizer) {
        const auto special = [&](int32_t id) { return id < 0 ? std::string("none") : fmt::format("{}", id); };
        fmt::print("tokenizer        {} ({}), {} tokens, bos {}, eos {}\n", tokenizer->file_name(), tokenizer->kind(),
                   tokenizer->vocab_size(), special(tokenizer->bos_id()), special(tokenizer->eos_id()));
    }
    if (tokenizer) {
        // A template that does not parse is said, not thrown: the rest of the model is still worth showing.
        std::string chats = "ZAYA1's built-in turn format (<start_of_turn>)";
        try {
            if (const HfChatTemplate *t = tokenizer->chat_template())
                chats = fmt::format("{} (the model's own, Jinja{})", t->file(),
                                    t->has_generation_blocks() ? ", with {% generation %} blocks" : "");
        } catch (const Error &e) {
            chats = fmt::format("error: {}", e.what());
        }
        fmt::print("chat format      {}\n", chats);
        // How `zaya serve` reads chat answers by default (--tool-call-parser auto, --reasoning-parser auto).
        const ToolFormat tools = resolve_tool_format(&*tokenizer, "auto");
        fmt::print("chat answers     {}\n", answer_formats_summary(tools, resolve_reasoning(&*tokenizer, "auto")));
    }
    fmt::print("context          {} positions\n", c.max_position_embeddings);
    fmt::print("parameters       {} total ({}), {} embedding, {} non-embedding\n", human(double(pc.total)), pc.total,
               human(double(pc.embedding + pc.lm_head)), human(double(pc.non_embedding)));
    fmt::print("active per token {} non-embedding ({} with the LM head)\n", human(double(pc.active_non_embedding)),
               human(double(pc.active_non_embedding + (c.tie_word_embeddings ? pc.embedding : pc.lm_head))));
    fmt::print("weights memory   {} fp32, {} bf16\n", gib(double(pc.total) * 4), gib(double(pc.total) * 2));
    fmt::print("forward memory   {} activations for one {}-token sequence (inference, fp32)\n",
               gib(double(Activations::bytes_needed(c, seq_len, 1, false))), seq_len);
    if (!a.train) return;
    if (a.ranks > 1)
        fmt::print("data parallel    {} ranks: collectives move {:.1f} MiB per step over the ranks (gradient sums onto "
                   "owners, updated parameters)\n",
                   a.ranks,
                   double(data_parallel_bytes_per_step(ParamGroups::classify(ParamLayout::build(c), c), a.ranks)) /
                       (1 << 20));
    if (a.context_parallel > 1) { // before the GPU's plan, which has no context parallelism (refused there)
        ContextParallel::check_options("info", a.context_parallel, seq_len, a.device);
        ContextParallel::check_ranks("info", a.ranks, a.context_parallel);
        ContextParallel::check_chunks(c, seq_len, a.context_parallel);
    }
    if (a.device == "cuda") return print_device_train_memory(c, a);
    TrainMemory tm = train_memory(c, a.micro_batch, seq_len, a.ranks, NsPrecision::BF16, 0, a.precision == "bf16",
                                  a.doc_mask, a.context_parallel);
    fmt::print("training memory  micro-batch {} × {} tokens, fp32 weights, matmuls {}, allocated once before the first "
               "step{}{}:\n",
               a.micro_batch, seq_len, a.precision, a.ranks > 1 ? fmt::format(", per rank of {}", a.ranks) : "",
               a.context_parallel > 1
                   ? fmt::format(" (context parallel: {} tokens of each sequence per rank)", seq_len / a.context_parallel)
                   : "");
    fmt::print("  parameters     {}\n", mib(tm.params));
    fmt::print("  gradients      {}\n", mib(tm.grads));
    fmt::print("  optimizer      {}  (Muon momentum, AdamW moments, balancing biases' AdamW{})\n", mib(tm.optimizer),
               a.ranks > 1 ? "; the largest rank's ZeRO-1 share" : "");
    if (a.ranks > 1) {
        std::string list;
        for (size_t b : tm.optimizer_per_rank)
            list += fmt::format("{}{:.1f}", list.empty() ? "" : " / ", double(b) / double(1 << 20));
        fmt::print("    per rank     {} MiB\n", list);
    }
    fmt::print("  Muon scratch   {}  (bf16 Newton–Schulz, one workspace per thread: {})\n", mib(tm.muon_workspace),
               omp_get_max_threads());
    fmt::print("  activations    {}  (every layer kept for the backward pass)\n", mib(tm.activations));
    fmt::print("  backward       {}\n", mib(tm.scratch));
    fmt::print("  conv im2col    {}\n", mib(tm.conv_im2col));
    if (tm.context)
        fmt::print("  context        {}  (every layer's keys and values gathered from the group, their gradients, "
                   "halos)\n",
                   mib(tm.context));
    if (tm.bf16_operands)
        fmt::print("  bf16 operands  {}  (the largest GEMM's operands rounded to bf16: the LM head's)\n",
                   mib(tm.bf16_operands));
    const size_t base = process_rss_bytes();
    fmt::print("  program        {}  (zaya and its libraries, resident now)\n", mib(base));
    fmt::print("  total          {}\n", mib(tm.total() + base));
}

} // namespace

void register_info(CLI::App &app) {
    auto *cmd = app.add_subcommand("info", "Show a model's config, parameter counts and memory needs");
    auto a = std::make_shared<InfoArgs>();
    cmd->add_option("model", a->target,
                    "Model directory (config.json + safetensors), training checkpoint directory or preset name")
        ->required();
    cmd->add_option("--seq-len,--seq", a->seq_len, "Sequence length for the memory estimates")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_flag("--train", a->train, "Also print the memory a training run needs");
    cmd->add_option("--micro-batch", a->micro_batch, "Sequences per forward/backward, for --train")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--ranks", a->ranks, "Data-parallel ranks, for --train (the optimizer state is sharded over them)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--device", a->device, "Where the training run would be, for --train: cpu (host memory) or cuda "
                                           "(the GPU's memory)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_option("--precision", a->precision, "Matmul operand precision of the run, for --train: fp32 or bf16")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    cmd->add_flag("--doc-mask", a->doc_mask, "The run cuts sequences at each EOS, for --train (up to one per token)");
    cmd->add_option("--context-parallel", a->context_parallel,
                    "Ranks sharing each sequence, for --train (zaya train --context-parallel; set --ranks too)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->callback([a] { run_info(*a); });
}

} // namespace zaya::cli
