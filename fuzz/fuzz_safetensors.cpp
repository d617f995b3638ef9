// libFuzzer target: safetensors_parse must reject any malformed image with zaya::Error, never crash or
// read out of bounds. Any other exception escaping is a bug and aborts the run.
#include "core/error.h"
#include "io/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Copy into an exact-size heap buffer so ASan catches any read past the end.
    std::vector<uint8_t> buf(data, data + size);
    try {
        zaya::SafetensorsHeader h = zaya::safetensors_parse(buf.data(), buf.size(), "fuzz");
        // Touch every byte the parser vouched for, and read each tensor back.
        for (const auto &t : h.tensors) {
            std::vector<float> out(size_t(t.numel()));
            zaya::tensor_read_f32(t, out.data());
        }
    } catch (const zaya::Error &) {
    }
    return 0;
}
