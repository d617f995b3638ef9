#include "infer/weights.h"

#include "core/error.h"
#include "core/rng.h"
#include "io/config_json.h"
#include "io/model_io.h"
#include "model/init.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/linear_bf16.h"
#include "ops/cpu/linear_f32.h"
#include "ops/cpu/linear_i8.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <set>

namespace zaya {

namespace fs = std::filesystem;

Mat Mat::row_block(int64_t r0, int64_t n) const {
    ZAYA_ASSERT(r0 >= 0 && r0 + n <= rows);
    return {static_cast<const uint8_t *>(data) + size_t(r0 * cols) * dtype_size(dtype), dtype, n, cols,
            scales ? scales + r0 * cpu::i8_groups(cols) : nullptr};
}

void mat_linear(float *y, int64_t ldy, const float *x, const Mat &W, const float *b, int64_t N,
                cpu::MatmulPrecision rows, bool batch_invariant) {
    if (W.dtype == DType::I8) {
        cpu::linear_i8(y, ldy, x, static_cast<const int8_t *>(W.data), W.scales, b, N, W.cols, W.rows,
                       batch_invariant);
        return;
    }
    if (W.dtype == DType::BF16) {
        cpu::linear_bf16(y, ldy, x, static_cast<const uint16_t *>(W.data), b, N, W.cols, W.rows, rows,
                         batch_invariant);
        return;
    }
    ZAYA_ASSERT(W.dtype == DType::F32);
    cpu::linear_f32(y, ldy, x, static_cast<const float *>(W.data), b, N, W.cols, W.rows, rows, batch_invariant);
}

void mat_gather_rows(float *dst, const Mat &W, const int32_t *ids, int64_t N) {
    if (W.dtype == DType::I8) {
        cpu::gather_rows_i8(dst, static_cast<const int8_t *>(W.data), W.scales, ids, N, W.cols);
        return;
    }
    if (W.dtype == DType::BF16) {
        cpu::gather_rows_bf16(dst, static_cast<const uint16_t *>(W.data), ids, N, W.cols);
        return;
    }
    for (int64_t n = 0; n < N; ++n)
        std::memcpy(dst + n * W.cols, static_cast<const float *>(W.data) + int64_t(ids[n]) * W.cols,
                    size_t(W.cols) * sizeof(float));
}

bool is_matrix_param(const std::string &name) {
    static const char *const kSuffixes[] = {
        "q_proj.weight",   "k_proj.weight",     "v_proj_current.weight", "v_proj_delayed.weight",
        "o_proj.weight",   "gate.down_proj.weight", "router_mlp.fc1.weight", "router_mlp.fc2.weight",
        "out_proj.weight", "experts.gate_up_proj",  "experts.down_proj"};
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return true;
    for (const char *s : kSuffixes)
        if (name.ends_with(s)) return true;
    return false;
}

namespace {

// ParamLayout with the matrices taking no space: what InferModel keeps in fp32.
ParamLayout small_layout(const ZayaConfig &c) {
    ParamLayout L = ParamLayout::build(c);
    size_t total = 0;
    for (ParamView &v : L.views) {
        if (is_matrix_param(v.name)) v.numel = 0;
        v.offset = total;
        total += (v.numel + 15) / 16 * 16;
    }
    L.total = total;
    return L;
}

// Binds every Mat of the model by name through `get(name, shape)`.
template <class Get> void bind_mats(InferModel &im, Get &&get) {
    const ZayaConfig &c = im.config;
    const int64_t D = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    im.embed = get("model.embed_tokens.weight");
    im.lm_head = c.tie_word_embeddings ? im.embed : get("lm_head.weight");
    im.layers.assign(size_t(c.num_hidden_layers), {});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        const std::string qkv = p + "self_attn.qkv_proj.", g = p + "mlp.gate.";
        LayerMats &M = im.layers[size_t(l)];
        M.q_proj = get(qkv + "q_proj.weight");
        M.k_proj = get(qkv + "k_proj.weight");
        M.v_cur = get(qkv + "v_proj_current.weight");
        M.v_del = get(qkv + "v_proj_delayed.weight");
        M.o_proj = get(p + "self_attn.o_proj.weight");
        M.router_down = get(g + "down_proj.weight");
        M.router_fc1 = get(g + "router_mlp.fc1.weight");
        M.router_fc2 = get(g + "router_mlp.fc2.weight");
        M.router_out = get(g + "router_mlp.out_proj.weight");
        Mat gu = get(p + "mlp.experts.gate_up_proj"), dn = get(p + "mlp.experts.down_proj");
        for (int64_t e = 0; e < E; ++e) {
            // A 3-D [E, rows, cols] tensor is E consecutive matrices.
            M.gate_up.push_back(Mat{gu.data, gu.dtype, E * 2 * I, D}.row_block(e * 2 * I, 2 * I));
            M.down.push_back(Mat{dn.data, dn.dtype, E * D, I}.row_block(e * D, D));
        }
    }
}

// Where each matrix lies in an owned buffer of the given dtype: offsets in bytes, 64-byte aligned.
std::map<std::string, size_t> owned_offsets(const ParamLayout &full, DType dtype, size_t &total) {
    std::map<std::string, size_t> at;
    total = 0;
    for (const ParamView &v : full.views) {
        if (!is_matrix_param(v.name)) continue;
        at[v.name] = total;
        total += (v.numel * dtype_size(dtype) + 63) / 64 * 64;
    }
    return at;
}

} // namespace

