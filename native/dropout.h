// Dropout on the CPU in one pass, its mask never stored.
//
// The draws are counter-based: pair j of a stream is splitmix64's finaliser of key + j * golden, and its two
// 32-bit halves are the draws of elements 2j and 2j + 1. Element i is kept where its draw lands at or above
// p * 2^32, and scaled by 1 / (1 - p). The mask is a function of the stream's key and the element's
// position, so backward recomputes it with the same arguments (dropout is linear in its input for a given
// mask), a checkpoint keeps the stream as two integers, and threads need no shared state. The hashes are
// computed a chunk at a time in a loop the compiler vectorises (with AVX-512's 64-bit multiplies where the
// machine has them). torch's CPU bernoulli_ took a third of a train step here; a numpy mask took four passes.
#pragma once

#include <cstdint>

#include "bf16.h"

namespace diskgnn {

/// @brief The 64-bit hash of pair `pair` of the stream `key`: elements 2 * pair (low half) and 2 * pair + 1
/// (high half) draw from it.
inline uint64_t dropout_pair(uint64_t key, uint64_t pair) {
  uint64_t z = key + pair * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// @brief out[i] = in[i] / (1 - p) where the draw of element i's position is >= p * 2^32 (rounded), else 0;
/// p in [0, 1). Positions: offset + i (offset even), or, with row_base, row_base[r] + c for element c of row r
/// (rows of dim elements, each base even): a row's mask then depends on its base alone, whatever rows come
/// with it (a node's mask the same in any partition of its batch). With relu, inputs that are not positive
/// give 0 too (ReLU then dropout in one pass). T: float or bf16 (scaled in float32, rounded once). in and out
/// do not overlap.
template <typename T>
void dropout(const T* in, T* out, int64_t n, double p, uint64_t key, uint64_t offset, const int64_t* row_base,
             int64_t dim, bool relu, int num_threads);

/// @brief ReLU-then-dropout's backward from its output: grad_in[i] = grad[i] / (1 - p) where out[i] > 0, else 0
/// (an element passed both exactly where its output is positive).
template <typename T>
void relu_dropout_backward(const T* grad, const T* out, T* grad_in, int64_t n, double p, int num_threads);

}  // namespace diskgnn
