#include "dropout.h"

#include <algorithm>
#include <stdexcept>

#include "parallel.h"

namespace diskgnn {
namespace {

constexpr int64_t kChunk = 2048;  // elements a hash chunk covers: 8 KiB of draws, in L1

// Pairs [first, first + count) hashed into out: the loop the compiler vectorises.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void hash_pairs(uint64_t key, uint64_t first, int64_t count, uint64_t* out) {
  for (int64_t j = 0; j < count; ++j) out[j] = dropout_pair(key, first + static_cast<uint64_t>(j));
}

// The draws of elements [first, first + count) (first even) as 32-bit values, low halves first.
inline const uint32_t* draws(uint64_t key, uint64_t first, int64_t count, uint64_t* buf) {
  hash_pairs(key, first / 2, (count + 1) / 2, buf);
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a pair's low half is element 2j's draw");
  return reinterpret_cast<const uint32_t*>(buf);
}

// One chunk's elements kept or zeroed: branch-free, so that it vectorises.
template <bool kRelu, typename T>
void apply(const T* __restrict__ in, T* __restrict__ out, const uint32_t* __restrict__ d, int64_t count,
           uint32_t threshold, float scale) {
  for (int64_t k = 0; k < count; ++k) {
    const float v = widen(in[k]);
    const float gain = (d[k] >= threshold) & (!kRelu | (v > 0.0f)) ? scale : 0.0f;  // & not &&: no branch
    narrow(v * gain, out + k);
  }
}

template <typename T>
void pass_positive(const T* __restrict__ grad, const T* __restrict__ out, T* __restrict__ grad_in, int64_t count,
                   float scale) {
  for (int64_t k = 0; k < count; ++k) narrow(widen(grad[k]) * (widen(out[k]) > 0.0f ? scale : 0.0f), grad_in + k);
}

float keep_scale(double p) {
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("dropout: p must be in [0, 1)");
  return static_cast<float>(1.0 / (1.0 - p));
}

}  // namespace

template <typename T>
void dropout(const T* in, T* out, int64_t n, double p, uint64_t key, uint64_t offset, const int64_t* row_base,
             int64_t dim, bool relu, int num_threads) {
  const float scale = keep_scale(p);
  if (offset % 2) throw std::invalid_argument("dropout: the stream's offset must be even");
  if (row_base != nullptr && (dim < 1 || n % dim)) throw std::invalid_argument("dropout: rows of dim elements");
  const int64_t rows = row_base != nullptr ? n / dim : 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (row_base[r] < 0 || row_base[r] % 2) throw std::invalid_argument("dropout: row positions must be even");
  }
  // p < 1, so p * 2^32 is below 2^32 but may round up to it: 2^32 - 1 drops the same draws bar one
  const uint32_t t = static_cast<uint32_t>(std::min<uint64_t>(static_cast<uint64_t>(p * 4294967296.0 + 0.5),
                                                             0xffffffffu));
  // Elements [lo, lo + count) drawing stream positions from `first` on.
  auto run = [&](uint64_t first, int64_t lo, int64_t count, uint64_t* buf) {
    const uint32_t* d = draws(key, first, count, buf);
    if (relu) {
      apply<true>(in + lo, out + lo, d, count, t, scale);
    } else {
      apply<false>(in + lo, out + lo, d, count, t, scale);
    }
  };
  const int parts = parts_for(n, num_threads);
  if (row_base == nullptr) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_parts(parts, [&](int part) {
      uint64_t buf[kChunk / 2];
      for (int64_t c = chunks * part / parts; c < chunks * (part + 1) / parts; ++c) {
        const int64_t lo = c * kChunk;
        run(offset + static_cast<uint64_t>(lo), lo, std::min(kChunk, n - lo), buf);
      }
    });
    return;
  }
  parallel_parts(parts, [&](int part) {
    uint64_t buf[kChunk / 2];
    for (int64_t r = rows * part / parts; r < rows * (part + 1) / parts; ++r) {
      for (int64_t c = 0; c < dim; c += kChunk) {
        run(static_cast<uint64_t>(row_base[r] + c), r * dim + c, std::min(kChunk, dim - c), buf);
      }
    }
  });
}

template <typename T>
void relu_dropout_backward(const T* grad, const T* out, T* grad_in, int64_t n, double p, int num_threads) {
  const float scale = keep_scale(p);
  const int parts = parts_for(n, num_threads);
  parallel_parts(parts, [&](int part) {
    const int64_t lo = n * part / parts, hi = n * (part + 1) / parts;
    pass_positive(grad + lo, out + lo, grad_in + lo, hi - lo, scale);
  });
}

template void dropout<float>(const float*, float*, int64_t, double, uint64_t, uint64_t, const int64_t*, int64_t, bool,
                             int);
template void dropout<bf16>(const bf16*, bf16*, int64_t, double, uint64_t, uint64_t, const int64_t*, int64_t, bool, int);
template void relu_dropout_backward<float>(const float*, const float*, float*, int64_t, double, int);
template void relu_dropout_backward<bf16>(const bf16*, const bf16*, bf16*, int64_t, double, int);

}  // namespace diskgnn
