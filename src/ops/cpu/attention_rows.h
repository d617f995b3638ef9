// One work item of attention_cached's few-rows path (ops/cpu/attention.cpp): a query row's G heads of one kv head
// against the keys [t0, t1) of one key block, in registers. The generic loops score each (key, head) with a dot of
// its own (widening a bf16 key again for every head) and add each value row into the output in memory once per head:
// compute-bound at 4–10× the time the cache takes to read (a decoding row over 16k keys, ZAYA1-8B's heads).
#pragma once
#include <cstdint>
#include <vector>

namespace zaya::cpu {

// part[g·stride …]: the item's maximum, the sum of P, then Σ P·v [hd] for each head g < G, as the generic loops leave
// them — over an fp32 cache the natural softmax; over a bf16 cache the power-of-two one, P rounded (softmax_pow2.h),
// q [G, hd] the heads' queries already rounded to bf16. k and v rows ldk apart; alpha the scores' scale. False where
// it does not apply (a build without AVX-512, or for a bf16 cache without AVX512_BF16; G ≠ 4; hd not a multiple of
// 64), having done nothing: the generic loops run. scores: the thread's scratch.
bool attention_item(float *part, int64_t stride, const float *q, const float *k, const float *v, int64_t ldk,
                    int64_t t0, int64_t t1, int64_t G, int64_t hd, float alpha, std::vector<float> &scores);
bool attention_item(float *part, int64_t stride, const float *q, const uint16_t *k, const uint16_t *v, int64_t ldk,
                    int64_t t0, int64_t t1, int64_t G, int64_t hd, float alpha, std::vector<float> &scores);

} // namespace zaya::cpu
