#include "dropout.h"

#include "parallel.h"

namespace diskgnn {

template <typename T>
void dropout(const T* in, T* out, int64_t n, uint64_t threshold, float scale, uint64_t key, uint64_t offset,
             int num_threads) {
  const int parts = parts_for(n, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
    for (int64_t i = lo; i < hi; ++i) {
      const bool keep = dropout_draw(key, offset + static_cast<uint64_t>(i)) >= threshold;
      narrow(keep ? widen(in[i]) * scale : 0.0f, out + i);
    }
  });
}

template void dropout<float>(const float*, float*, int64_t, uint64_t, float, uint64_t, uint64_t, int);
template void dropout<bf16>(const bf16*, bf16*, int64_t, uint64_t, float, uint64_t, uint64_t, int);

}  // namespace diskgnn
