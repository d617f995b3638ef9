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

// A part [at, at + numel) of a checkpoint tensor's elements and who holds it: every rank (owner -1: parameters,
// the balancing controller's state) or one rank (ZeRO-1 optimizer state, optim/zero_shard.h). `data` points at the
// live state (or a snapshot of it) on the ranks that hold the part, and is null on the others.
struct CheckpointPiece {
    size_t at = 0, numel = 0;
    int owner = -1;
    real *data = nullptr;
};

// One tensor of a checkpoint, in logical (unsharded) coordinates, made of pieces in element order.
struct CheckpointTensor {
    std::string file; // "model.safetensors" or "optimizer.safetensors"
    std::string name;
    std::vector<int64_t> shape;
    size_t numel = 0;
    std::vector<CheckpointPiece> pieces;
    // The whole tensor's data when this process holds all of it in one piece, else null.
    real *whole() const {
        return pieces.size() == 1 && pieces[0].data && pieces[0].numel == numel ? pieces[0].data : nullptr;
    }
};

// Every tensor of `t`'s training state, pointing at the live buffers of the parts this rank holds.
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
// Copies the parts this process holds in (the others must have been gathered already) and hashes every tensor.
void checkpoint_image_snapshot(CheckpointImage &img);

// Data parallel with sharded optimizer state: the parts other ranks hold, into rank 0's images. Every rank calls
// its side at the same point, with tensors from checkpoint_tensors: rank 0 checkpoint_gather_images, the others
// checkpoint_send_shards (pieces go point to point, in checkpoint order). Nothing to do with one rank.
void checkpoint_gather_images(Communicator &comm, std::vector<CheckpointImage> &images);
void checkpoint_send_shards(Communicator &comm, const std::vector<CheckpointTensor> &tensors);
// Writes a checkpoint from images (as checkpoint_write does from tensors).
std::string checkpoint_write_images(const std::string &run_dir, int64_t step, const std::vector<CheckpointImage> &images,
                                    nlohmann::json meta);

// Synchronous save of `t`'s current state, called by every rank (the others send rank 0 their optimizer state
// shards); returns the checkpoint directory on rank 0, an empty string on the others.
std::string checkpoint_save(Trainer &t, const std::string &run_dir);

// Restores `t` (built with the same model configuration) from `checkpoint_dir`. Verifies the manifest, the files'
// sizes, and every tensor's shape, dtype and checksum before changing anything; errors name the file or tensor.
// Each rank reads the parts of the state it holds, whatever the process count that wrote the checkpoint.
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
