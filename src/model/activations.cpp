#include "model/activations.h"

#include "ops/backend.h"
#include "ops/cpu/cca.h"

namespace zaya {

namespace {
// Carves real arrays out of one buffer; the first pass only measures.
struct Carver {
    real *base = nullptr;
    size_t used = 0;
    real *take(int64_t n) {
        size_t at = (used + 15) / 16 * 16; // keep every array 64-byte aligned
        used = at + size_t(n);
        return base ? base + at : nullptr;
    }
};

void carve(const ZayaConfig &c, int64_t N, int64_t B, bool store_logits, Activations &a, Carver &f) {
    const int64_t D = c.hidden_size, C = c.conv_channels(), Dq = c.q_dim(), Dk = c.kv_dim();
    const int64_t R = c.router_hidden_size, K = c.router_classes(), I = c.moe_intermediate_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads;
    int64_t rot_half = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) rot_half = std::max(rot_half, c.rotary_dim(l) / 2);
    a.embed = f.take(N * D);
    a.final_norm = f.take(N * D);
    a.final_rstd = f.take(N);
    a.logits = store_logits ? f.take(N * c.vocab_size) : nullptr;
    a.losses = f.take(N);
    for (int t = 0; t < 2; ++t) {
        a.rope_cos[t] = f.take(N * rot_half);
        a.rope_sin[t] = f.take(N * rot_half);
    }
    cpu::ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    for (LayerActs &L : a.layers) {
        L.x_norm1 = f.take(N * D);
        L.rstd1 = f.take(N);
        L.z = f.take(N * C);
        L.p = f.take(cpu::cca_conv_p_rows(N, B, cs) * C);
        L.conv = f.take(N * C);
        L.q = f.take(N * Dq);
        L.k = f.take(N * Dk);
        L.qn = f.take(N * nq);
        L.kn = f.take(N * nkv);
        L.v = f.take(N * Dk);
        L.v_del = f.take(N * Dk / 2);
        L.att = f.take(N * Dq);
        L.lse = f.take(N * nq);
        L.attn_out = f.take(N * D);
        L.res1 = f.take(N * D);
        L.x_norm2 = f.take(N * D);
        L.rstd2 = f.take(N);
        L.rho = f.take(N * R);
        L.r_norm = f.take(N * R);
        L.r_rstd = f.take(N);
        L.h1 = f.take(N * R);
        L.a1 = f.take(N * R);
        L.h2 = f.take(N * R);
        L.a2 = f.take(N * R);
        L.r_logits = f.take(N * K);
        L.probs = f.take(N * K);
        L.p_sel = f.take(N);
        L.xg = f.take(N * D);
        L.h = f.take(N * 2 * I);
        L.a = f.take(N * I);
        L.y = f.take(N * D);
        L.moe_out = f.take(N * D);
        L.res2 = f.take(N * D);
    }
}
// The integer arrays and the bf16 copies (raw bits), carved in bytes out of the same kind of buffer (every array
// 64-byte aligned).
struct IntCarver {
    char *base = nullptr;
    size_t used = 0;
    template <class T> T *take(int64_t n) {
        size_t at = (used + 63) / 64 * 64;
        used = at + size_t(n) * sizeof(T);
        return base ? reinterpret_cast<T *>(base + at) : nullptr;
    }
};

void carve_ints(const ZayaConfig &c, int64_t N, int64_t B, bool bf16_copies, Activations &a, IntCarver &f) {
    a.tokens = f.take<int32_t>(N);
    a.positions = f.take<int32_t>(N);
    a.targets = f.take<int32_t>(N);
    a.seq_start = f.take<int64_t>(B + 1);
    for (LayerActs &L : a.layers) {
        L.choice = f.take<int32_t>(N);
        L.order = f.take<int32_t>(N);
        L.offsets = f.take<int64_t>(c.num_experts + 2);
        L.x_norm1_16 = bf16_copies ? f.take<uint16_t>(N * c.hidden_size) : nullptr;
        L.x_norm2_16 = bf16_copies ? f.take<uint16_t>(N * c.hidden_size) : nullptr;
        L.att16 = bf16_copies ? f.take<uint16_t>(N * c.q_dim()) : nullptr;
    }
}

size_t reals_for(size_t bytes) { return (bytes + sizeof(real) - 1) / sizeof(real); }
} // namespace

size_t Activations::bytes_needed(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers,
                                 bool store_logits, bool bf16_copies) {
    Activations a;
    a.layers.resize(keep_all_layers ? size_t(c.num_hidden_layers) : 1);
    Carver measure;
    carve(c, max_tokens, max_seqs, store_logits, a, measure);
    IntCarver measure_ints;
    carve_ints(c, max_tokens, max_seqs, bf16_copies, a, measure_ints);
    return (measure.used + reals_for(measure_ints.used)) * sizeof(real);
}

Activations Activations::plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers) {
    return plan(c, max_tokens, max_seqs, keep_all_layers, cpu_backend());
}

Activations Activations::plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers,
                              Backend &backend, bool bf16_copies) {
    Activations a;
    a.max_tokens = max_tokens;
    a.max_seqs = max_seqs;
    a.keep_all_layers = keep_all_layers;
    a.backend = &backend;
    a.layers.resize(keep_all_layers ? size_t(c.num_hidden_layers) : 1);
    // Training on a backend that computes the loss chunk by chunk never needs the [N,V] logits.
    const bool store_logits = !keep_all_layers || backend.lm_head_needs_logits();
    Carver measure;
    carve(c, max_tokens, max_seqs, store_logits, a, measure);
    a.fbuf = backend.alloc(measure.used);
    Carver carver{a.fbuf.data(), 0};
    carve(c, max_tokens, max_seqs, store_logits, a, carver);
    IntCarver measure_ints;
    carve_ints(c, max_tokens, max_seqs, bf16_copies, a, measure_ints);
    a.ibuf = backend.alloc(reals_for(measure_ints.used));
    IntCarver int_carver{a.ibuf.as<char>(), 0};
    carve_ints(c, max_tokens, max_seqs, bf16_copies, a, int_carver);
    return a;
}

} // namespace zaya