void InferModel::bind_small() {
    small_layout_ = small_layout(config);
    small_buf_ = RealBuffer::zeros(small_layout_.total);
    small = ModelWeights::bind(config, small_layout_, small_buf_.data());
}

std::unique_ptr<InferModel> InferModel::from_model(Model m, DType dtype) {
    if (dtype != DType::F32 && dtype != DType::BF16) fail("inference weights must be f32 or bf16");
    auto im = std::make_unique<InferModel>();
    im->config = m.config;
    im->weight_dtype = dtype;
    im->bind_small();
    for (const ParamView &v : im->small_layout_.views)
        if (v.numel) std::memcpy(im->small_buf_.data() + v.offset, m.param(v.name), v.numel * sizeof(float));
    const ParamLayout &full = m.layout;
    if (dtype == DType::F32) {
        im->model_ = std::move(m);
        const Model &own = *im->model_;
        bind_mats(*im, [&](const std::string &name) {
            const ParamView *v = own.layout.find(name);
            return Mat{own.params.data() + v->offset, DType::F32, v->shape[0], int64_t(v->numel) / v->shape[0]};
        });
        return im;
    }
    size_t total = 0;
    auto at = owned_offsets(full, dtype, total);
    im->owned_ = AlignedBytes(total);
    for (const auto &[name, off] : at) {
        const ParamView *v = full.find(name);
        convert_from_f32(dtype, m.param(name), im->owned_.data() + off, v->numel);
    }
    bind_mats(*im, [&](const std::string &name) {
        const ParamView *v = full.find(name);
        return Mat{im->owned_.data() + at.at(name), dtype, v->shape[0], int64_t(v->numel) / v->shape[0]};
    });
    return im;
}

