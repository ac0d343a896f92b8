// Dropout on the CPU in one pass, its mask never stored.
//
// Element i of a call is kept where a counter-based hash of (key, offset + i) (splitmix64's finaliser)
// lands at or above p * 2^32, and scaled by 1 / (1 - p). The mask is a function of the stream's key and
// the element's position, so backward recomputes it with the same arguments (dropout is linear in its input
// for a given mask), a checkpoint keeps the stream as two integers, and threads need no shared state.
// torch's CPU bernoulli_ took a third of a train step here; a numpy mask took four passes.
#pragma once

#include <cstdint>

#include "bf16.h"

namespace diskgnn {

/// @brief The 32-bit draw for element `index` of the stream `key`.
inline uint32_t dropout_draw(uint64_t key, uint64_t index) {
  uint64_t z = key + index * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

/// @brief out[i] = in[i] * scale where dropout_draw(key, offset + i) >= threshold, else 0; threshold is
/// p * 2^32 rounded and scale 1 / (1 - p) (the caller's). With relu, negative inputs give 0 too (ReLU then
/// dropout in one pass). T: float or bf16 (scaled in float32, rounded once). in may be out.
template <typename T>
void dropout(const T* in, T* out, int64_t n, uint64_t threshold, float scale, uint64_t key, uint64_t offset,
             bool relu, int num_threads);

/// @brief ReLU-then-dropout's backward from its output: grad_in[i] = grad[i] * scale where out[i] > 0, else 0
/// (an element passed both exactly where its output is positive).
template <typename T>
void relu_dropout_backward(const T* grad, const T* out, T* grad_in, int64_t n, float scale, int num_threads);

}  // namespace diskgnn
