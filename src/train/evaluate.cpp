#include "train/evaluate.h"

#include "core/error.h"
#include "data/loader.h"
#include "model/chunk_exchange.h"
#include "model/forward.h"
#include "ops/backend.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace zaya {

EvalResult evaluate_loss(const Model &m, const std::shared_ptr<const DataSet> &data, int64_t batch, int64_t seq,
                         int64_t max_batches, Activations &acts, Communicator &comm, const RowLayout &layout,
                         bool per_position,
                         const std::function<void(int64_t, int64_t)> &progress) {
    // With context parallelism (acts.context) the ranks form groups that share each sequence, each rank its chunk:
    // the groups take the slices of every batch.
    const int chunks = acts.context ? acts.context->chunks() : 1;
    const int64_t ranks = comm.size() / chunks;
    const int32_t doc_eos = layout.cut_eos(*data);
    ValBatches val(data, batch * ranks, seq, comm.rank() / chunks, int(ranks), layout.packing);
    TokenBatch tb;
    double sums[2] = {0, 0}; // loss × tokens, tokens
    EvalResult r;
    const int64_t total = max_batches == 0 ? val.num_batches() : std::min(max_batches, val.num_batches());
    std::vector<double> at(per_position ? 2 * size_t(seq) : 0); // loss sums per position, then target counts
    std::vector<real> host_losses;
    while ((max_batches == 0 || r.batches < max_batches) && val.next(tb)) {
        ++r.batches;
        if (tb.sequences == 0) continue; // this rank's share of a short last batch
        if (!tb.any_inputs()) continue; // judged on whole rows: every rank of a group skips it alike
        if (acts.context) tb = tb.chunk(acts.context->chunk(), chunks, doc_eos); // parts of padding: no tokens
        Batch inputs = tb.inputs(doc_eos);
        std::vector<int32_t> targets = tb.targets(doc_eos);
        ForwardResult f = model_forward(m, inputs, acts, targets.data());
        sums[0] += f.loss * double(f.loss_tokens);
        sums[1] += double(f.loss_tokens);
        if (per_position) {
            const real *losses = acts.losses; // one per input token (0 for a target not learned)
            if (!acts.backend->host_memory()) {
                host_losses.resize(size_t(inputs.num_tokens()));
                acts.backend->download(host_losses.data(), acts.losses, host_losses.size() * sizeof(real));
                losses = host_losses.data();
            }
            // By the position the model gave the input: the row offset, or with doc_mask the offset in its document.
            for (int64_t n = 0; n < inputs.num_tokens(); ++n)
                if (targets[size_t(n)] >= 0) { // a masked target's loss is 0 and counts for nothing
                    const auto p = size_t(inputs.positions[size_t(n)]);
                    at[p] += double(losses[n]);
                    at[size_t(seq) + p] += 1;
                }
        }
        if (progress) progress(r.batches, total);
    }
    comm.allreduce_sum(sums, 2);
    if (val.num_chunks() == 0) fail("validation split of '{}' has no sequence of {} tokens", data->dir(), seq + 1);
    if (sums[1] == 0)
        fail("validation split of '{}': no learned target to score in {} batches (loss masks; with --pack documents, "
             "documents cut to --seq may lose their answers)", data->dir(), r.batches);
    r.loss = sums[0] / sums[1];
    r.tokens = int64_t(sums[1]);
    if (per_position) {
        comm.allreduce_sum(at.data(), at.size());
        for (int64_t p = 0; p < seq; ++p) {
            const double n = at[size_t(seq + p)];
            r.position_loss.push_back(n > 0 ? at[size_t(p)] / n : std::numeric_limits<double>::quiet_NaN());
            r.position_tokens.push_back(int64_t(n));
        }
    }
    return r;
}

} // namespace zaya
