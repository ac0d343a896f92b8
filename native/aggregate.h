// Neighbour sums over a block's CSC adjacency, for the models' aggregation on CPU.
//
// torch's CPU path gathers every edge's source row into an (edges x dim)
// temporary and scatters it back (index + index_add_, and index_put_ with
// accumulation in the backward pass); these kernels read each source row in
// place and write each output row once, split across threads so that no two
// threads write the same element.
#pragma once

#include <cstdint>

namespace diskgnn {

/// @brief out[i] = sum of src[indices[e]] for e in [indptr[i], indptr[i+1]) (out is overwritten).
/// Threads take disjoint ranges of destination rows.
void csc_sum(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const float* src, int64_t num_src,
             int64_t dim, float* out, int num_threads);

/// @brief The transpose, for the backward pass: grad_src[indices[e]] += grad_out[i] (grad_src is
/// overwritten). Threads take disjoint column ranges, so scattered rows never collide.
void csc_sum_transpose(const int64_t* indptr, const int64_t* indices, int64_t num_dst, const float* grad_out,
                       int64_t num_src, int64_t dim, float* grad_src, int num_threads);

}  // namespace diskgnn
