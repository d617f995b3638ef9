// The legacy Megatron-export naming of ZAYA1-base / ZAYA1-8B-legacy (spec A.7.2): 2·L half-layers, attention
// in layers.{2k}, MoE in layers.{2k+1}, experts as separate matrices, residual scales shifted by one half-layer.
#pragma once
#include "model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// One stored tensor feeding (part of) a native parameter.
struct TensorSource {
    std::string stored_name;    // name in the checkpoint
    std::vector<int64_t> shape; // shape it must have there
    size_t offset = 0;          // where its elements go inside the native parameter (floats)
};

struct NativeSources {
    std::string native_name;
    std::vector<TensorSource> parts;
};

// For every native parameter of `c` (in ParamLayout order), where it comes from in a legacy checkpoint.
std::vector<NativeSources> legacy_sources(const ZayaConfig &c);

} // namespace zaya
