// HAG (Jia et al., KDD 2020): a block's neighbour sums with shared partial sums computed once.
//
// When several destinations aggregate the same pair of sources, an aggregation
// node holds that pair's sum and the destinations read it instead of the two
// rows. The search is the paper's greedy one: repeatedly merge the pair of
// inputs shared by the most destinations, until the capacity is reached or no
// pair is shared by `min_shared` destinations. Ids in the result are extended:
// below num_src a source row, from num_src on aggregation node id - num_src,
// numbered level by level (a node's inputs are sources or nodes of earlier
// levels), so that each level is one pass.
#pragma once

#include <cstdint>
#include <vector>

#include "bf16.h"

namespace diskgnn {

struct Hag {
  std::vector<int64_t> inputs;        // 2 per aggregation node, extended ids
  std::vector<int64_t> level_bounds;  // aggregation nodes [level_bounds[l], level_bounds[l+1]) form level l
  std::vector<int64_t> indptr;        // the destinations' rewritten lists, CSC over extended ids
  std::vector<int64_t> indices;
  int64_t num_src = 0;
  int64_t frozen = 0;                 // destinations left as they were (a repeated source, or above max_degree)
};

/// @brief The greedy HAG of a CSC block. Destinations whose list repeats a source, or has more than
/// `max_degree` entries (their pairs would dominate the search's time and memory), keep their lists.
Hag hag_search(const int64_t* indptr, const int64_t* indices, int64_t num_dst, int64_t num_src, int64_t capacity,
               int64_t min_shared, int max_depth, int64_t max_degree);

/// @brief Throws std::invalid_argument unless `hag` is well formed: each aggregation node's inputs are sources
/// or nodes of earlier levels, the levels cover the nodes in order, the lists are a CSC over sources and nodes.
/// A HAG read back from a file is checked so before the sums trust its ids.
void hag_check(const Hag& hag);

/// @brief csc_sum through the HAG (out[i] = scale[i] * (the sum over destination i's original list, plus src[i]
/// with self_loop)): each level's aggregation nodes into `agg` (num_agg x dim float32 scratch, threads over
/// rows), then the rewritten lists by csc_sum itself. T: float or bf16.
template <typename T>
void hag_sum(const Hag& hag, const T* src, int64_t dim, const float* scale, bool self_loop, float* agg, T* out,
             int num_threads);

/// @brief The transpose, for backward: csc_sum_transpose over the rewritten lists, the aggregation nodes'
/// gradients in `grad_agg` (scratch) passed on through the levels in reverse. grad_src is overwritten.
template <typename T>
void hag_sum_transpose(const Hag& hag, const T* grad_out, int64_t dim, const float* scale, bool self_loop,
                       float* grad_agg, T* grad_src, int num_threads);

}  // namespace diskgnn
