#include "aggregate.h"

#include "parallel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

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

void csc_sum(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const float* src, int64_t num_src,
             int64_t dim, float* out, int num_threads) {
  check_indices(indptr, indices, num_dst, num_src);
  const int parts = parts_for(indptr[num_dst] * dim, num_threads);
  parallel_parts(parts, [&](int p) {
    // Equal shares of edges rather than of rows: degrees are skewed.
    const int64_t edges = indptr[num_dst];
    const int64_t lo = std::lower_bound(indptr, indptr + num_dst, edges * p / parts) - indptr;
    const int64_t hi = std::lower_bound(indptr, indptr + num_dst, edges * (p + 1) / parts) - indptr;
    const int64_t end = p == parts - 1 ? num_dst : hi;
    for (int64_t i = lo; i < end; ++i) {
      float* row = out + i * dim;
      std::memset(row, 0, sizeof(float) * dim);
      for (int64_t e = indptr[i]; e < indptr[i + 1]; ++e) {
        const float* s = src + indices[e] * dim;
        for (int64_t c = 0; c < dim; ++c) row[c] += s[c];
      }
    }
  });
}

void csc_sum_transpose(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const float* grad_out,
                       int64_t num_src, int64_t dim, float* grad_src, int num_threads) {
  check_indices(indptr, indices, num_dst, num_src);
  const int parts = column_parts(indptr[num_dst] * dim, dim, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t c0 = dim * p / parts, c1 = dim * (p + 1) / parts;
    for (int64_t r = 0; r < num_src; ++r) std::memset(grad_src + r * dim + c0, 0, sizeof(float) * (c1 - c0));
    for (int64_t i = 0; i < num_dst; ++i) {
      const float* g = grad_out + i * dim;
      for (int64_t e = indptr[i]; e < indptr[i + 1]; ++e) {
        float* d = grad_src + indices[e] * dim;
        for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
      }
    }
  });
}

}  // namespace diskgnn
