#include "train/train_config.h"

#include "core/error.h"
#include "dist/context_parallel.h"
#include "ops/cpu/gemm.h"

#include <nlohmann/json.hpp>

namespace zaya {

void TrainConfig::validate() const {
    if (data.empty()) fail("train: --data is required");
    if (out.empty()) fail("train: --out is required");
    if (steps <= 0) fail("train: steps must be positive, got {}", steps);
    if (batch <= 0) fail("train: batch must be positive, got {}", batch);
    if (micro_batch < 0 || micro() > batch || batch % micro() != 0)
        fail("train: micro_batch ({}) must divide batch ({})", micro_batch, batch);
    if (seq <= 1) fail("train: seq must be at least 2, got {}", seq);
    if (model.empty() && init.empty()) fail("train: --model or --init is required");
    if (!(rope_theta >= 0)) fail("train: rope_theta must be positive (0 = the model's own), got {}", rope_theta);
    if (!(lr > 0)) fail("train: lr must be positive, got {}", lr);
    if (warmup < -1 || warmup > steps) fail("train: warmup must be in [0, steps] (or −1 for 5% of them), got {}", warmup);
    if (ckpt_every < 0) fail("train: ckpt_every must be ≥ 0, got {}", ckpt_every);
    if (keep < 0) fail("train: keep must be ≥ 0, got {}", keep);
    if (stop_after < 0) fail("train: stop_after must be ≥ 0, got {}", stop_after);
    if (eval_every < 0 || eval_batches < 0) fail("train: eval_every and eval_batches must be ≥ 0");
    if (!(spike_z >= 0)) fail("train: spike_z must be ≥ 0 (0 = off), got {}", spike_z);
    if (spike_window < 2) fail("train: spike_window must be at least 2, got {}", spike_window);
    if (spike_rollback < 0) fail("train: spike_rollback must be ≥ 0 (0 = never), got {}", spike_rollback);
    if (!(comm_timeout >= 0)) fail("train: comm_timeout must be ≥ 0 seconds (0 = off), got {}", comm_timeout);
    schedule_kind_from_string(schedule); // names the bad value
    if (packing != "chunks" && packing != "documents")
        fail("train: packing must be 'chunks' or 'documents', got '{}'", packing);
    ContextParallel::check_options("train", context_parallel, seq, device);
    validate_precisions();
}

void TrainConfig::validate_precisions() const {
    ns_precision_from_string(ns_precision);
    cpu::matmul_precision_from_string(precision);
    if (device != "cpu" && device != "cuda") fail("train: device must be 'cpu' or 'cuda', got '{}'", device);
}

OptimConfig TrainConfig::optim_config() const {
    OptimConfig o;
    o.lr = lr;
    o.weight_decay = weight_decay;
    o.grad_clip = grad_clip;
    o.ns_precision = ns_precision_from_string(ns_precision);
    o.schedule.kind = schedule_kind_from_string(schedule);
    o.schedule.warmup_steps = warmup_steps();
    o.schedule.total_steps = steps;
    o.schedule.min_lr_ratio = min_lr_ratio;
    o.validate();
    return o;
}

void train_config_from_json(TrainConfig &c, const nlohmann::json &j, const std::string &source) {
    if (!j.is_object()) fail("{}: a train config must be a JSON object", source);
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string &k = it.key();
        const nlohmann::json &v = it.value();
        auto want = [&](bool ok, const char *type) {
            if (!ok) fail("{}: field '{}' must be {}, got {}", source, k, type, v.dump());
        };
        auto integer = [&](int64_t &dst) { want(v.is_number_integer(), "an integer"), dst = v.get<int64_t>(); };
        auto number = [&](double &dst) { want(v.is_number(), "a number"), dst = v.get<double>(); };
        auto string = [&](std::string &dst) { want(v.is_string(), "a string"), dst = v.get<std::string>(); };
        if (k == "data") string(c.data);
        else if (k == "out") string(c.out);
        else if (k == "model") string(c.model);
        else if (k == "init") string(c.init);
        else if (k == "rope_theta") number(c.rope_theta);
        else if (k == "steps") integer(c.steps);
        else if (k == "batch") integer(c.batch);
        else if (k == "micro_batch") integer(c.micro_batch);
        else if (k == "seq") integer(c.seq);
        else if (k == "doc_mask") want(v.is_boolean(), "true or false"), c.doc_mask = v.get<bool>();
        else if (k == "packing") string(c.packing);
        else if (k == "context_parallel") integer(c.context_parallel);
        else if (k == "seed") want(v.is_number_unsigned(), "a non-negative integer"), c.seed = v.get<uint64_t>();
        else if (k == "lr") number(c.lr);
        else if (k == "weight_decay") number(c.weight_decay);
        else if (k == "grad_clip") number(c.grad_clip);
        else if (k == "ns_precision") string(c.ns_precision);
        else if (k == "precision") string(c.precision);
        else if (k == "device") string(c.device);
        else if (k == "schedule") string(c.schedule);
        else if (k == "warmup") integer(c.warmup);
        else if (k == "min_lr_ratio") number(c.min_lr_ratio);
        else if (k == "balance") want(v.is_boolean(), "true or false"), c.balance = v.get<bool>();
        else if (k == "balance_lr") number(c.balance_lr);
        else if (k == "eval_every") integer(c.eval_every);
        else if (k == "eval_batches") integer(c.eval_batches);
        else if (k == "sample_tokens") integer(c.sample_tokens);
        else if (k == "sample_prompt") string(c.sample_prompt);
        else if (k == "sample_chat") want(v.is_boolean(), "true or false"), c.sample_chat = v.get<bool>();
        else if (k == "ckpt_every") integer(c.ckpt_every);
        else if (k == "keep") integer(c.keep);
        else if (k == "resume") want(v.is_boolean(), "true or false"), c.resume = v.get<bool>();
        else if (k == "resume_from") string(c.resume_from);
        else if (k == "stop_after") integer(c.stop_after);
        else if (k == "save_init") want(v.is_boolean(), "true or false"), c.save_init = v.get<bool>();
        else if (k == "dump_batches") want(v.is_boolean(), "true or false"), c.dump_batches = v.get<bool>();
        else if (k == "ckpt_async") want(v.is_boolean(), "true or false"), c.ckpt_async = v.get<bool>();
        else if (k == "spike_z") number(c.spike_z);
        else if (k == "spike_window") integer(c.spike_window);
        else if (k == "spike_rollback") integer(c.spike_rollback);
        else if (k == "comm_timeout") number(c.comm_timeout);
        else fail("{}: unknown field '{}'", source, k);
    }
}

