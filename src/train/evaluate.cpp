#include "train/evaluate.h"

#include "core/error.h"
#include "data/loader.h"
#include "model/forward.h"

#include <algorithm>
#include <vector>

namespace zaya {

EvalResult evaluate_loss(const Model &m, const std::shared_ptr<const DataSet> &data, int64_t batch, int64_t seq,
                         int64_t max_batches, Activations &acts, Communicator &comm,
                         const std::function<void(int64_t, int64_t)> &progress) {
    const int64_t ranks = comm.size();
    ValBatches val(data, batch * ranks, seq, comm.rank(), int(ranks));
    TokenBatch tb;
    double sums[2] = {0, 0}; // loss × tokens, tokens
    EvalResult r;
    const int64_t total = max_batches == 0 ? val.num_batches() : std::min(max_batches, val.num_batches());
    while ((max_batches == 0 || r.batches < max_batches) && val.next(tb)) {
        ++r.batches;
        if (tb.sequences == 0) continue; // this rank's share of a short last batch
        Batch inputs = tb.inputs();
        std::vector<int32_t> targets = tb.targets();
        ForwardResult f = model_forward(m, inputs, acts, targets.data());
        sums[0] += f.loss * double(f.loss_tokens);
        sums[1] += double(f.loss_tokens);
        if (progress) progress(r.batches, total);
    }
    comm.allreduce_sum(sums, 2);
    if (sums[1] == 0) fail("validation split of '{}' has no sequence of {} tokens", data->dir(), seq + 1);
    r.loss = sums[0] / sums[1];
    r.tokens = int64_t(sums[1]);
    return r;
}

} // namespace zaya
