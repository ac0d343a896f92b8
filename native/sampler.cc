#include "sampler.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "file_io.h"

namespace diskgnn {

namespace {

const void* map_file(const std::string& path, size_t need_bytes, size_t* mapped) {
  *mapped = 0;
  if (need_bytes == 0) return nullptr;
  file_io::fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw std::runtime_error(path + ": cannot open: " + file_io::errno_text(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < need_bytes) {
    throw std::runtime_error(path + ": shorter than the manifest says (" + std::to_string(need_bytes) +
                             " bytes needed)");
  }
  void* p = ::mmap(nullptr, need_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw std::runtime_error(path + ": mmap failed: " + file_io::errno_text(errno));
  // Neighbour lists are visited in no useful order: read-ahead would only evict.
  ::madvise(p, need_bytes, MADV_RANDOM);
  *mapped = need_bytes;
  return p;
}

// splitmix64: turns (seed, key) into well-spread xoshiro state.
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256**: small, fast, and good enough for sampling.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t key) {
    uint64_t x = seed ^ (key * 0xd1342543de82ef95ULL);
    for (auto& w : s_) w = splitmix64(x);
  }
  uint64_t next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n) by Lemire's multiply-shift; the bias for n << 2^64 is negligible.
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<__uint128_t>(next()) * n) >> 64); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Global id -> local id, open addressing; cleared per batch.
class LocalIds {
 public:
  explicit LocalIds(size_t expected) { reset(expected); }
  void reset(size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected) cap <<= 1;
    keys_.assign(cap, -1);
    vals_.resize(cap);
    size_ = 0;
  }
  // Returns the local id of `g`, assigning `next` when it is new (and setting inserted).
  int32_t find_or_insert(int64_t g, int32_t next, bool* inserted) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    size_t mask = keys_.size() - 1;
    size_t i = hash(g) & mask;
    while (keys_[i] != -1) {
      if (keys_[i] == g) {
        *inserted = false;
        return vals_[i];
      }
      i = (i + 1) & mask;
    }
    keys_[i] = g;
    vals_[i] = next;
    ++size_;
    *inserted = true;
    return next;
  }

 private:
  static size_t hash(int64_t g) { return static_cast<size_t>(static_cast<uint64_t>(g) * 0x9e3779b97f4a7c15ULL >> 17); }
  void grow() {
    std::vector<int64_t> keys;
    std::vector<int32_t> vals;
    keys.swap(keys_);
    vals.swap(vals_);
    keys_.assign(keys.size() * 2, -1);
    vals_.resize(keys.size() * 2);
    size_t mask = keys_.size() - 1;
    for (size_t j = 0; j < keys.size(); ++j) {
      if (keys[j] == -1) continue;
      size_t i = hash(keys[j]) & mask;
      while (keys_[i] != -1) i = (i + 1) & mask;
      keys_[i] = keys[j];
      vals_[i] = vals[j];
    }
  }
  std::vector<int64_t> keys_;
  std::vector<int32_t> vals_;
  size_t size_ = 0;
};

