#include "optim/param_groups.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

namespace {

bool ends_with(const std::string &s, const std::string &suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_embedding_or_head(const std::string &name) {
    return name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

bool is_expert_stack(const std::string &name) {
    return ends_with(name, ".mlp.experts.gate_up_proj") || ends_with(name, ".mlp.experts.down_proj");
}

// Renumbers state offsets compactly in list order.
void assign_state_offsets(ParamGroups &g) {
    g.muon_state_size = 0;
    for (MuonMatrix &m : g.muon) {
        m.state_offset = g.muon_state_size;
        g.muon_state_size += m.numel();
    }
    g.adamw_state_size = 0;
    for (AdamWRange &r : g.adamw) {
        r.state_offset = g.adamw_state_size;
        g.adamw_state_size += r.numel;
    }
}

} // namespace

ParamGroups ParamGroups::classify(const ParamLayout &layout, const ZayaConfig &config) {
    ParamGroups g;
    for (const ParamView &v : layout.views) {
        if (!v.trainable || v.numel == 0) continue;
        if (v.shape.size() == 2 && !is_embedding_or_head(v.name)) {
            g.muon.push_back({v.name, -1, v.offset, v.shape[0], v.shape[1], 0});
        } else if (v.shape.size() == 3 && is_expert_stack(v.name)) {
            if (v.shape[0] != config.num_experts)
                fail("param groups: '{}' has {} experts, config says {}", v.name, v.shape[0], config.num_experts);
            const size_t per = size_t(v.shape[1]) * size_t(v.shape[2]);
            for (int64_t e = 0; e < v.shape[0]; ++e)
                g.muon.push_back({v.name, e, v.offset + size_t(e) * per, v.shape[1], v.shape[2], 0});
        } else {
            const bool decay = v.shape.size() == 2 && is_embedding_or_head(v.name);
            g.adamw.push_back({v.name, v.offset, v.numel, decay, 0});
        }
    }
    assign_state_offsets(g);
    return g;
}

ParamGroups ParamGroups::slice(size_t begin, size_t end) const {
    ParamGroups g;
    for (const MuonMatrix &m : muon)
        if (m.offset >= begin && m.offset < end) g.muon.push_back(m);
    for (const AdamWRange &r : adamw) {
        const size_t a = std::max(begin, r.offset), b = std::min(end, r.offset + r.numel);
        if (a >= b) continue;
        AdamWRange part = r;
        part.offset = a;
        part.numel = b - a;
        g.adamw.push_back(part);
    }
    assign_state_offsets(g);
    return g;
}

size_t ParamGroups::max_muon_numel() const {
    size_t n = 0;
    for (const MuonMatrix &m : muon) n = std::max(n, m.numel());
    return n;
}

int64_t ParamGroups::max_muon_min_dim() const {
    int64_t k = 0;
    for (const MuonMatrix &m : muon) k = std::max(k, std::min(m.rows, m.cols));
    return k;
}

std::vector<std::pair<size_t, int64_t>> ParamGroups::muon_runs() const {
    std::vector<std::pair<size_t, int64_t>> runs;
    for (size_t i = 0; i < muon.size(); ++i) {
        const MuonMatrix &m = muon[i];
        if (!runs.empty()) {
            auto &[first, count] = runs.back();
            const MuonMatrix &last = muon[first + size_t(count) - 1];
            if (m.name == last.name && m.rows == last.rows && m.cols == last.cols &&
                m.offset == last.offset + last.numel() && m.state_offset == last.state_offset + last.numel()) {
                ++count;
                continue;
            }
        }
        runs.emplace_back(i, 1);
    }
    return runs;
}

} // namespace zaya
