// Everything `zaya train` is told: from flags, or a JSON file (--config) whose keys are the flag names with
// underscores; flags given on the command line win. Saved into the run directory as train_config.json.
#pragma once
#include "data/loader.h"
#include "optim/optimizer.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace zaya {

struct TrainConfig {
    std::string data;          // prepared data directory (zaya prepare)
    std::string out;           // run directory
    std::string model = "small"; // preset or config.json; vocab and special ids follow the tokenizer
    // Start from this trained model (a model directory or a checkpoint; train/start_model.h) instead of random
    // weights of `model`'s shape; the optimizer state and the schedule start afresh.
    std::string init;
    double rope_theta = 0; // RoPE base of the full-attention layers; 0 = the model's own (context extension)
    int64_t steps = 200;
    int64_t batch = 8;         // sequences per optimizer step (global batch)
    int64_t micro_batch = 0;   // sequences per forward/backward; 0 = batch (no accumulation)
    int64_t seq = 256;         // tokens per sequence
    // Document masking (data/loader.h): attention, the CCA conv and the value shift stop at each EOS, positions
    // restart after it (spec B.5's recommendation; off: GPT-2-style sequences across documents).
    bool doc_mask = false;
    // Rows of the training and validation batches (data/loader.h): "chunks" of the token stream, or "documents":
    // whole documents packed by best-fit decreasing, padded (fine-tuning: no example cut from its prompt).
    std::string packing = "chunks";
    RowLayout row_layout() const { return {packing_from_string(packing), doc_mask}; }
    // Context parallelism (dist/context_parallel.h, spec C.4): groups of this many ranks share each sequence, rank
    // r of a group taking its r-th chunk of seq/context_parallel tokens; the groups are data parallel among
    // themselves (the ranks divide into groups of consecutive ranks). 1: off.
    int64_t context_parallel = 1;
    uint64_t seed = 1234;
    double lr = 1e-2;          // peak learning rate, shared by Muon (RMS-matched) and AdamW
    double weight_decay = 0.1;
    double grad_clip = 1.0;
    std::string ns_precision = "bf16"; // Muon's Newton–Schulz: bf16 (torch's) | fp32
    // Matmul operands of forward and backward: fp32, or bf16 with fp32 accumulation like torch.autocast(bfloat16)
    // (master weights, activations, gradients and optimizer stay fp32; ops/cpu/gemm.h MatmulPrecision).
    std::string precision = "fp32";
    // Where training runs: cpu | cuda (ops/backend.h). On cuda the parameters, gradients and optimizer state live
    // on the GPU; the balancing controller and checkpoints use host copies.
    std::string device = "cpu";
    std::string schedule = "cosine"; // cosine | wsd | constant
    int64_t warmup = -1;       // warmup steps; −1: 5% of the steps, at most 100
    double min_lr_ratio = 0.1;
    bool balance = true;       // the balancing-bias controller (spec B.1)
    double balance_lr = 1e-3;
    int64_t eval_every = 50;   // validation every N steps (and at the end); 0 = only at the end
    int64_t eval_batches = 8;  // validation batches of `batch` sequences each
    int64_t sample_tokens = 200; // text sample at the end (0 = none)
    std::string sample_prompt = "The ";
    // The sample as a chat (data/chat_template.h): sample_prompt is the user's turn, the model answers it and stops
    // at the turn's end, as `zaya generate --chat` does (after fine-tuning on chats).
    bool sample_chat = false;
    // For reference comparisons (tools/train_reference.py): write the initial model to RUN_DIR/init/ and every
    // step's token batch to RUN_DIR/batches.bin (int32, [steps, batch, seq+1]; with loss masks or packed rows,
    // their flags to batches_learned.bin, u8, the same shape).
    bool save_init = false;
    // Checkpoints (train/checkpoint.h): every N steps and at the end (0 = never); resume from the run's latest
    // checkpoint, or from a given checkpoint directory.
    int64_t ckpt_every = 0;
    int64_t keep = 0; // checkpoints to keep (newest first); 0 = all
    bool resume = false;
    std::string resume_from;
    int64_t stop_after = 0; // stop (with a checkpoint) after this many steps of this invocation; 0 = run to the end
    bool dump_batches = false;
    bool ckpt_async = true; // checkpoints are written by a background thread (train/checkpoint_writer.h)
    // The step guard (train/step_guard.h): skip updates whose loss or gradient norm is more than spike_z standard
    // deviations above the last spike_window accepted steps (0 = off); roll back after spike_rollback consecutive
    // skipped steps (0 = never).
    double spike_z = 8.0;
    int64_t spike_window = 100;
    int64_t spike_rollback = 3;
    // Data parallel: a collective that has not completed after this many seconds aborts every rank (a rank died
    // or hangs; dist/comm.h). Long enough for the longest legitimate wait — rank 0 finishing a large checkpoint
    // write while the others wait in the next collective — and the same as the supervisor's heartbeat timeout.
    double comm_timeout = 600;

    void validate() const;
    void validate_precisions() const; // ns_precision, precision and device name known values
    int64_t micro() const { return micro_batch > 0 ? micro_batch : batch; }
    int64_t warmup_steps() const { return warmup >= 0 ? warmup : std::min<int64_t>(100, steps / 20); }
    OptimConfig optim_config() const;
};

void train_config_from_json(TrainConfig &c, const nlohmann::json &j, const std::string &source);
nlohmann::json train_config_to_json(const TrainConfig &c);

} // namespace zaya
