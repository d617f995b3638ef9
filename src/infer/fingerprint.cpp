#include "infer/fingerprint.h"

#include "core/version.h"
#include "infer/decoder.h"
#include "infer/engine.h"
#include "io/config_json.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

namespace zaya {

namespace {

// The dtype and size of a matrix and a hash of its first MiB: enough to tell checkpoints apart without reading
// gigabytes of weights at startup (a mapped checkpoint pages in only that).
std::string matrix_summary(const Mat &m) {
    const size_t bytes = size_t(m.rows) * size_t(m.cols) * dtype_size(m.dtype);
    return fmt::format("{} {}x{} {:016x}", dtype_name(m.dtype), m.rows, m.cols,
                       XXH64(m.data, std::min<size_t>(bytes, size_t(1) << 20), 0));
}

} // namespace

std::string system_fingerprint(const Engine &engine) {
    const InferModel &m = engine.model();
    // Without batch invariance the rows' paths also follow how steps are filled: the prompt steps, the batch, drafts.
    std::string steps = "batch-invariant";
    if (!engine.batch_invariant())
        steps = fmt::format("batched {} {} {} {}", engine.prefill_chunk(), engine.sole_prefill_chunk(),
                            engine.max_batch(), engine.lookup().tokens);
    const std::string described =
        fmt::format("zaya {} {}|{}|{}|{}|{}|{}|{}|{}|{}", kVersion, batch_invariant_supported() ? "avx512" : "avx2",
                    config_to_json(m.config).dump(), m.matrix_bytes(), matrix_summary(m.embed),
                    matrix_summary(m.lm_head), engine.device(), engine.matmul_inputs(), dtype_name(engine.kv_dtype()),
                    steps);
    return fmt::format("fp_{:012x}", XXH64(described.data(), described.size(), 0) >> 16);
}

} // namespace zaya
