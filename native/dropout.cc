#include "dropout.h"

#include "parallel.h"

namespace diskgnn {

template <typename T>
void dropout(const T* in, T* out, int64_t n, uint64_t threshold, float scale, uint64_t key, uint64_t offset,
             bool relu, int num_threads) {
  const int parts = parts_for(n, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
    for (int64_t i = lo; i < hi; ++i) {
      const float v = widen(in[i]);
      const bool keep = dropout_draw(key, offset + static_cast<uint64_t>(i)) >= threshold && !(relu && !(v > 0));
      narrow(keep ? v * scale : 0.0f, out + i);
    }
  });
}

template <typename T>
void relu_dropout_backward(const T* grad, const T* out, T* grad_in, int64_t n, float scale, int num_threads) {
  const int parts = parts_for(n, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
    for (int64_t i = lo; i < hi; ++i) narrow(widen(out[i]) > 0 ? widen(grad[i]) * scale : 0.0f, grad_in + i);
  });
}

template void dropout<float>(const float*, float*, int64_t, uint64_t, float, uint64_t, uint64_t, bool, int);
template void dropout<bf16>(const bf16*, bf16*, int64_t, uint64_t, float, uint64_t, uint64_t, bool, int);
template void relu_dropout_backward<float>(const float*, const float*, float*, int64_t, float, int);
template void relu_dropout_backward<bf16>(const bf16*, const bf16*, bf16*, int64_t, float, int);

}  // namespace diskgnn
