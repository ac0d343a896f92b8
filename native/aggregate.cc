#include "aggregate.h"

#include "parallel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace diskgnn {
namespace {

void check_indices(const int64_t* indptr, const int64_t* indices, int64_t num_dst, int64_t num_src) {
  if (num_dst < 0 || indptr[0] != 0) throw std::invalid_argument("csc_sum: indptr must start at 0");
  for (int64_t i = 0; i < num_dst; ++i) {
    if (indptr[i + 1] < indptr[i]) throw std::invalid_argument("csc_sum: indptr must not decrease");
  }
  for (int64_t e = 0; e < indptr[num_dst]; ++e) {
    if (indices[e] < 0 || indices[e] >= num_src) {
      throw std::invalid_argument("csc_sum: source id " + std::to_string(indices[e]) + " out of range [0, " +
                                  std::to_string(num_src) + ")");
    }
  }
}

}  // namespace

template <typename T>
void csc_sum(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const T* src, int64_t num_src,
             int64_t dim, const float* scale, bool self_loop, T* out, int num_threads, const AggNodes& agg) {
  check_indices(indptr, indices, num_dst, num_src + agg.count);
  if (self_loop && num_dst > num_src) throw std::invalid_argument("csc_sum: a self loop needs num_dst <= num_src");
  const int parts = parts_for(indptr[num_dst] * dim, num_threads);
  parallel_parts(parts, [&](int p) {
    // Equal shares of edges rather than of rows: degrees are skewed.
    const int64_t edges = indptr[num_dst];
    const int64_t lo = std::lower_bound(indptr, indptr + num_dst, edges * p / parts) - indptr;
    const int64_t hi = std::lower_bound(indptr, indptr + num_dst, edges * (p + 1) / parts) - indptr;
    const int64_t end = p == parts - 1 ? num_dst : hi;
    std::vector<float> acc(static_cast<size_t>(dim));
    for (int64_t i = lo; i < end; ++i) {
      if (self_loop) {
        for (int64_t c = 0; c < dim; ++c) acc[c] = widen(src[i * dim + c]);
      } else {
        std::fill(acc.begin(), acc.end(), 0.0f);
      }
      for (int64_t e = indptr[i]; e < indptr[i + 1]; ++e) {
        const int64_t x = indices[e];
        if (x < num_src) {
          const T* s = src + x * dim;
          for (int64_t c = 0; c < dim; ++c) acc[c] += widen(s[c]);
        } else {
          const float* s = agg.rows + (x - num_src) * dim;
          for (int64_t c = 0; c < dim; ++c) acc[c] += s[c];
        }
      }
      const float k = scale ? scale[i] : 1.0f;
      T* row = out + i * dim;
      for (int64_t c = 0; c < dim; ++c) narrow(k * acc[c], row + c);
    }
  });
}

template <typename T>
void csc_sum_transpose(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const T* grad_out,
                       int64_t num_src, int64_t dim, const float* scale, bool self_loop, T* grad_src,
                       int num_threads, const AggNodes& agg) {
  check_indices(indptr, indices, num_dst, num_src + agg.count);
  if (self_loop && num_dst > num_src) throw std::invalid_argument("csc_sum: a self loop needs num_dst <= num_src");
  const int parts = column_parts((indptr[num_dst] + 2 * agg.count) * dim, dim, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t c0 = dim * p / parts, c1 = dim * (p + 1) / parts, w = c1 - c0;
    // float32 sums: in place for float rows, in a scratch of this part's columns for bf16 ones
    std::vector<float> scratch(std::is_same_v<T, float> ? 0 : static_cast<size_t>(num_src * w));
    auto target = [&](int64_t r) {
      if (r >= num_src) return agg.rows + (r - num_src) * dim + c0;
      if constexpr (std::is_same_v<T, float>) {
        return grad_src + r * dim + c0;
      } else {
        return scratch.data() + r * w;
      }
    };
    for (int64_t r = 0; r < num_src + agg.count; ++r) std::memset(target(r), 0, sizeof(float) * w);
    for (int64_t i = 0; i < num_dst; ++i) {
      const T* g = grad_out + i * dim + c0;
      const float k = scale ? scale[i] : 1.0f;
      for (int64_t e = indptr[i]; e < indptr[i + 1]; ++e) {
        float* d = target(indices[e]);
        for (int64_t c = 0; c < w; ++c) d[c] += k * widen(g[c]);
      }
      if (self_loop) {
        float* d = target(i);
        for (int64_t c = 0; c < w; ++c) d[c] += k * widen(g[c]);
      }
    }
    for (int64_t n = agg.count - 1; n >= 0; --n) {  // later levels first: a node's gradient is complete
      const float* g = target(num_src + n);
      float* a = target(agg.inputs[2 * n]);
      float* b = target(agg.inputs[2 * n + 1]);
      for (int64_t c = 0; c < w; ++c) {
        a[c] += g[c];
        b[c] += g[c];
      }
    }
    if constexpr (!std::is_same_v<T, float>) {
      for (int64_t r = 0; r < num_src; ++r) {
        for (int64_t c = 0; c < w; ++c) narrow(scratch[r * w + c], grad_src + r * dim + c0 + c);
      }
    }
  });
}

template void csc_sum<float>(const int64_t*, const int64_t*, int64_t, const float*, int64_t, int64_t, const float*,
                             bool, float*, int, const AggNodes&);
template void csc_sum<bf16>(const int64_t*, const int64_t*, int64_t, const bf16*, int64_t, int64_t, const float*,
                            bool, bf16*, int, const AggNodes&);
template void csc_sum_transpose<float>(const int64_t*, const int64_t*, int64_t, const float*, int64_t, int64_t,
                                       const float*, bool, float*, int, const AggNodes&);
template void csc_sum_transpose<bf16>(const int64_t*, const int64_t*, int64_t, const bf16*, int64_t, int64_t,
                                      const float*, bool, bf16*, int, const AggNodes&);

}  // namespace diskgnn
