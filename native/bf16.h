// bfloat16 rows as the native kernels read and write them: widened to float32 to compute, narrowed once.
#pragma once

#include <cstdint>
#include <cstring>

namespace diskgnn {

/// @brief A bfloat16 value's bits (the top half of a float32's).
struct bf16 {
  uint16_t bits;
};

inline float widen(float v) { return v; }
inline float widen(bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds to nearest, ties to even, as torch's float -> bfloat16 conversion does (NaN stays NaN).
inline void narrow(float f, float* out) { *out = f; }
inline void narrow(float f, bf16* out) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;  // a select, not a branch: loops over rows vectorise
  out->bits = static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace diskgnn
