#include "model/flops.h"

#include <algorithm>

namespace zaya {

double forward_flops(const ZayaConfig &c, const std::vector<int64_t> &seq_lens) {
    const double D = double(c.hidden_size), Dq = double(c.q_dim()), Dk = double(c.kv_dim());
    const double C = double(c.conv_channels()), hd = double(c.head_dim), R = double(c.router_hidden_size);
    const double K = double(c.router_classes()), I = double(c.moe_intermediate_size), V = double(c.vocab_size);
    double per_token_layer = 2 * D * (Dq + Dk + Dk) // q, k, v_current + v_delayed
                             + 2 * C * hd * double(c.cca_time1) // grouped conv
                             + 2 * Dq * D                        // o_proj
                             + 2 * (D * R + 2 * R * R + R * K)   // router
                             + 2 * (D * 2 * I + I * D);          // one SwiGLU expert
    double total = 0;
    for (int64_t T : seq_lens) {
        total += double(T) * (double(c.num_hidden_layers) * per_token_layer + 2 * D * V);
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
            // Visible keys summed over queries: T(T+1)/2 causal, capped by a sliding window.
            double visible = 0;
            int64_t w = c.layer_types[size_t(l)] == LayerType::HybridSliding ? *c.sliding_window : T;
            for (int64_t t = 0; t < T; ++t) visible += double(std::min<int64_t>(t + 1, w));
            total += 2 * 2 * Dq * visible; // QKᵀ and AV, every query head
        }
    }
    return total;
}

} // namespace zaya
