// Kernels of cached decoding on the GPU (infer/cuda_decoder.h): few rows per call, so the linear layers are
// matrix-vector products bound by reading the weights once (GEMV-like, bf16 or fp32 weights, fp32 accumulation),
// and everything that changes from step to step (the cache length, hence positions) is read from device memory,
// so a decode step issues no host synchronisation and can be replayed as a CUDA graph. Device pointers throughout.
#pragma once
#include "ops/cpu/attention.h" // AttnShape

#include <cstdint>

namespace zaya::cuda {

using cpu::AttnShape;

// Rows of x handled per pass of a linear: each pass reads W once, so more rows per pass amortise the weights.
inline constexpr int64_t kDecodeRowsPerPass = 8;

// What a linear applies to its outputs before writing them: nothing, or the exact (erf) GELU — the router MLP's
// activation, fused so that it costs no kernel of its own.
enum class Epilogue { None, Gelu };

// Where a linear's outputs o ≥ from go instead of y: y2[n·ld + o − from] — two projections of the same x stacked
// into one matrix (the q‖k rows into the conv's buffer, the value rows elsewhere) run as one kernel.
struct SecondOutput {
    int64_t from = INT64_MAX;
    float *y = nullptr;
    int64_t ld = 0;
};

// Some decode kernels end with a short step that needs every block's part (a row's norm needs all its outputs; a
// query's softmax, all its key splits): the last of the blocks to finish does it (ops/cuda/last_block.cuh), so the
// step costs no kernel of its own. They count arrivals in `counters`: device memory zeroed once when allocated
// (every launch leaves its counters zero again), so one array serves each such call of a step in turn; each call
// says how many it uses.

// What a linear does once every output of a row is written: the residual scaling of those outputs y into the
// residual stream and the RMSNorm of the result, as residual_rmsnorm_forward(stream, normed, rstd, y, stream, …)
// (y's row stride must equal its width O, the stream's). Done by the last of the row's blocks; `stream` null: nothing.
struct ResidualNormAfter {
    float *stream = nullptr; // [N, O], in place: (y + hs_bias) ⊙ hs_scale + (stream + res_bias) ⊙ res_scale
    float *normed = nullptr; // [N, O] = w ⊙ stream · rstd
    float *rstd = nullptr;   // [N]
    const float *hs_scale = nullptr, *hs_bias = nullptr, *res_scale = nullptr, *res_bias = nullptr, *w = nullptr;
    float eps = 0.0f;
    unsigned *counters = nullptr; // a linear: 1; the routed form: N
};

// y[N, O] (row stride ldy) = act(x[N, I] · W[O, I]ᵀ + b[O]) (b may be null), in passes of ≤ kDecodeRowsPerPass
// rows; W bf16 (raw uint16 bits, widened exactly; x's values rounded to bf16 as they are staged, so the products
// are bf16 × bf16 summed in fp32, as a bf16 GEMM's) or fp32 (x as it is). A warp per output, 16-byte loads of W,
// x in shared memory. y must not overlap x (other blocks still read x while one writes y). row_active[N] (device;
// null: every row): rows with 0 get zeros and cost no arithmetic — a decode step's slots not stepped. second:
// outputs from `second.from` on go there. after: the residual scaling and norm that follow, on every row.
void linear_rows_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, Epilogue act = Epilogue::None, const int32_t *row_active = nullptr,
                      const SecondOutput &second = {}, const ResidualNormAfter &after = {});
void linear_rows_f32(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                     int64_t O, Epilogue act = Epilogue::None, const int32_t *row_active = nullptr,
                     const SecondOutput &second = {}, const ResidualNormAfter &after = {});

// The routed form: row n uses expert choice[n] (device int32, ∈ [0, E]) of stacked weights W[E, O, I]; the skip
// slot (choice == E) gives skip_x[n, :] (row stride ld_skip; null: zeros). Every row is then scaled by p_sel[n]
// when p_sel is given (the MoE combine, moe_out = p_sel · y). swiglu_input: x is [N, 2I], each row gate ‖ up, and
// the row multiplied is silu(gate) ⊙ up, computed as it is staged (the SwiGLU fused into the down projection).
struct ExpertRows {
    const int32_t *choice = nullptr;
    const float *p_sel = nullptr;
    const float *skip_x = nullptr;
    int64_t ld_skip = 0;
    int64_t E = 0;
    bool swiglu_input = false;
};
void expert_linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const ExpertRows &r, int64_t N,
                        int64_t I, int64_t O, const ResidualNormAfter &after = {});
