// `zaya train`: a whole training run — model set-up from the data's tokenizer, the step loop with progress
// output and metrics.jsonl, periodic validation, the trained model in Hugging Face format, and a text sample.
#pragma once
#include "train/train_config.h"

namespace zaya {

void run_training(const TrainConfig &tc);

} // namespace zaya
