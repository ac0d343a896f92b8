// Neighbour sums over a block's CSC adjacency, for the models' aggregation on CPU.
//
// torch's CPU path gathers every edge's source row into an (edges x dim)
// temporary and scatters it back (index + index_add_, and index_put_ with
// accumulation in the backward pass); these kernels read each source row in
// place and write each output row once, split across threads so that no two
// threads write the same element.
//
// Rows are float32 or bfloat16 (a layer under autocast): bf16 rows are summed in float32 and rounded once
// on the way out, so a bf16 layer needs no float32 copy of its input, and its output feeds the next bf16
// matrix product as it is. An optional per-destination scale folds a mean (SAGE's 1/degree) into the same
// pass.
#pragma once

#include <cstdint>

#include "bf16.h"

namespace diskgnn {

/// @brief A HAG's aggregation nodes (native/hag.h) as the sums see them: in a CSC's indices, an id from
/// num_src on names node id - num_src, whose row is rows[(id - num_src) * dim, ...) in float32 and whose value
/// is the sum of ids inputs[2k] and inputs[2k + 1]. Empty (count 0) for a plain block.
struct AggNodes {
  const int64_t* inputs = nullptr;
  int64_t count = 0;
  float* rows = nullptr;
};

/// @brief out[i] = scale[i] * (sum of src[indices[e]] for e in [indptr[i], indptr[i+1]), plus src[i] itself
/// with self_loop), accumulated in float32; scale may be null (1). out is overwritten. The first num_dst
/// sources are the destinations (a block's layout). Threads take disjoint ranges of destination rows.
/// T: float or bf16. With `agg`, ids from num_src on read its rows, which the caller has filled (hag_sum).
template <typename T>
void csc_sum(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const T* src, int64_t num_src,
             int64_t dim, const float* scale, bool self_loop, T* out, int num_threads, const AggNodes& agg = {});

/// @brief The transpose, for the backward pass: grad_src[indices[e]] += scale[i] * grad_out[i] (and
/// grad_src[i] += scale[i] * grad_out[i] with self_loop), accumulated in float32 (grad_src is overwritten).
/// Threads take disjoint column ranges, so scattered rows never collide. With `agg`, its rows are the
/// aggregation nodes' gradients (overwritten), passed on to their inputs level by level in reverse.
template <typename T>
void csc_sum_transpose(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const T* grad_out,
                       int64_t num_src, int64_t dim, const float* scale, bool self_loop, T* grad_src,
                       int num_threads, const AggNodes& agg = {});

}  // namespace diskgnn
