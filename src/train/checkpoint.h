// Training checkpoints: everything needed to continue a run bit-exactly — parameters (with the balancing biases),
// Muon momentum, AdamW moments, the balancing controller's moments, step counts and the data loader's position.
//
// Layout: RUN_DIR/checkpoints/step_00000042/{manifest.json, model.safetensors, optimizer.safetensors}. A checkpoint
// is written into `step_XXXXXXXX.tmp`, every file fsynced, then the directory is renamed into place; the manifest
// records each file's size and xxh64, and RUN_DIR/checkpoints/latest names the newest complete checkpoint, updated
// last. A directory without a valid manifest is not a checkpoint. (Asynchronous saving, retention, sharded
// reshaping and the supervisor are the checkpoint issue's next steps.)
#pragma once
#include "train/trainer.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// Writes a checkpoint of `t` at its current step; returns the checkpoint directory.
std::string checkpoint_save(Trainer &t, const std::string &run_dir);

// Restores `t` (built with the same model and training configuration) from `checkpoint_dir`, verifying the
// manifest, file sizes, checksums and every tensor's shape. Errors name the file or tensor.
void checkpoint_load(Trainer &t, const std::string &checkpoint_dir);

// The newest complete checkpoint of a run, if any.
std::optional<std::string> checkpoint_latest(const std::string &run_dir);

// Every checkpoint directory of a run (step_XXXXXXXX, complete or not), newest first.
std::vector<std::string> checkpoint_list(const std::string &run_dir);

// Restores from the newest checkpoint that loads: `latest` first, then older ones; each one skipped is reported
// through `warn` with the reason. Returns the directory used; throws if none loads.
std::string checkpoint_resume(Trainer &t, const std::string &run_dir,
                              const std::function<void(const std::string &)> &warn);

// Deletes all but the newest `keep` checkpoints (keep ≥ 1); never touches the one `latest` names.
void checkpoint_prune(const std::string &run_dir, int64_t keep);

} // namespace zaya
