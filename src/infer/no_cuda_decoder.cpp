// CudaDecoder of a build without the CUDA backend (CMakeLists.txt links this file only then; otherwise
// infer/cuda_decoder.cpp defines it): every way in fails, saying why.
#include "core/error.h"
#include "infer/cuda_decoder.h"

namespace zaya {

namespace {
[[noreturn]] void no_cuda() {
    fail("--device cuda: this zaya was built without the CUDA backend (configure with nvcc installed, or "
         "-DZAYA_CUDA=ON)");
}
} // namespace

struct CudaDecoder::Impl {};

CudaDecoder::CudaDecoder(const InferModel &, const Options &) { no_cuda(); }
CudaDecoder::CudaDecoder(const DecodeWeights &, const Options &) { no_cuda(); }
CudaDecoder::~CudaDecoder() = default;
void CudaDecoder::reset() { no_cuda(); }
void CudaDecoder::prefill(std::span<const int32_t>, float *) { no_cuda(); }
void CudaDecoder::step(int32_t, float *) { no_cuda(); }
int32_t CudaDecoder::prefill_greedy(std::span<const int32_t>) { no_cuda(); }
int32_t CudaDecoder::step_greedy(int32_t) { no_cuda(); }
int64_t CudaDecoder::length() const { no_cuda(); }
void CudaDecoder::reset(int64_t) { no_cuda(); }
void CudaDecoder::prefill(int64_t, std::span<const int32_t>, float *) { no_cuda(); }
int32_t CudaDecoder::prefill_greedy(int64_t, std::span<const int32_t>) { no_cuda(); }
void CudaDecoder::prefill_rows(int64_t, std::span<const int32_t>, float *) { no_cuda(); }
void CudaDecoder::prefill(std::span<const int64_t>, std::span<const std::span<const int32_t>>, float *, int32_t *) {
    no_cuda();
}
void CudaDecoder::step(std::span<const int32_t>, float *, int32_t *) { no_cuda(); }
int64_t CudaDecoder::length(int64_t) const { no_cuda(); }
int64_t CudaDecoder::max_seqs() const { no_cuda(); }
int64_t CudaDecoder::passes() const { no_cuda(); }
size_t CudaDecoder::weight_bytes() const { no_cuda(); }
DType CudaDecoder::kv_dtype() const { no_cuda(); }
size_t CudaDecoder::step_kernels() const { no_cuda(); }
void CudaDecoder::set_dependent_launch(bool) { no_cuda(); }
bool CudaDecoder::dependent_launch() const { no_cuda(); }
double CudaDecoder::measure_read_bandwidth(size_t, int) { no_cuda(); }
std::string CudaDecoder::device_description() { no_cuda(); }

} // namespace zaya
