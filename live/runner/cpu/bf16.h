// The kernels' one conversion between the dtypes they read and float32, in
// which they compute: bf16 is the upper half of a float32, narrowed rounding to
// nearest even as torch does.
#pragma once

#include <cstdint>
#include <cstring>

namespace {

inline float widen(float x) { return x; }

inline float widen(uint16_t bf16) {
    const uint32_t bits = uint32_t(bf16) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

inline uint32_t rounded_bits(float x) {  // bf16's bits in the upper half
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
}

inline void store(float x, float* out) { *out = x; }

inline void store(float x, uint16_t* out) { *out = uint16_t(rounded_bits(x) >> 16); }

// x as `T` would hold it, back in float32: where the reference rounds between steps.
inline float round_to(float x, float) { return x; }

inline float round_to(float x, uint16_t) {
    const uint32_t bits = rounded_bits(x);
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

}  // namespace