nlohmann::json train_config_to_json(const TrainConfig &c) {
    return {{"data", c.data},       {"out", c.out},
            {"model", c.model},     {"init", c.init},
            {"rope_theta", c.rope_theta}, {"steps", c.steps},
            {"batch", c.batch},     {"micro_batch", c.micro()},
            {"seq", c.seq},         {"doc_mask", c.doc_mask}, {"packing", c.packing},
            {"context_parallel", c.context_parallel}, {"seed", c.seed},
            {"lr", c.lr},           {"weight_decay", c.weight_decay},
            {"grad_clip", c.grad_clip}, {"ns_precision", c.ns_precision}, {"precision", c.precision}, {"device", c.device}, {"schedule", c.schedule},
            {"warmup", c.warmup_steps()},   {"min_lr_ratio", c.min_lr_ratio},
            {"balance", c.balance}, {"balance_lr", c.balance_lr},
            {"eval_every", c.eval_every}, {"eval_batches", c.eval_batches},
            {"sample_tokens", c.sample_tokens}, {"sample_prompt", c.sample_prompt}, {"sample_chat", c.sample_chat},
            {"save_init", c.save_init}, {"dump_batches", c.dump_batches},
            {"ckpt_every", c.ckpt_every}, {"keep", c.keep}, {"resume", c.resume}, {"resume_from", c.resume_from},
            {"stop_after", c.stop_after}, {"ckpt_async", c.ckpt_async}, {"spike_z", c.spike_z},
            {"spike_window", c.spike_window}, {"spike_rollback", c.spike_rollback}, {"comm_timeout", c.comm_timeout}};
}

} // namespace zaya
