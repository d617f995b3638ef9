// Training checkpoints: everything needed to continue a run bit-exactly — parameters (with the balancing biases),
// Muon momentum, AdamW moments, the balancing controller's moments, step counts, the step guard's history and the
// data loader's position (which, with the seed, is the run's whole RNG state: nothing else draws random numbers
// during training).
//
// Layout: RUN_DIR/checkpoints/step_00000042/{model.safetensors, optimizer.safetensors, manifest.json}.
// Tensors are stored in logical (unsharded) coordinates under their own names: model weights under their Hugging
// Face names, optimizer state as `<param>.muon_momentum`, `<param>.exp_avg`, `<param>.exp_avg_sq` and
// `<layer>.mlp.gate.balancing_biases.exp_avg{,_sq}`, each with its parameter's shape — so any process count can
// read any checkpoint. The manifest (format "zaya-checkpoint", version 2) records step, optimizer and balancing
// step counts, model and training config, loader position, world size, step guard state, and for every tensor its
// name, file, dtype, shape, byte offset, size and xxh64.
//
// Writing: into `step_XXXXXXXX.tmp`, every file fsynced, manifest last, the directory renamed into place and
// fsynced, then RUN_DIR/checkpoints/latest updated. A directory without a valid manifest is not a checkpoint; a
// failed save removes its temporary directory and leaves every complete checkpoint as it was.
#pragma once
#include "io/direct_write.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "train/trainer.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// One tensor of a checkpoint. `data` points at the live training state, or at a snapshot of it.
struct CheckpointTensor {
    std::string file; // "model.safetensors" or "optimizer.safetensors"
    std::string name;
    std::vector<int64_t> shape;
    real *data = nullptr;
    size_t numel = 0;
};

// Every tensor of `t`'s training state, pointing at the live buffers.
std::vector<CheckpointTensor> checkpoint_tensors(Trainer &t);
// The manifest fields of `t`'s current state, except the tensor and file tables.
nlohmann::json checkpoint_meta(Trainer &t);

// Writes a checkpoint of step `step` from `tensors` and `meta` into RUN_DIR/checkpoints (see above); returns its
// directory. On any error the temporary directory is removed and the error rethrown.
std::string checkpoint_write(const std::string &run_dir, int64_t step, const std::vector<CheckpointTensor> &tensors,
                             nlohmann::json meta);

// A checkpoint data file prepared in memory for an asynchronous save: its complete safetensors bytes (header
// written at construction, data block 4096-aligned so it can go to disk with O_DIRECT) and where each tensor
// lies in it. The same layout as checkpoint_write produces: both paths write byte-identical files.
struct CheckpointImage {
    std::string file;
    AlignedBytes bytes;
    std::vector<CheckpointTensor> tensors; // data: the live state the image is a snapshot of
    std::vector<WrittenTensor> placement;  // offsets and sizes in `bytes`; xxh64 set by checkpoint_image_snapshot
};
std::vector<CheckpointImage> checkpoint_images(const std::vector<CheckpointTensor> &tensors);
void checkpoint_image_snapshot(CheckpointImage &img); // copies the live tensors in and hashes them
// Writes a checkpoint from images (as checkpoint_write does from tensors).
std::string checkpoint_write_images(const std::string &run_dir, int64_t step, const std::vector<CheckpointImage> &images,
                                    nlohmann::json meta);

// Synchronous save of `t`'s current state; returns the checkpoint directory.
std::string checkpoint_save(Trainer &t, const std::string &run_dir);

// Restores `t` (built with the same model configuration) from `checkpoint_dir`. Verifies the manifest, the files'
// sizes, and every tensor's shape, dtype and checksum before changing anything; errors name the file or tensor.
void checkpoint_load(Trainer &t, const std::string &checkpoint_dir);

// The model of a checkpoint (its config from the manifest, its weights verified as above).
Model checkpoint_load_model(const std::string &checkpoint_dir);
// The step and training config a checkpoint's manifest records (for `zaya export`).
nlohmann::json checkpoint_manifest(const std::string &checkpoint_dir);

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
