// The mean next-token loss of a model over a data set's validation split: what `zaya train` reports as val_loss
// and `zaya eval` prints. The split is cut into chunks of seq + 1 tokens (data/loader.h ValBatches), run `batch`
// sequences per forward pass on each rank, the losses summed over the ranks.
#pragma once
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/params.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace zaya {

struct EvalResult {
    double loss = 0;         // mean over the tokens
    int64_t tokens = 0;      // next-token targets scored, over all ranks
    int64_t batches = 0;     // forward passes of `batch` sequences per rank
    // With per_position: the mean loss at each position of a sequence [seq], position p predicting token p + 1 from
    // the p + 1 before it (with doc_mask: positions within a document); how the loss falls along a sequence shows
    // how much of a long context a model uses.
    // With loss masks positions hold unequal counts of targets: position_tokens [seq] (a mean over none is NaN).
    std::vector<double> position_loss;
    std::vector<int64_t> position_tokens;
};

// Up to `max_batches` batches (0: the whole split). `m` and `acts` live in the backend the forward pass runs on;
// acts is planned for batch × seq tokens (and TokenBatch::max_sequences). `layout`: rows of whole documents
// (--pack documents) and sequences cut at each EOS (--doc-mask), as `zaya train` trains (data/loader.h). Fails, naming the data directory, when the split has no
// sequence of seq + 1 tokens (or, with loss masks, no learned target). A collective when comm has several ranks.
// `progress`, if given, hears (batches done, batches in all) after each batch.
EvalResult evaluate_loss(const Model &m, const std::shared_ptr<const DataSet> &data, int64_t batch, int64_t seq,
                         int64_t max_batches, Activations &acts, Communicator &comm, const RowLayout &layout,
                         bool per_position = false,
                         const std::function<void(int64_t, int64_t)> &progress = {});

} // namespace zaya
