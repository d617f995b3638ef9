// `zaya train`: a whole training run — model set-up from the data's tokenizer, the step loop with progress
// output and metrics.jsonl, periodic validation, checkpoints (asynchronous), the step guard's skips and
// rollbacks, graceful stop on signals, the trained model in Hugging Face format, and a text sample.
#pragma once
#include "train/train_config.h"

namespace zaya {

// Returns the process exit status: 0 when the run completed (or stopped as --stop-after asked), 128 + signal
// when SIGINT/SIGTERM/SIGHUP stopped it gracefully after a checkpoint.
//
// Under a supervisor (train/supervisor.h) the environment names a pipe, ZAYA_SUPERVISOR_FD, on which the run
// reports "ready STEP", "step STEP" after every step and "ckpt STEP" after every completed checkpoint.
int run_training(const TrainConfig &tc);

} // namespace zaya