void expert_linear_f32(float *y, int64_t ldy, const float *x, const float *W, const ExpertRows &r, int64_t N, int64_t I,
                       int64_t O, const ResidualNormAfter &after = {});

// The router after its down projection, for n decode rows, in one kernel (a block per row; at decode the router's
// R×R matrices are small, and six launches per layer would cost more than reading them): rho[n,R] (=) the EDA
// state h1 + state_scale ⊙ rho_prev (state_scale or rho_prev null: rho = h1, the first layer), then RMSNorm
// (norm_w), fc1 → GELU → fc2 → GELU → out (no bias) → softmax, the biased top-1: probs[n,K], choice[n], p_sel[n].
// Matrices bf16 (T = uint16_t, raw bits; their inputs rounded to bf16) or fp32, row-major [out, in].
//                                                                                      (Decoder's router, spec A.4)
template <class T> struct RouterDecode {
    float *rho, *probs;
    int32_t *choice;
    float *p_sel;
    const float *h1, *state_scale, *rho_prev, *norm_w;
    const T *fc1;
    const float *fc1_b;
    const T *fc2;
    const float *fc2_b;
    const T *out;
    const float *bias; // the balancing biases [K]
    int64_t R, K;
    float eps;
    const int32_t *active = nullptr; // rows with active[i] == 0 take the skip slot (K − 1; p_sel 0): no expert read
};
template <class T> void router_decode(const RouterDecode<T> &a, int64_t n);
// The router's down projection h1[n, R] = x[n, I] · W[R, I]ᵀ + b (row_active as linear_rows) and then, in the last
// of its blocks, router_decode on those rows (a.h1 is the h1 written here): one kernel per ≤ kDecodeRowsPerPass
// rows instead of two. W and the router's matrices share the type T. counters: 1.
template <class T>
void router_down_decode(float *h1, const float *x, const T *W, const float *b, int64_t n, int64_t I,
                        const int32_t *row_active, const RouterDecode<T> &a, unsigned *counters);

// out[N,D] = (table[tokens[n]] + bias) ⊙ scale with a bf16 or fp32 table        (cpu embedding with the input scale)
void embed_rows_bf16(float *out, const int32_t *tokens, const uint16_t *table, const float *bias, const float *scale,
                     int64_t N, int64_t D);
void embed_rows_f32(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                    int64_t N, int64_t D);

// Several sequences at once ("slots", CudaDecoder's): a decode step's row s is slot s's one new token. Slots with
// active[s] == 0 are computed like the others but change no state (cache, lengths, conv and value state); an
// active pointer of null means every slot.

// pos[s·n + j] = lengths[s] + first + j for s < slots, j < n: positions of the new tokens (first = 0), or of the
// rows before them too.
void decode_positions(int32_t *pos, const int32_t *lengths, int64_t n, int64_t first = 0, int64_t slots = 1);
// lengths[s] += n for the active s < slots (after the step's last layer).
void advance_length(int32_t *lengths, int64_t n, int64_t slots = 1, const int32_t *active = nullptr);
// The KV cache's element type T, for each function below that takes a cache: float, or uint16_t for bf16 (a bf16
// model's cache: half the bytes to hold and to read at long context). A bf16 cache keeps each key and value rounded
// to nearest even as it is appended; attention reads a newest key or value that is not yet in the cache rounded the
// same way, so every query sees the cache's values, and scores the queries rounded to bf16 too (as the CPU's
// attention over a bf16 cache does, ops/cpu/attention.h, and a bf16 model's attention would).
//
// kc[*length + i, :] = k[i, :] and vc[*length + i, :] = v[i, :] for i < n: k, v [n, width]; kc, vc [max_len, width].
// With v_state [Dv]: the last Dv columns of v hold each row's own delayed value projection (spec A.3 step 4), and
// the cache gets them one row later — row 0 the state's, row i row i−1's — while row n−1's becomes the state. (One
// thread per delayed column walks the rows, so the state is read before it is replaced; the state stays fp32.)
template <class T>
void append_kv(T *kc, T *vc, const float *k, const float *v, const int32_t *length, int64_t n, int64_t width,
               float *v_state = nullptr, int64_t Dv = 0);