std::unique_ptr<InferModel> InferModel::random(const ZayaConfig &c, DType dtype, uint64_t seed) {
    if (dtype != DType::F32 && dtype != DType::BF16) fail("inference weights must be f32 or bf16");
    auto im = std::make_unique<InferModel>();
    im->config = c;
    im->weight_dtype = dtype;
    im->bind_small();
    const ParamLayout full = ParamLayout::build(c);
    for (size_t i = 0; i < full.views.size(); ++i) {
        const ParamView &v = full.views[i];
        if (is_matrix_param(v.name)) continue;
        float *p = im->small_buf_.data() + im->small_layout_.views[i].offset;
        init_param(c, full, i, p, seed);
        // What a bf16 checkpoint can hold, so that save() writes exactly this model (balancing biases stay fp32).
        if (dtype == DType::BF16 && v.trainable)
            for (size_t k = 0; k < v.numel; ++k) p[k] = bf16_to_f32(f32_to_bf16(p[k]));
    }
    size_t total = 0;
    auto at = owned_offsets(full, dtype, total);
    im->owned_ = AlignedBytes(total);
    // Uniform(±√3·σ) has the init's standard deviation σ; a counter-based hash fills gigabytes in parallel.
    const double half_width = std::sqrt(3.0) * c.initializer_range;
    uint64_t stream = 0;
    for (const auto &[name, off] : at) {
        const ParamView *v = full.find(name);
        const uint64_t key = seed * 0x9E3779B97F4A7C15ull + (++stream << 40);
        uint8_t *dst = im->owned_.data() + off;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < int64_t(v->numel); ++k) {
            uint64_t state = key + uint64_t(k);
            const float x = float((double(splitmix64(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0) * half_width);
            if (dtype == DType::BF16) reinterpret_cast<uint16_t *>(dst)[k] = f32_to_bf16(x);
            else reinterpret_cast<float *>(dst)[k] = x;
        }
    }
    bind_mats(*im, [&](const std::string &name) {
        const ParamView *v = full.find(name);
        return Mat{im->owned_.data() + at.at(name), dtype, v->shape[0], int64_t(v->numel) / v->shape[0]};
    });
    return im;
}

std::unique_ptr<InferModel> InferModel::load(const std::string &dir) {
    if (!fs::is_directory(dir)) fail("model directory '{}' does not exist or is not a directory", dir);
    const std::string config_path = (fs::path(dir) / "config.json").string();
    if (!fs::exists(config_path)) fail("model directory '{}' has no config.json", dir);
    auto im = std::make_unique<InferModel>();
    im->config = config_load(config_path);
    im->eos_token_ids = zaya::eos_token_ids(dir);
    im->bind_small();
    im->files_ = std::make_unique<SafetensorSet>(SafetensorSet::open(dir));
    const SafetensorSet &set = *im->files_;
    const ParamLayout full = ParamLayout::build(im->config);

    std::set<std::string> used;
    std::map<std::string, std::vector<const TensorInfo *>> matrix_parts; // native name → its stored tensor(s)
    for (const NativeSources &ns : checkpoint_sources(im->config)) {
        const ParamView *small_view = im->small_layout_.find(ns.native_name);
        for (const TensorSource &part : ns.parts) {
            const TensorInfo &t = checkpoint_part(set, part, dir);
            used.insert(part.stored_name);
            if (is_matrix_param(ns.native_name)) {
                if (t.dtype == DType::F16)
                    fail("{}: tensor '{}' is F16; zaya runs matrices in bf16 or f32 (convert the checkpoint, e.g. "
                         "with `zaya export`)",
                         t.file, t.name);
                matrix_parts[ns.native_name].push_back(&t);
                continue;
            }
            float *dst = im->small_buf_.data() + small_view->offset + part.offset;
            tensor_read_f32(t, dst);
            for (int64_t i = 0; i < t.numel(); ++i)
                if (!std::isfinite(dst[i]))
                    fail("{}: tensor '{}' holds a non-finite value at element {}", t.file, t.name, i);
        }
    }
    if (im->config.tie_word_embeddings && set.find("lm_head.weight")) {
        const TensorInfo &e = *matrix_parts.at("model.embed_tokens.weight")[0];
        const TensorInfo &h = checkpoint_part(set, {"lm_head.weight", e.shape, 0}, dir);
        if (h.dtype != e.dtype || std::memcmp(h.data, e.data, e.nbytes) != 0)
            fail("{}: 'lm_head.weight' differs from 'model.embed_tokens.weight' but config has tie_word_embeddings "
                 "= true",
                 h.file);
        used.insert("lm_head.weight");
    }
    check_no_unexpected_tensors(set, used, dir);

    DType dtype = matrix_parts.begin()->second[0]->dtype;
    for (const auto &[name, parts] : matrix_parts)
        for (const TensorInfo *t : parts)
            if (t->dtype != dtype)
                fail("{}: tensor '{}' is {} but other matrices are {}; zaya needs one dtype for all matrices", t->file,
                     t->name, dtype_name(t->dtype), dtype_name(dtype));
    im->weight_dtype = dtype;
    const int64_t E = im->config.num_experts;
    bind_mats(*im, [&](const std::string &name) {
        const ParamView *v = full.find(name);
        const auto &parts = matrix_parts.at(name);
        const int64_t rows = v->shape[0], cols = int64_t(v->numel) / rows;
        return Mat{parts[0]->data, dtype, rows, cols};
    });
    // Legacy checkpoints store each expert as its own tensor: point the per-expert Mats at them.
    if (im->config.legacy_layout)
        for (int64_t l = 0; l < im->config.num_hidden_layers; ++l) {
            const std::string p = fmt::format("model.layers.{}.mlp.experts.", l);
            LayerMats &M = im->layers[size_t(l)];
            for (int64_t e = 0; e < E; ++e) {
                M.gate_up[size_t(e)].data = matrix_parts.at(p + "gate_up_proj")[size_t(e)]->data;
                M.down[size_t(e)].data = matrix_parts.at(p + "down_proj")[size_t(e)]->data;
            }
        }
    return im;
}

template <class Self> auto InferModel::matrix_fields(Self &m) {
    std::vector<decltype(&m.embed)> all = {&m.embed};
    if (!m.config.tie_word_embeddings) all.push_back(&m.lm_head);
    for (auto &M : m.layers) {
        for (auto *d : M.dense()) all.push_back(d);
        for (auto &e : M.gate_up) all.push_back(&e);
        for (auto &e : M.down) all.push_back(&e);
    }
    return all;
}

std::vector<Mat> InferModel::all_matrices() const {
    std::vector<Mat> all;
    for (const Mat *m : matrix_fields(*this)) all.push_back(*m);
    return all;
}

void InferModel::quantize_i8() {
    if (weight_dtype == DType::I8) return;
    quantized_from_ = attention_dtype();
    const std::vector<Mat *> mats = matrix_fields(*this);
    // Each matrix's int8 values, then its scales, each 64-byte aligned.
    auto aligned = [](size_t n) { return (n + 63) / 64 * 64; };
    std::vector<size_t> at;
    size_t total = 0;
    for (const Mat *m : mats) {
        at.push_back(total);
        total += aligned(size_t(m->rows * m->cols)) + aligned(size_t(m->rows * cpu::i8_groups(m->cols)) * 4);
    }
    AlignedBytes q(total);
    for (size_t k = 0; k < mats.size(); ++k) {
        Mat &m = *mats[k];
        auto *values = reinterpret_cast<int8_t *>(q.data() + at[k]);
        auto *scales = reinterpret_cast<float *>(q.data() + at[k] + aligned(size_t(m.rows * m.cols)));
        if (m.dtype == DType::BF16)
            cpu::quantize_i8_from_bf16(values, scales, static_cast<const uint16_t *>(m.data), m.rows, m.cols);
        else
            cpu::quantize_i8(values, scales, static_cast<const float *>(m.data), m.rows, m.cols);
        m = Mat{values, DType::I8, m.rows, m.cols, scales};
    }
    if (config.tie_word_embeddings) lm_head = embed;
    weight_dtype = DType::I8;
    owned_ = std::move(q);
    model_.reset();
    files_.reset();
}

size_t InferModel::matrix_bytes() const {
    size_t total = 0;
    for (const Mat &m : all_matrices()) total += m.bytes();
    return total;
}

size_t InferModel::touch_all() const {
    const std::vector<Mat> all = all_matrices();
    size_t total = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : total)
    for (size_t k = 0; k < all.size(); ++k) {
        const auto *p = static_cast<const volatile uint8_t *>(all[k].data);
        for (size_t off = 0; off < all[k].bytes(); off += 4096) (void)p[off]; // a volatile read is never elided
        total += all[k].bytes();
    }
    return total;
}

std::vector<MemRegion> InferModel::per_token_regions() const {
    std::vector<MemRegion> out;
    auto add = [&](const Mat &m) { // an I8 matrix's values and scales lie apart
        const size_t values = size_t(m.rows * m.cols) * dtype_size(m.dtype);
        out.push_back({m.data, values});
        if (m.scales) out.push_back({m.scales, m.bytes() - values});
    };
    add(lm_head);
    for (const LayerMats &M : layers) {
        for (const Mat *m : M.dense()) add(*m);
        if (!M.gate_up.empty()) {
            add(M.gate_up[0]);
            add(M.down[0]);
        }
    }
    return out;
}

size_t InferModel::bytes_per_token() const {
    size_t total = embed.row_bytes(); // one embedding row
    for (const MemRegion &r : per_token_regions()) total += r.bytes;
    return total;
}

} // namespace zaya