// Standard normal z_t(s) of vertex t under variate seed s: Box-Muller on two uniforms of a hash of (s, t).
double normal(uint64_t s, int64_t t) {
  uint64_t x = s ^ (static_cast<uint64_t>(t) * 0xd1342543de82ef95ULL);
  const uint64_t a = splitmix64(x), b = splitmix64(x);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1p-53;  // in (0, 1): log is finite
  const double u2 = static_cast<double>(b >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// The variates of one hop of one batch: vertex t's key w0 z_t(s0) + w1 z_t(s1), a standard normal for any
// mix (w0² + w1² = 1), whose order is the order of r_t = Φ(key). A typed graph's node type is mixed into the
// seed (type 0 and a plain graph's nodes unsalted), so that each type's local ids have their own variates.
struct labor_keys {
  uint64_t s0, s1;
  double w0, w1;

  labor_keys(const sampling_options& o, uint64_t step, size_t hop, uint64_t node_type = 0) {
    const uint64_t kappa = std::max<uint64_t>(1, o.batch_dependency);
    uint64_t base = o.seed ^ 0x1ab0ae5eedULL ^ (node_type * 0xbf58476d1ce4e5b9ULL);
    if (!o.layer_dependency) base = splitmix64(base) + hop;
    uint64_t x0 = base ^ ((step / kappa) * 0x9e3779b97f4a7c15ULL), x1 = base ^ ((step / kappa + 1) * 0x9e3779b97f4a7c15ULL);
    s0 = splitmix64(x0);
    s1 = splitmix64(x1);
    const double c = static_cast<double>(step % kappa) / static_cast<double>(kappa);
    w0 = std::cos(M_PI * c / 2);
    w1 = std::sin(M_PI * c / 2);
  }
  double operator()(int64_t t) const { return w1 == 0 ? normal(s0, t) : w0 * normal(s0, t) + w1 * normal(s1, t); }
};

// LABOR-0 with a fixed fanout: the k of v's d candidate neighbours (positions cand[j], or j without cand) with
// the smallest variates, returned as sorted candidate indices.
void choose_labor(const CscView& g, int64_t v, const int64_t* cand, int64_t d, int64_t k, const labor_keys& keys,
                  std::vector<std::pair<double, int64_t>>& scratch, std::vector<int64_t>& out) {
  scratch.resize(d);
  for (int64_t j = 0; j < d; ++j) scratch[j] = {keys(g.neighbour(v, cand ? cand[j] : j)), j};
  std::nth_element(scratch.begin(), scratch.begin() + k, scratch.end());
  out.resize(k);
  for (int64_t j = 0; j < k; ++j) out[j] = scratch[j].second;
  std::sort(out.begin(), out.end());
}

// Chooses k of the positions [0, d) uniformly without replacement (Floyd's
// algorithm: k draws, no O(d) scratch even for hubs), returned sorted.
void choose(Rng& rng, int64_t d, int64_t k, std::vector<int64_t>& out) {
  out.clear();
  for (int64_t j = d - k; j < d; ++j) {
    int64_t t = static_cast<int64_t>(rng.below(static_cast<uint64_t>(j + 1)));
    bool taken = std::find(out.begin(), out.end(), t) != out.end();
    out.push_back(taken ? j : t);
  }
  std::sort(out.begin(), out.end());
}

template <typename T>
void append(std::vector<uint8_t>& buf, const T* data, size_t count) {
  size_t at = buf.size();
  buf.resize(at + count * sizeof(T));
  if (count) std::memcpy(buf.data() + at, data, count * sizeof(T));
}

// A batch's excluded edges, sorted (destination, source) for binary search.
class Excluded {
 public:
  Excluded(const int64_t* pairs, int64_t count) {
    edges_.reserve(count);
    for (int64_t i = 0; i < count; ++i) edges_.emplace_back(pairs[2 * i + 1], pairs[2 * i]);
    std::sort(edges_.begin(), edges_.end());
  }
  bool any() const { return !edges_.empty(); }
  // v is the destination of an excluded edge.
  bool touches(int64_t v) const {
    auto it = std::lower_bound(edges_.begin(), edges_.end(), std::make_pair(v, INT64_MIN));
    return it != edges_.end() && it->first == v;
  }
  bool has(int64_t u, int64_t v) const { return std::binary_search(edges_.begin(), edges_.end(), std::make_pair(v, u)); }

 private:
  std::vector<std::pair<int64_t, int64_t>> edges_;
};

SampleRecord sample_one(const CscView& g, const int64_t* seeds, int64_t n_seeds, uint64_t key,
                        const sampling_options& o, uint64_t mask, const Excluded& excluded, LocalIds& ids) {
  const std::vector<int64_t>& fanouts = o.fanouts;
  Rng rng(o.seed, key);
  const size_t layers = fanouts.size();
  std::vector<int64_t> nodes(seeds, seeds + n_seeds);
  ids.reset(static_cast<size_t>(n_seeds) * 8);
  for (int64_t i = 0; i < n_seeds; ++i) {
    bool inserted;
    int32_t local = ids.find_or_insert(seeds[i], static_cast<int32_t>(i), &inserted);
    if (!inserted || local != i) throw std::invalid_argument("a batch lists the same seed twice");
  }
  std::vector<int64_t> counts{n_seeds};
  std::vector<std::vector<int32_t>> indptrs(layers), indices(layers);
  std::vector<int64_t> picks, allowed;
  std::vector<std::pair<double, int64_t>> scratch;
  const bool restricted = o.partition_rows > 0 && mask != ~0ULL;
  for (size_t h = 0; h < layers; ++h) {
    const labor_keys keys(o, key, h);
    const int64_t n_dst = static_cast<int64_t>(nodes.size());
    auto& ptr = indptrs[h];
    auto& idx = indices[h];
    ptr.reserve(n_dst + 1);
    ptr.push_back(0);
    for (int64_t i = 0; i < n_dst; ++i) {
      const int64_t v = nodes[i];
      int64_t d = g.degree(v);
      // restricted: the positions of v's neighbours in the mask's partitions, and not along an excluded edge
      const int64_t* cand = nullptr;
      const bool excluding = excluded.any() && excluded.touches(v);
      if (restricted || excluding) {
        allowed.clear();
        for (int64_t j = 0; j < d; ++j) {
          const int64_t u = g.neighbour(v, j);
          if ((!restricted || (mask >> (u / o.partition_rows) & 1)) && !(excluding && excluded.has(u, v))) {
            allowed.push_back(j);
          }
        }
        cand = allowed.data();
        d = static_cast<int64_t>(allowed.size());
      }
      const int64_t k = fanouts[h] < 0 ? d : std::min<int64_t>(fanouts[h], d);
      if (k == d) {
        picks.resize(d);
        for (int64_t j = 0; j < d; ++j) picks[j] = j;
      } else if (o.labor) {
        choose_labor(g, v, cand, d, k, keys, scratch, picks);
      } else {
        choose(rng, d, k, picks);
      }
      for (int64_t j : picks) {
        const int64_t u = g.neighbour(v, cand ? cand[j] : j);
        bool inserted;
        int32_t local = ids.find_or_insert(u, static_cast<int32_t>(nodes.size()), &inserted);
        if (inserted) nodes.push_back(u);
        idx.push_back(local);
      }
      if (idx.size() > static_cast<size_t>(INT32_MAX)) throw std::length_error("a sampled block exceeds 2^31 edges");
      ptr.push_back(static_cast<int32_t>(idx.size()));
    }
    counts.push_back(static_cast<int64_t>(nodes.size()));
  }
  SampleRecord rec;
  std::vector<int64_t> header{static_cast<int64_t>(layers)};
  header.insert(header.end(), counts.begin(), counts.end());
  for (auto& idx : indices) header.push_back(static_cast<int64_t>(idx.size()));
  append(rec.bytes, header.data(), header.size());
  append(rec.bytes, nodes.data(), nodes.size());
  for (size_t h = 0; h < layers; ++h) {
    append(rec.bytes, indptrs[h].data(), indptrs[h].size());
    append(rec.bytes, indices[h].data(), indices[h].size());
  }
  rec.bytes.resize((rec.bytes.size() + 7) / 8 * 8, 0);
  return rec;
}

// Runs sample(b, scratch) for every batch on num_threads threads (each with its own scratch); a batch's record
// depends on its key alone, so any assignment of batches to threads gives the same records.
template <typename MakeScratch, typename Sample>
std::vector<SampleRecord> in_parallel(const std::vector<uint64_t>& batch_keys, int num_threads, MakeScratch make,
                                      Sample sample) {
  const size_t batches = batch_keys.size();
  std::vector<SampleRecord> out(batches);
  std::vector<std::string> errors(batches);
  const size_t threads = std::max<size_t>(1, std::min<size_t>(num_threads, batches));
  auto work = [&](size_t t) {
    auto scratch = make();
    for (size_t b = t; b < batches; b += threads) {
      try {
        out[b] = sample(b, scratch);
      } catch (const std::exception& e) {
        errors[b] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (size_t b = 0; b < batches; ++b) {
    if (!errors[b].empty()) throw std::runtime_error("batch " + std::to_string(batch_keys[b]) + ": " + errors[b]);
  }
  return out;
}

SampleRecord sample_hetero_one(const std::vector<HeteroRelation>& relations, int num_types, int target_type,
                               const int64_t* seeds, const int32_t* seed_types, int64_t n_seeds, uint64_t key,
                               const std::vector<std::vector<int64_t>>& fanouts, const sampling_options& o,
                               std::vector<LocalIds>& ids) {
  const size_t layers = fanouts.size(), nrel = relations.size();
  Rng rng(o.seed, key);
  std::vector<std::vector<int64_t>> nodes(num_types);
  for (int t = 0; t < num_types; ++t) ids[t].reset(t == target_type ? static_cast<size_t>(n_seeds) * 8 : 64);
  for (int64_t i = 0; i < n_seeds; ++i) {
    const int t = seed_types ? seed_types[i] : target_type;
    bool inserted;
    const auto local = static_cast<int32_t>(nodes[t].size());
    if (ids[t].find_or_insert(seeds[i], local, &inserted) != local || !inserted) {
      throw std::invalid_argument("a batch lists the same seed twice");
    }
    nodes[t].push_back(seeds[i]);
  }
  std::vector<int64_t> counts;  // n[h][t], h = 0..L
  std::vector<std::vector<int32_t>> indptrs(layers * nrel), indices(layers * nrel);
  std::vector<int64_t> picks;
  std::vector<std::pair<double, int64_t>> scratch;
  for (size_t h = 0; h < layers; ++h) {
    std::vector<int64_t> known(num_types);  // the destinations of hop h: what was known when it began
    for (int t = 0; t < num_types; ++t) known[t] = static_cast<int64_t>(nodes[t].size());
    counts.insert(counts.end(), known.begin(), known.end());
    for (size_t r = 0; r < nrel; ++r) {
      const HeteroRelation& rel = relations[r];
      const CscView& g = *rel.graph;
      auto& ptr = indptrs[h * nrel + r];
      auto& idx = indices[h * nrel + r];
      std::vector<int64_t>& src_nodes = nodes[rel.src_type];
      // LABOR per relation: a destination keeps its k sources of smallest variate, the variates one per source
      // node of the hop, so relations into a type pick overlapping sources of a type they share.
      const labor_keys keys(o, key, h, static_cast<uint64_t>(rel.src_type));
      ptr.assign(1, 0);
      for (int64_t i = 0; i < known[rel.dst_type]; ++i) {
        const int64_t v = nodes[rel.dst_type][i];
        const int64_t d = g.degree(v), f = fanouts[h][r];
        const int64_t k = f < 0 ? d : std::min<int64_t>(f, d);
        if (k == d) {
          picks.resize(d);
          for (int64_t j = 0; j < d; ++j) picks[j] = j;
        } else if (o.labor) {
          choose_labor(g, v, nullptr, d, k, keys, scratch, picks);
        } else {
          choose(rng, d, k, picks);
        }
        for (int64_t j : picks) {
          const int64_t u = g.neighbour(v, j);
          bool inserted;
          const int32_t local = ids[rel.src_type].find_or_insert(u, static_cast<int32_t>(src_nodes.size()), &inserted);
          if (inserted) src_nodes.push_back(u);
          idx.push_back(local);
        }
        if (idx.size() > static_cast<size_t>(INT32_MAX)) throw std::length_error("a sampled block exceeds 2^31 edges");
        ptr.push_back(static_cast<int32_t>(idx.size()));
      }
    }
  }
  for (int t = 0; t < num_types; ++t) counts.push_back(static_cast<int64_t>(nodes[t].size()));
  std::vector<int64_t> header{static_cast<int64_t>(layers), num_types, static_cast<int64_t>(nrel)};
  header.insert(header.end(), counts.begin(), counts.end());
  for (const auto& idx : indices) header.push_back(static_cast<int64_t>(idx.size()));
  SampleRecord rec;
  append(rec.bytes, header.data(), header.size());
  for (const auto& n : nodes) append(rec.bytes, n.data(), n.size());
  for (size_t i = 0; i < indptrs.size(); ++i) {
    append(rec.bytes, indptrs[i].data(), indptrs[i].size());
    append(rec.bytes, indices[i].data(), indices[i].size());
  }
  rec.bytes.resize((rec.bytes.size() + 7) / 8 * 8, 0);
  return rec;
}

}  // namespace

CscView::CscView(const std::string& indptr_path, const std::string& indices_path, int64_t num_nodes,
                 int64_t num_edges, int indices_bytes_per_id)
    : num_nodes_(num_nodes), wide_(indices_bytes_per_id == 8) {
  if (indices_bytes_per_id != 4 && indices_bytes_per_id != 8) {
    throw std::invalid_argument("indices must be int32 or int64");
  }
  indptr_ = static_cast<const int64_t*>(
      map_file(indptr_path, static_cast<size_t>(num_nodes + 1) * sizeof(int64_t), &indptr_map_bytes_));
  try {
    indices_ = map_file(indices_path, static_cast<size_t>(num_edges) * indices_bytes_per_id, &indices_map_bytes_);
  } catch (...) {
    ::munmap(const_cast<int64_t*>(indptr_), indptr_map_bytes_);
    throw;
  }
  if (indptr_[num_nodes] != num_edges) {
    throw std::runtime_error(indptr_path + ": last pointer differs from num_edges");
  }
}

CscView::~CscView() {
  if (indptr_map_bytes_) ::munmap(const_cast<int64_t*>(indptr_), indptr_map_bytes_);
  if (indices_map_bytes_) ::munmap(const_cast<void*>(indices_), indices_map_bytes_);
}

std::vector<double> labor_variates(const sampling_options& options, uint64_t step, size_t hop, const int64_t* ids,
                                   size_t count, int node_type) {
  const labor_keys keys(options, step, hop, static_cast<uint64_t>(node_type));
  std::vector<double> r(count);
  for (size_t i = 0; i < count; ++i) r[i] = 0.5 * std::erfc(-keys(ids[i]) / std::sqrt(2.0));
  return r;
}

std::vector<SampleRecord> sample_batches(const CscView& graph, const int64_t* seeds,
                                         const std::vector<int64_t>& batch_offsets,
                                         const std::vector<uint64_t>& batch_keys, const sampling_options& options,
                                         int num_threads) {
  if (options.batch_dependency < 1) throw std::invalid_argument("batch_dependency must be at least 1");
  const size_t batches = batch_keys.size();
  if (batch_offsets.size() != batches + 1) throw std::invalid_argument("need one offset per batch plus one");
  if (!options.exclude_offsets.empty() && options.exclude_offsets.size() != batches + 1) {
    throw std::invalid_argument("need one exclusion offset per batch plus one");
  }
  if (!options.batch_masks.empty() && options.batch_masks.size() != batches) {
    throw std::invalid_argument("need one partition mask per batch");
  }
  if (!options.batch_masks.empty() && (options.partition_rows < 1 ||
                                       (graph.num_nodes() - 1) / options.partition_rows >= 64)) {
    throw std::invalid_argument("partition masks need 1 to 64 partitions of partition_rows >= 1 nodes");
  }
  for (size_t b = 0; b < batches; ++b) {
    for (int64_t i = batch_offsets[b]; i < batch_offsets[b + 1]; ++i) {
      if (seeds[i] < 0 || seeds[i] >= graph.num_nodes()) {
        throw std::out_of_range("seed " + std::to_string(seeds[i]) + " is not a node id");
      }
    }
  }
  return in_parallel(batch_keys, num_threads, [] { return LocalIds(1024); }, [&](size_t b, LocalIds& ids) {
    const bool ex = !options.exclude_offsets.empty();
    const Excluded excluded(ex ? options.exclude_pairs + 2 * options.exclude_offsets[b] : nullptr,
                            ex ? options.exclude_offsets[b + 1] - options.exclude_offsets[b] : 0);
    return sample_one(graph, seeds + batch_offsets[b], batch_offsets[b + 1] - batch_offsets[b], batch_keys[b],
                      options, options.batch_masks.empty() ? ~0ULL : options.batch_masks[b], excluded, ids);
  });
}

std::vector<SampleRecord> sample_hetero_batches(const std::vector<HeteroRelation>& relations, int num_types,
                                                int target_type, const int64_t* seeds, const int32_t* seed_types,
                                                const std::vector<int64_t>& batch_offsets,
                                                const std::vector<uint64_t>& batch_keys,
                                                const std::vector<std::vector<int64_t>>& fanouts,
                                                const sampling_options& options, int num_threads) {
  if (options.batch_dependency < 1) throw std::invalid_argument("batch_dependency must be at least 1");
  if (batch_offsets.size() != batch_keys.size() + 1) throw std::invalid_argument("need one offset per batch plus one");
  if (target_type < 0 || target_type >= num_types) throw std::invalid_argument("target type out of range");
  for (const auto& r : relations) {
    if (r.src_type < 0 || r.src_type >= num_types || r.dst_type < 0 || r.dst_type >= num_types) {
      throw std::invalid_argument("a relation's type is out of range");
    }
  }
  for (const auto& f : fanouts) {
    if (f.size() != relations.size()) throw std::invalid_argument("need one fanout per relation at every hop");
  }
  std::vector<int64_t> sizes(num_types, -1);  // a type's node count, where a relation ends in it
  for (const auto& r : relations) sizes[r.dst_type] = r.graph->num_nodes();
  for (int64_t i = 0; i < batch_offsets.back(); ++i) {
    const int t = seed_types ? seed_types[i] : target_type;
    if (t < 0 || t >= num_types) throw std::out_of_range("a seed's type is out of range");
    if (seeds[i] < 0 || (sizes[t] >= 0 && seeds[i] >= sizes[t])) {
      throw std::out_of_range("seed " + std::to_string(seeds[i]) + " is not a node of its type");
    }
  }
  using TypedIds = std::vector<LocalIds>;
  return in_parallel(batch_keys, num_threads, [&] { return TypedIds(num_types, LocalIds(1024)); },
                     [&](size_t b, TypedIds& ids) {
    return sample_hetero_one(relations, num_types, target_type, seeds + batch_offsets[b],
                             seed_types ? seed_types + batch_offsets[b] : nullptr,
                             batch_offsets[b + 1] - batch_offsets[b], batch_keys[b], fanouts, options, ids);
  });
}

}  // namespace diskgnn