// A decode step's conv-state move, which the step's KV append does too: in each active slot's region of buf (slot
// s's rows start at s·slot_rows; rows of `cols` floats) rows 1 … keep move up one row, so the state is the last
// `keep` rows of [state ; new row].
struct ConvStateMove {
    float *buf = nullptr;
    int64_t keep = 0, cols = 0, slot_rows = 0;
};
// The same append for one new token per slot, done by attention_decode_slots: active slot s appends k[s·ldk, :]
// and v[s, :] at row lengths[s] of its cache (kc, vc + s·max_len·width), the last Dv columns of v delayed through
// v_state[s, Dv] as in append_kv; and `move`, if given.
template <class T> struct KvAppendT {
    T *kc = nullptr, *vc = nullptr;     // the caches [slots, max_len, width]
    const float *k = nullptr;           // [slots, ldk]
    int64_t ldk = 0;
    const float *v = nullptr; // [slots, width]
    float *v_state = nullptr; // [slots, Dv]
    int64_t Dv = 0;
    ConvStateMove move;
};
using KvAppend = KvAppendT<float>;
// buf[r, :] = buf[r + shift, :] for r < keep (rows of `cols` floats), in place: the conv state after a prefill pass
// is the last `keep` rows of [state ; new rows].
void shift_rows_up(float *buf, int64_t keep, int64_t shift, int64_t cols);

// Cached attention of n new queries at positions *length … *length+n−1 (their keys already appended), over the
// cache k, v [·, nkv·hd]: causal, GQA, sliding window as cpu::attention_cached. out[n, nq, hd].
// Split over the key axis (flash-decoding): each query's visible keys are cut into `splits` pieces of equal size,
// each block takes one piece of one (query, head) in tiles of kAttnMaxChunk keys with an online softmax and leaves
// a partial result — part_o [splits, n, nq, hd], part_ml [splits, n, nq, 2] — that the last of the query's blocks
// to finish combines (counters: n·nq). The grid is splits × nq × n whatever the cache's capacity or the sequence's
// length, so a CUDA graph captured once serves every step, and one head at long context still fills the GPU.
inline constexpr int64_t kAttnMaxChunk = 128;
inline constexpr int64_t kAttnMaxSplits = 1024;
template <class T>
void attention_decode(float *out, float *part_o, float *part_ml, const float *q, const T *k, const T *v,
                      const int32_t *length, int64_t n, const AttnShape &s, int64_t splits, unsigned *counters);
// One query per slot: row s is slot s's new token at position lengths[s], q rows ldq apart, over slot s's cache
// (append.kc, append.vc + s·max_len·nkv·hd) and its new key and value, which are read from append's rows and then
// appended (KvAppend) by the last of the slot's blocks to finish; inactive rows give zeros and read and append
// nothing. One kernel for what were two (the append, then attention). counters: slots·(nq + 1).
template <class T>
void attention_decode_slots(float *out, float *part_o, float *part_ml, const float *q, int64_t ldq,
                            const int32_t *lengths, const int32_t *active, int64_t slots, int64_t max_len,
                            const AttnShape &s, int64_t splits, unsigned *counters, const KvAppendT<T> &append);

// out[r] = the index of the largest of x[r, 0:n) for r < rows (lowest index on ties; NaN never wins; 0 if nothing
// does): the greedy token, so a greedy decode step downloads 4 bytes per row instead of V logits. One kernel, each
// element read once: kArgmaxPartials blocks per row leave (value, index) pairs in part_v, part_i
// [rows, kArgmaxPartials], and the last of a row's blocks to finish combines them (counters: rows). Deterministic:
// the pairs combine in a fixed order with the tie rule, whatever order blocks run in.
inline constexpr int kArgmaxPartials = 64;
void argmax(int32_t *out, float *part_v, int32_t *part_i, const float *x, int64_t n, int64_t rows,
            unsigned *counters);

// Reads `bytes` (a multiple of 16) of p once and returns the seconds it took (synchronises): the read bandwidth
// the decode bound divides by.
double time_device_read(const void *p, int64_t bytes);

} // namespace zaya::cuda
