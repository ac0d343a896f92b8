#include "hag.h"

#include "aggregate.h"
#include "parallel.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace diskgnn {

Hag hag_search(const int64_t* indptr, const int64_t* indices, int64_t num_dst, int64_t num_src, int64_t capacity,
               int64_t min_shared, int max_depth, int64_t max_degree) {
  if (num_dst < 0 || num_src < 0 || capacity < 0 || indptr[0] != 0) throw std::invalid_argument("hag_search: bad block");
  min_shared = std::max<int64_t>(min_shared, 2);
  const int64_t ext = num_src + capacity;  // extended ids: sources, then aggregation nodes in creation order
  const auto key = [ext](int64_t a, int64_t b) { return a < b ? a * ext + b : b * ext + a; };
  std::vector<std::vector<int64_t>> lists(num_dst);
  std::vector<char> frozen(num_dst, 0);
  std::vector<std::vector<int32_t>> holders(num_src);  // destinations whose list held the id (some no longer do)
  // pair -> destinations whose lists hold both, for the pairs that two or more hold: a pair of sources only
  // loses destinations as merges go on, so one held by a single destination never matters.
  std::unordered_map<int64_t, int32_t> shared;
  std::vector<int64_t> pairs;
  Hag hag;
  hag.num_src = num_src;
  for (int64_t v = 0; v < num_dst; ++v) {
    if (indptr[v + 1] < indptr[v]) throw std::invalid_argument("hag_search: indptr must not decrease");
    auto& l = lists[v];
    l.assign(indices + indptr[v], indices + indptr[v + 1]);
    for (int64_t x : l) {
      if (x < 0 || x >= num_src) throw std::invalid_argument("hag_search: source id out of range");
    }
    std::sort(l.begin(), l.end());
    if (static_cast<int64_t>(l.size()) > max_degree || std::adjacent_find(l.begin(), l.end()) != l.end()) {
      frozen[v] = 1;  // a multiset or a hub: summed as it is
      ++hag.frozen;
      continue;
    }
    for (size_t i = 0; i < l.size(); ++i) {
      holders[l[i]].push_back(static_cast<int32_t>(v));
      for (size_t j = i + 1; j < l.size(); ++j) pairs.push_back(key(l[i], l[j]));
    }
  }
  std::sort(pairs.begin(), pairs.end());  // runs of equal pairs: a sort is cheaper than hashing every one
  for (size_t i = 0; i < pairs.size();) {
    size_t j = i + 1;
    while (j < pairs.size() && pairs[j] == pairs[i]) ++j;
    if (j - i >= 2) shared.emplace(pairs[i], static_cast<int32_t>(j - i));
    i = j;
  }
  std::vector<int64_t>().swap(pairs);
  std::priority_queue<std::pair<int32_t, int64_t>> heap;  // (count when pushed, pair); stale entries re-checked
  for (const auto& [k, c] : shared) {
    if (c >= min_shared) heap.emplace(c, k);
  }
  std::vector<int> depth(num_src, 0);
  std::vector<int64_t> fresh;
  while (!heap.empty() && static_cast<int64_t>(depth.size()) < ext) {
    auto [count, k] = heap.top();
    heap.pop();
    auto it = shared.find(k);
    const int32_t now = it == shared.end() ? 0 : it->second;
    if (now != count) {  // decreased since pushed
      if (now >= min_shared) heap.emplace(now, k);
      continue;
    }
    const int64_t u = k / ext, w = k % ext;
    const int d = std::max(depth[u], depth[w]) + 1;
    if (d > max_depth) continue;
    const int64_t a = static_cast<int64_t>(depth.size());
    depth.push_back(d);
    holders.emplace_back();
    hag.inputs.push_back(u);
    hag.inputs.push_back(w);
    fresh.clear();
    const auto& scan = holders[u].size() <= holders[w].size() ? holders[u] : holders[w];
    for (int32_t v : scan) {
      auto& l = lists[v];
      if (!std::binary_search(l.begin(), l.end(), u) || !std::binary_search(l.begin(), l.end(), w)) continue;
      l.erase(std::remove_if(l.begin(), l.end(), [u, w](int64_t x) { return x == u || x == w; }), l.end());
      for (int64_t x : l) {
        for (int64_t gone : {u, w}) {
          auto g = shared.find(key(x, gone));
          if (g != shared.end() && --g->second == 0) shared.erase(g);
        }
        ++shared[key(x, a)];
        fresh.push_back(key(x, a));
      }
      l.push_back(a);  // the largest id yet: the list stays sorted
      holders[a].push_back(v);
    }
    shared.erase(k);
    std::sort(fresh.begin(), fresh.end());
    fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
    for (int64_t f : fresh) {
      const int32_t c = shared[f];
      if (c >= min_shared) heap.emplace(c, f);
    }
  }
  // Number the aggregation nodes by level (creation order within one), so that each level reads earlier ones.
  const int64_t num_agg = static_cast<int64_t>(depth.size()) - num_src;
  std::vector<int64_t> order(num_agg);
  for (int64_t i = 0; i < num_agg; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return depth[num_src + x] < depth[num_src + y]; });
  std::vector<int64_t> renumber(num_agg);
  for (int64_t i = 0; i < num_agg; ++i) renumber[order[i]] = i;
  const auto id = [&](int64_t x) { return x < num_src ? x : num_src + renumber[x - num_src]; };
  std::vector<int64_t> inputs(2 * num_agg);
  for (int64_t i = 0; i < num_agg; ++i) {
    inputs[2 * i] = id(hag.inputs[2 * order[i]]);
    inputs[2 * i + 1] = id(hag.inputs[2 * order[i] + 1]);
  }
  hag.inputs = std::move(inputs);
  hag.level_bounds.push_back(0);
  for (int64_t i = 1; i <= num_agg; ++i) {
    if (i == num_agg || depth[num_src + order[i]] != depth[num_src + order[i - 1]]) hag.level_bounds.push_back(i);
  }
  hag.indptr.assign(1, 0);
  for (int64_t v = 0; v < num_dst; ++v) {
    if (frozen[v]) {
      hag.indices.insert(hag.indices.end(), indices + indptr[v], indices + indptr[v + 1]);
    } else {
      for (int64_t x : lists[v]) hag.indices.push_back(id(x));
    }
    hag.indptr.push_back(static_cast<int64_t>(hag.indices.size()));
  }
  return hag;
}

