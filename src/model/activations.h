// Activation memory for one forward (and later backward) pass, planned from (config, tokens, sequences) up front
// and carved out of one buffer: no allocation inside the pass.
#pragma once
#include "model/config.h"
#include "model/params.h"

#include <cstdint>
#include <vector>

namespace zaya {

// What one decoder layer computes; shapes in rows × columns, N = tokens, B = sequences.
struct LayerActs {
    real *x_norm1;  // [N,D]   input_layernorm output
    real *rstd1;    // [N]
    real *z;        // [N,C]   q_pre‖k_pre (conv input)
    real *p;        // [N+B(k1−1), C] depthwise conv output
    real *conv;     // [N,C]   grouped conv output
    real *q, *k;    // [N,Dq], [N,Dk]  after q-k mean, then normalised + RoPE (in place)
    real *qn, *kn;  // [N,nq], [N,nkv] clamped L2 norms
    real *v;        // [N,Dk]  current ‖ delayed values
    real *v_del;    // [N,Dk/2] delayed projection of each token (shifted into v)
    real *att;      // [N,Dq]  attention output
    real *lse;      // [N,nq]
    real *attn_out; // [N,D]   o_proj output
    real *res1;     // [N,D]   residual after attention
    real *x_norm2;  // [N,D]   post_attention_layernorm output (MoE and router input)
    real *rstd2;    // [N]
    real *rho;      // [N,R]   router state after EDA (passed to the next layer)
    real *r_norm;   // [N,R]
    real *r_rstd;   // [N]
    real *h1, *a1;  // [N,R]   fc1 pre/post GELU
    real *h2, *a2;  // [N,R]   fc2 pre/post GELU
    real *r_logits; // [N,E+1]
    real *probs;    // [N,E+1]
    real *p_sel;    // [N]
    real *xg;       // [N,D]   MoE inputs grouped by expert
    real *h;        // [N,2I]  gate‖up (grouped order)
    real *a;        // [N,I]   SwiGLU (grouped order)
    real *y;        // [N,D]   expert outputs (grouped order, unscaled)
    real *moe_out;  // [N,D]
    real *res2;     // [N,D]   layer output (residual stream)
    int32_t *choice; // [N]
    int32_t *order;  // [N]
    int64_t *offsets;// [E+2]
    // bf16 copies of the matmul inputs (MatmulInput), written by the ops that produce them and read by the linears
    // forward and backward: planned for a device's bf16 matmuls only, else null.
    uint16_t *x_norm1_16; // [N,D]
    uint16_t *x_norm2_16; // [N,D]
    uint16_t *att16;      // [N,Dq]
};

class Backend;
class ChunkExchange;

struct Activations {
    int64_t max_tokens = 0, max_seqs = 0;
    bool keep_all_layers = false; // training keeps every layer; inference reuses one set
    Backend *backend = nullptr;   // whose memory every pointer below is in
    // Context parallelism (model/chunk_exchange.h, dist/context_parallel.h): the batches are this rank's chunks of
    // longer sequences, and the passes exchange what crosses the chunks through it. Null: whole sequences. Not owned.
    ChunkExchange *context = nullptr;
    RealBuffer fbuf;              // the real arrays
    RealBuffer ibuf;              // the integer arrays (int32 / int64 views of one allocation)
    real *embed;      // [N,D]
    real *final_norm; // [N,D]
    real *final_rstd; // [N]
    real *logits;     // [N,V]; null when the backend computes the loss without storing them (training on CUDA)
    real *losses;     // [N]
    real *rope_cos[2], *rope_sin[2]; // [N, rot/2] per layer type
    int32_t *tokens, *positions, *targets; // [N] the batch in the backend's memory (targets −1 = ignored)
    int64_t *seq_start;                    // [B+1]
    std::vector<LayerActs> layers;         // L entries (keep_all_layers) or 1

    // bf16_copies: plan the layers' bf16 copies of matmul inputs (a device training with bf16 matmuls, whose
    // linears would otherwise convert those inputs at every use).
    static Activations plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers,
                            Backend &backend, bool bf16_copies = false);
    static Activations plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers);
    // Bytes plan() would allocate, without allocating (for `zaya info`); store_logits as the backend would.
    static size_t bytes_needed(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, bool keep_all_layers,
                               bool store_logits = true, bool bf16_copies = false);
    LayerActs &layer(int64_t l) { return layers[keep_all_layers ? size_t(l) : 0]; }
    size_t bytes() const { return (fbuf.size + ibuf.size) * sizeof(real); }
};

} // namespace zaya
