// The model a training run starts from. Without --init: random weights (model/init.h) of --model's shape, a preset
// or a config.json, whose vocabulary and special ids follow the data's tokenizer. With --init DIR: the shape,
// weights and balancing biases of a trained model — a Hugging Face model directory (a run's model/, `zaya export`'s
// output, a released ZAYA1 checkpoint; bf16 weights are widened to fp32) or a zaya checkpoint directory — with a
// new optimizer state, step count and schedule: continued pre-training, fine-tuning, or a context-extension phase
// (a longer --seq with a larger --rope-theta, as ZAYA1 went from 4k tokens at θ 1e4 to 32k at 1e6, spec C.4).
//
// A run started from --init that resumes takes its shape from the checkpoint it resumes, and its weights from
// that checkpoint only: --init's directory is not read again, and may be gone.
//
// Either way --rope-theta, when set, replaces the RoPE base of the full-attention layers (sliding-window layers keep
// theirs: their window does not grow with the context), and max_position_embeddings grows to --seq if it is less.
#pragma once
#include "data/manifest.h"
#include "model/params.h"
#include "train/train_config.h"

#include <optional>
#include <string>

namespace zaya {

// Fails, naming the directory and what does not fit, when --init's vocabulary is smaller than the data's
// tokenizer's, or when DIR holds a tokenizer (.model or .json) other than the data's (`tokenizer_path`): the ids would
// mean other pieces than the ones the model learned.
Model train_start_model(const TrainConfig &tc, const DataManifest &dm, const std::string &tokenizer_path);

// The trained model in `dir`: a model directory or a checkpoint (not a run directory: the error names what to
// give instead); errors start with `who`.
Model load_model_or_checkpoint(const std::string &dir, const std::string &who);

// The same, checked as above against the data it will read; errors start with `who` ("--init", "eval").
Model load_trained_model(const std::string &dir, const DataManifest &dm, const std::string &tokenizer_path,
                         const std::string &who);

// The tokenizer a training checkpoint's run was trained with: its data directory's tokenizer.model or .json (the
// manifest's train_config.data), when `dir` is a checkpoint and that file is still there.
std::optional<std::string> checkpoint_tokenizer(const std::string &dir);

} // namespace zaya
