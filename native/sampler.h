// Offline neighbour sampling over a memory-mapped CSC graph: node-wise
// uniform sampling, or LABOR-0 with layer and batch dependency.
//
// Uniform: each batch draws from its own random stream, keyed by (seed, batch
// key). LABOR: every vertex t has one variate r_t, a pure function of (seed,
// the batch's step, t), shared by every seed of the batch that could pick it;
// a seed keeps the `fanout` neighbours with the smallest r_t (the fixed-fanout
// "sequential Poisson" form of LABOR-0, so seeds that share neighbours tend to
// pick the same ones). Either way the samples depend on the seed alone and
// never on the thread count or on which batches are sampled together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace diskgnn {

/// @brief Read-only CSC topology mapped from a dataset's indptr.bin/indices.bin.
///
/// The files are mapped, never copied: the page cache holds what is touched,
/// so topology larger than RAM still samples (at page-fault speed).
class CscView {
 public:
  /// @param indices_bytes_per_id 4 (int32) or 8 (int64), from the manifest.
  CscView(const std::string& indptr_path, const std::string& indices_path, int64_t num_nodes,
          int64_t num_edges, int indices_bytes_per_id);
  ~CscView();
  CscView(const CscView&) = delete;
  CscView& operator=(const CscView&) = delete;

  int64_t num_nodes() const { return num_nodes_; }
  int64_t degree(int64_t v) const { return indptr_[v + 1] - indptr_[v]; }
  int64_t neighbour(int64_t v, int64_t i) const {
    int64_t e = indptr_[v] + i;
    return wide_ ? static_cast<const int64_t*>(indices_)[e] : static_cast<const int32_t*>(indices_)[e];
  }

 private:
  int64_t num_nodes_;
  const int64_t* indptr_ = nullptr;
  const void* indices_ = nullptr;
  size_t indptr_map_bytes_ = 0, indices_map_bytes_ = 0;
  bool wide_;
};

/// @brief One sampled mini-batch as a self-contained little-endian record.
///
/// Layout (docs/format.md, "Sample files"): int64 header [L, n_0..n_L, e_0..e_{L-1}],
/// int64 nodes[n_L] (global ids in local-id order, the n_0 seeds first), then for
/// each hop h: int32 indptr[n_h + 1] and int32 indices[e_h] (local source ids),
/// padded with zeros to a multiple of 8 bytes.
struct SampleRecord {
  std::vector<uint8_t> bytes;
};

struct sampling_options {
  std::vector<int64_t> fanouts;  ///< per hop, seeds outwards; -1 takes every neighbour
  uint64_t seed = 0;
  bool labor = false;             ///< LABOR-0 instead of node-wise uniform sampling
  bool layer_dependency = false;  ///< LABOR: the same variates for every hop of a batch
  /// LABOR, κ: the variates of consecutive steps drift from one window's to the
  /// next's and are renewed every κ steps; 1 makes batches independent.
  uint64_t batch_dependency = 1;
  /// Partitioned epochs (MariusGNN's buffer): node v is in partition v / partition_rows, and batch b samples
  /// only in-neighbours whose partition's bit is set in batch_masks[b] (the partitions in memory for it).
  /// 0, or no masks: every neighbour.
  int64_t partition_rows = 0;
  std::vector<uint64_t> batch_masks;
  /// Edges a batch must not sample (link prediction's positives, left out of their own neighbourhoods): batch
  /// b's are the (source, destination) pairs exclude_pairs[2i], exclude_pairs[2i + 1] for i in
  /// [exclude_offsets[b], exclude_offsets[b + 1]). No offsets: none.
  const int64_t* exclude_pairs = nullptr;
  std::vector<int64_t> exclude_offsets;
};

/// @brief LABOR's variate r_t of vertices `ids` at `step` and `hop`: uniform in
/// (0, 1) for any step; r_t = Φ(cos(πc/2) z_t(s0) + sin(πc/2) z_t(s1)) with
/// c = (step mod κ) / κ, s0 and s1 the seeds of windows step div κ and the
/// next, z standard normal. Sampling compares the normal mixture (Φ keeps its
/// order); this gives r_t itself, for tests. A typed graph's variates are those of `node_type` (0: a plain
/// graph's).
std::vector<double> labor_variates(const sampling_options& options, uint64_t step, size_t hop, const int64_t* ids,
                                   size_t count, int node_type = 0);

/// @brief Samples batches of seeds in parallel.
/// @param seeds all seeds of the batches, concatenated.
/// @param batch_offsets batch b's seeds are seeds[batch_offsets[b] : batch_offsets[b+1]].
/// @param batch_keys per batch: uniform sampling, the key of its random stream;
///        LABOR, its step (consecutive steps share variates under batch dependency).
/// @return one record per batch, in batch order. With options.batch_masks, one mask per batch, and a batch's
///         fanout counts the neighbours its mask allows.
std::vector<SampleRecord> sample_batches(const CscView& graph, const int64_t* seeds,
                                         const std::vector<int64_t>& batch_offsets,
                                         const std::vector<uint64_t>& batch_keys, const sampling_options& options,
                                         int num_threads);

/// @brief One relation of a heterogeneous graph as the sampler sees it: its CSC over the destination type's
/// local ids (sources are the source type's local ids), and the two types' indices.
struct HeteroRelation {
  const CscView* graph;
  int src_type, dst_type;
};

/// @brief Samples batches of seeds over typed relations (of the target type, or seed_types[i] where given:
/// a type's seeds come first among its nodes, in the order given): node-wise uniform, each batch from its own
/// random stream keyed by (options.seed, batch key), or (options.labor) LABOR-0 per relation, the batch key its
/// step, each source type's nodes with their own variates (layer and batch dependency as for one relation).
/// options.fanouts is unused: a typed graph's are per hop and relation.
///
/// Hop h takes, for every node of type t known after hop h and every relation r into t, up to fanouts[h][r]
/// distinct sources of r (all for -1, none for 0). Record layout (docs/format.md, "Hetero sample records"):
/// int64 header [L, T, R, n[0][0..T) .. n[L][0..T), e[0][0..R) .. e[L-1][0..R)], per type t the int64 local
/// ids of its n[L][t] nodes (seeds first), then per hop h and relation r int32 indptr[n[h][dst(r)] + 1] and
/// int32 indices[e[h][r]] (positions among the source type's nodes), padded to a multiple of 8 bytes.
std::vector<SampleRecord> sample_hetero_batches(const std::vector<HeteroRelation>& relations, int num_types,
                                                int target_type, const int64_t* seeds, const int32_t* seed_types,
                                                const std::vector<int64_t>& batch_offsets,
                                                const std::vector<uint64_t>& batch_keys,
                                                const std::vector<std::vector<int64_t>>& fanouts,
                                                const sampling_options& options, int num_threads);

}  // namespace diskgnn
