// Training checkpoints: everything needed to continue a run bit-exactly — parameters (with the balancing biases),
// Muon momentum, AdamW moments, the balancing controller's moments, step counts, the step guard's history and the
// data loader's position (which, with the seed, is the run's whole RNG state: nothing else draws random numbers
// during training).
//
// Layout: RUN_DIR/checkpoints/step_00000042/{model.safetensors, optimizer.safetensors, manifest.json} from one
// process; from N data-parallel ranks, each rank writes its own files (model-0000R-of-0000N.safetensors,
// optimizer-0000R-of-0000N.safetensors), at once. Tensors are described in logical (unsharded) coordinates under
// their own names: model weights under their Hugging Face names, optimizer state as `<param>.muon_momentum`,
// `<param>.exp_avg`, `<param>.exp_avg_sq` and `<layer>.mlp.gate.balancing_biases.exp_avg{,_sq}`, each with its
// parameter's shape; a tensor whose parts different ranks hold (ZeRO-1 state) is stored as chunks, element ranges
// of it — so any process count can read any checkpoint. The manifest (format "zaya-checkpoint", version 3; version
// 2 is read too) records step, optimizer and balancing step counts, model and training config, loader position,
// world size, step guard state, every file's size, and for every tensor its name, dtype, shape and chunks (file,
// element range, byte offset, size, xxh64).
//
// Writing: into `step_XXXXXXXX.tmp` (rank 0 clears it, every rank waits for that), every file fsynced; each other
// rank then leaves a report there (its chunks and checksums, or its error); rank 0 waits for them all, writes the
// manifest last, renames the directory into place, fsyncs it and updates RUN_DIR/checkpoints/latest. A directory
// without a valid manifest is not a checkpoint; a failed save (any rank's part) removes its temporary directory
// and leaves every complete checkpoint as it was. The ranks share the run directory's file system.
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
    std::string group; // "model" or "optimizer": the files it is stored in
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

// Where each part of `tensors` is stored when `ranks` processes write them: one chunk per piece one rank holds
// (its owner writes it) and one per tensor every rank holds (given whole to the rank with the fewest bytes so far,
// in checkpoint order), in checkpoint order. The same on every rank.
struct CheckpointChunk {
    size_t tensor = 0; // index in the tensor list
    size_t at = 0, numel = 0;
    int writer = 0;
    std::string file;           // the writer's file of the tensor's group
    std::string entry;          // the safetensors entry: the tensor's name when whole, else "NAME[at:end]"
    std::vector<int64_t> shape; // the tensor's when whole, else {numel}
    const real *data = nullptr; // the live state, on the writer
};
std::vector<CheckpointChunk> checkpoint_chunks(const std::vector<CheckpointTensor> &tensors, int ranks);

// What a save wrote: on rank 0 the checkpoint directory and the bytes of all its files; on the other ranks no
// directory and the bytes of their own part.
struct CheckpointSaved {
    std::string dir;
    uint64_t bytes = 0;
};

// Synchronous save of `tensors` (checkpoint_tensors) with manifest fields `meta` (checkpoint_meta), called by
// every rank of `comm` at the same step: each writes its chunks from the live state. Throws on rank 0 when any
// rank's part failed (naming the rank) and on a rank whose own part failed.
CheckpointSaved checkpoint_save_tensors(Communicator &comm, const std::string &run_dir, int64_t step,
                                        const std::vector<CheckpointTensor> &tensors, nlohmann::json meta);

// The asynchronous writer's pieces (train/checkpoint_writer.h). A file of this rank's part prepared in memory: its
// complete safetensors bytes (header written at construction, data block 4096-aligned so it can go to disk with
// O_DIRECT) and where each chunk lies in it. The same layout as checkpoint_save_tensors writes: both paths write
// byte-identical files.
struct CheckpointImage {
    std::string file;
    AlignedBytes bytes;
    std::vector<CheckpointChunk> chunks; // data: the live state the image is a snapshot of
    std::vector<WrittenTensor> placement; // offsets and sizes in `bytes`; xxh64 set by checkpoint_image_snapshot
};
// The files rank `rank` of `ranks` writes.
std::vector<CheckpointImage> checkpoint_images(const std::vector<CheckpointTensor> &tensors, int rank, int ranks);
// Copies the chunks in and hashes them.
void checkpoint_image_snapshot(CheckpointImage &img);
// Starts a save of `step`: rank 0 clears the step's temporary directory and every rank of `comm` waits for that
// (from its communicating thread, at the same step). Returns what went wrong on rank 0 (empty: nothing).
std::string checkpoint_begin(Communicator &comm, const std::string &run_dir, int64_t step);
// This rank's part of the save begun (`begun`: checkpoint_begin's error): writes the images, then as in
// checkpoint_save_tensors — ranks other than 0 report to rank 0 through the file system, rank 0 waits for the
// reports and commits. Uses no communicator (the writer thread calls it); returns and throws as
// checkpoint_save_tensors does.
CheckpointSaved checkpoint_write_images(const std::string &run_dir, int64_t step, int rank, int ranks,
                                        const std::vector<CheckpointTensor> &tensors,
                                        const std::vector<CheckpointImage> &images, nlohmann::json meta,
                                        const std::string &begun);

// Synchronous save of `t`'s current state, called by every rank; see checkpoint_save_tensors.
CheckpointSaved checkpoint_save(Trainer &t, const std::string &run_dir);

// Fills the pieces of `wanted` this process holds (data non-null) from the checkpoint in `checkpoint_dir`, after
// verifying the manifest, the files' sizes and every chunk of every wanted tensor (shape, dtype, checksum); nothing
// is written unless all of it checks out. Errors name the file or tensor.
void checkpoint_read_tensors(const std::string &checkpoint_dir, const std::vector<CheckpointTensor> &wanted);

// Restores `t` (built with the same model configuration) from `checkpoint_dir`. Verifies the manifest, the files'
// sizes, and every tensor's shape, dtype and checksum before changing anything; errors name the file or tensor.
// Each rank reads the parts of the state it holds, whatever the process count that wrote the checkpoint.
void checkpoint_load(Trainer &t, const std::string &checkpoint_dir);

// The model of a checkpoint (its config from the manifest, its weights verified as above).
Model checkpoint_load_model(const std::string &checkpoint_dir);
// The step and training config a checkpoint's manifest records (for `zaya export`).
nlohmann::json checkpoint_manifest(const std::string &checkpoint_dir);
// The model config of a checkpoint's manifest (`manifest`, read from `checkpoint_dir`); fails naming the manifest
// when it has none.
ZayaConfig checkpoint_model_config(const std::string &checkpoint_dir, const nlohmann::json &manifest);

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
