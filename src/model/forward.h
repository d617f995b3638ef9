// The ZAYA1 forward pass (spec A.1–A.6), written once against the backend table (ops/backend.h): it runs on the
// backend the activations were planned on, with the model's parameters in that backend's memory.
#pragma once
#include "model/activations.h"
#include "model/batch.h"
#include "model/params.h"
#include "ops/backend.h"

namespace zaya {

struct ForwardResult {
    double loss = 0.0;        // mean next-token cross-entropy (when targets were given and the loss not deferred)
    int64_t loss_tokens = 0;  // how many positions it averages over
    bool loss_deferred = false; // loss_in_backward took effect: model_backward returns the loss
};

// Runs the model over `batch` (host vectors, copied into acts) on acts' backend; acts must have been planned for at
// least its tokens and sequences. acts.logits[N,V] holds fp32 logits afterwards where planned (always on the CPU).
// If `targets` is non-null ([N] on the host, −1 = ignore), the mean cross-entropy is computed into the result and
// acts.losses — unless `loss_in_backward` (training) and the backend's LM head backward recomputes the logits anyway
// (Backend::lm_head_needs_logits() false, the GPU): then the head is skipped here, saving one of its four V-wide
// GEMMs per step, and model_backward returns the loss (result.loss_deferred).
ForwardResult model_forward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets = nullptr,
                            bool loss_in_backward = false);

// The batch as the ops see it, once model_forward has copied it into acts (seq_start in the backend's memory).
SeqBatch seq_batch(const Batch &batch, const Activations &acts);

} // namespace zaya
