#include "train/evaluate_choices.h"

#include "core/error.h"
#include "core/utf8.h"
#include "model/forward.h"
#include "ops/backend.h"

#include <algorithm>
#include <cmath>

namespace zaya {

ChoiceSequence choice_sequence(const Tokenizer &tok, int32_t bos, const std::string &context,
                               const std::string &continuation) {
    const size_t kept = context.find_last_not_of(' ') + 1; // npos + 1 = 0: all spaces
    const std::string ctx = context.substr(0, kept), cont = context.substr(kept) + continuation;
    const std::vector<int32_t> whole = tok.encode(ctx + cont), own = tok.encode(ctx);
    ChoiceSequence s;
    if (bos >= 0) s.tokens.push_back(bos);
    s.tokens.insert(s.tokens.end(), whole.begin(), whole.end());
    s.continuation = int64_t(whole.size()) - int64_t(std::min(own.size(), whole.size()));
    if (s.continuation == 0) // the context's encoding swallowed the continuation: score its last token at least
        s.continuation = 1;
    return s;
}

ChoiceEvalResult evaluate_choices(const Model &m, const Tokenizer &tok, const std::vector<ChoiceItem> &items,
                                  Activations &acts, int64_t max_tokens, int64_t max_seqs, int64_t max_len,
                                  Communicator &comm, const std::function<void(int64_t, int64_t)> &progress) {
    if (max_len < 2 || max_len > max_tokens) fail("choices: max_len must be in [2, {}], got {}", max_tokens, max_len);
    const int32_t bos = int32_t(m.config.bos_token_id);
    const auto ranks = size_t(comm.size()), rank = size_t(comm.rank());
    ChoiceEvalResult r;
    std::vector<size_t> mine;
    for (size_t i = rank; i < items.size(); i += ranks) mine.push_back(i);
    r.loglik.resize(mine.size());
    // One pass: choices packed in order until the next does not fit.
    struct Scored {
        size_t item, choice; // into mine, into its choices
        ChoiceSequence seq;
    };
    std::vector<Scored> pass;
    std::vector<real> host_losses;
    double counts[3] = {0, 0, 0}; // tokens, truncated, choices
    int64_t pass_tokens = 0;
    auto run = [&] {
        std::vector<std::vector<int32_t>> inputs;
        for (const Scored &s : pass) inputs.emplace_back(s.seq.tokens.begin(), s.seq.tokens.end() - 1);
        const Batch batch = Batch::from_sequences(inputs);
        std::vector<int32_t> targets(size_t(batch.num_tokens()), -1); // only the continuations' tokens are scored
        for (size_t k = 0; k < pass.size(); ++k) {
            const int64_t end = batch.seq_start[k + 1], cont = pass[k].seq.continuation;
            for (int64_t t = end - cont; t < end; ++t)
                targets[size_t(t)] = pass[k].seq.tokens[size_t(t - batch.seq_start[k] + 1)];
        }
        model_forward(m, batch, acts, targets.data());
        const real *losses = acts.losses; // −log p of each scored target
        if (!acts.backend->host_memory()) {
            host_losses.resize(size_t(batch.num_tokens()));
            acts.backend->download(host_losses.data(), acts.losses, host_losses.size() * sizeof(real));
            losses = host_losses.data();
        }
        for (size_t k = 0; k < pass.size(); ++k) {
            double sum = 0;
            for (int64_t t = batch.seq_start[k + 1] - pass[k].seq.continuation; t < batch.seq_start[k + 1]; ++t)
                sum -= double(losses[t]);
            r.loglik[pass[k].item][pass[k].choice] = sum;
        }
        counts[0] += double(batch.num_tokens());
        pass.clear();
        pass_tokens = 0;
    };
    for (size_t i = 0; i < mine.size(); ++i) {
        const ChoiceItem &it = items[mine[i]];
        r.loglik[i].resize(it.choices.size());
        for (size_t c = 0; c < it.choices.size(); ++c) {
            ChoiceSequence s = choice_sequence(tok, bos, it.context, it.choices[c]);
            const int64_t inputs = int64_t(s.tokens.size()) - 1;
            if (s.continuation > max_len)
                fail("choices: item {} choice {} is {} tokens, more than the {} a sequence may hold", mine[i], c,
                     s.continuation, max_len);
            if (inputs > max_len) { // cut the context from the left, as the harness does
                s.tokens.erase(s.tokens.begin(), s.tokens.begin() + (inputs - max_len));
                counts[1] += 1;
            }
            const int64_t n = int64_t(s.tokens.size()) - 1;
            if (pass_tokens + n > max_tokens || int64_t(pass.size()) == max_seqs) run();
            pass.push_back({i, c, std::move(s)});
            pass_tokens += n;
            counts[2] += 1;
        }
        if (progress) progress(int64_t(i + 1), int64_t(mine.size()));
    }
    if (!pass.empty()) run();
    // Right answers: the highest log-likelihood (first on ties), and the highest per character.
    double right[3] = {0, 0, double(mine.size())};
    for (size_t i = 0; i < mine.size(); ++i) {
        const ChoiceItem &it = items[mine[i]];
        const std::vector<double> &ll = r.loglik[i];
        size_t best = 0, best_norm = 0;
        for (size_t c = 1; c < ll.size(); ++c) {
            if (ll[c] > ll[best]) best = c;
            // Per character, as the harness normalises (by Python's len).
            if (ll[c] / double(utf8_characters(it.choices[c])) >
                ll[best_norm] / double(utf8_characters(it.choices[best_norm])))
                best_norm = c;
        }
        r.pred.push_back(int64_t(best));
        r.pred_norm.push_back(int64_t(best_norm));
        right[0] += double(best == size_t(it.answer));
        right[1] += double(best_norm == size_t(it.answer));
    }
    comm.allreduce_sum(right, 3);
    comm.allreduce_sum(counts, 3);
    r.items = int64_t(right[2]);
    r.tokens = int64_t(counts[0]);
    r.truncated = int64_t(counts[1]);
    r.choices = int64_t(counts[2]);
    const double n = right[2];
    r.acc = right[0] / n;
    r.acc_norm = right[1] / n;
    auto stderr_of = [&](double p) { return n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : 0.0; };
    r.acc_stderr = stderr_of(r.acc);
    r.acc_norm_stderr = stderr_of(r.acc_norm);
    return r;
}

} // namespace zaya