void hag_check(const Hag& hag) {
  const auto bad = [](const char* what) { throw std::invalid_argument(std::string("HAG: ") + what); };
  const int64_t num_agg = static_cast<int64_t>(hag.inputs.size()) / 2;
  const auto& lb = hag.level_bounds;
  if (hag.num_src < 0 || hag.inputs.size() % 2 || lb.empty() || lb.front() != 0 || lb.back() != num_agg) {
    bad("levels do not cover the aggregation nodes");
  }
  for (size_t l = 0; l + 1 < lb.size(); ++l) {
    if (lb[l + 1] < lb[l]) bad("level bounds decrease");
    for (int64_t k = lb[l]; k < lb[l + 1]; ++k) {
      for (int64_t x : {hag.inputs[2 * k], hag.inputs[2 * k + 1]}) {
        if (x < 0 || x >= hag.num_src + lb[l]) bad("an aggregation node reads a node of its own or a later level");
      }
    }
  }
  const auto& ptr = hag.indptr;
  if (ptr.empty() || ptr.front() != 0 || ptr.back() != static_cast<int64_t>(hag.indices.size())) {
    bad("indptr does not match the lists");
  }
  for (size_t i = 0; i + 1 < ptr.size(); ++i) {
    if (ptr[i + 1] < ptr[i]) bad("indptr decreases");
  }
  for (int64_t x : hag.indices) {
    if (x < 0 || x >= hag.num_src + num_agg) bad("a list names an id out of range");
  }
}

namespace {

AggNodes nodes_of(const Hag& hag, float* rows) {
  return {hag.inputs.data(), static_cast<int64_t>(hag.inputs.size()) / 2, rows};
}

}  // namespace

template <typename T>
void hag_sum(const Hag& hag, const T* src, int64_t dim, const float* scale, bool self_loop, float* agg, T* out,
             int num_threads) {
  const int64_t num_src = hag.num_src;
  const int64_t* in = hag.inputs.data();
  const auto add = [&](float* o, int64_t x) {
    if (x < num_src) {
      const T* s = src + x * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] += widen(s[c]);
    } else {
      const float* s = agg + (x - num_src) * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] += s[c];
    }
  };
  // A level's nodes read earlier levels only: one pass each, threads over its rows.
  for (size_t l = 0; l + 1 < hag.level_bounds.size(); ++l) {
    const int64_t lo = hag.level_bounds[l], n = hag.level_bounds[l + 1] - lo;
    const int parts = parts_for(2 * n * dim, num_threads);
    parallel_parts(parts, [&](int p) {
      for (int64_t k = lo + n * p / parts; k < lo + n * (p + 1) / parts; ++k) {
        float* o = agg + k * dim;
        std::fill(o, o + dim, 0.0f);
        add(o, in[2 * k]);
        add(o, in[2 * k + 1]);
      }
    });
  }
  csc_sum(hag.indptr.data(), hag.indices.data(), static_cast<int64_t>(hag.indptr.size()) - 1, src, num_src, dim,
          scale, self_loop, out, num_threads, nodes_of(hag, agg));
}

template <typename T>
void hag_sum_transpose(const Hag& hag, const T* grad_out, int64_t dim, const float* scale, bool self_loop,
                       float* grad_agg, T* grad_src, int num_threads) {
  csc_sum_transpose(hag.indptr.data(), hag.indices.data(), static_cast<int64_t>(hag.indptr.size()) - 1, grad_out,
                    hag.num_src, dim, scale, self_loop, grad_src, num_threads, nodes_of(hag, grad_agg));
}

template void hag_sum<float>(const Hag&, const float*, int64_t, const float*, bool, float*, float*, int);
template void hag_sum<bf16>(const Hag&, const bf16*, int64_t, const float*, bool, float*, bf16*, int);
template void hag_sum_transpose<float>(const Hag&, const float*, int64_t, const float*, bool, float*, float*, int);
template void hag_sum_transpose<bf16>(const Hag&, const bf16*, int64_t, const float*, bool, float*, bf16*, int);

}  // namespace diskgnn
