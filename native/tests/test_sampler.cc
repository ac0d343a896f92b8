// Description: sampled blocks hold real, distinct neighbours, min(fanout, degree)
// of them, and the output is identical for 1 and 3 threads; for node-wise
// uniform sampling and for LABOR (with and without layer and batch dependency).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "sampler.h"

namespace {

template <typename T>
std::string write_file(const std::string& name, const std::vector<T>& v) {
  std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(v.data(), sizeof(T), v.size(), f);
  std::fclose(f);
  return path;
}

template <typename T>
const T* at(const std::vector<uint8_t>& b, size_t off) {
  return reinterpret_cast<const T*>(b.data() + off);
}

}  // namespace

int main() {
  // 199 nodes: node 0 isolated, node 1 a hub of degree 150, the rest random degree 0..12.
  const int64_t n = 199;
  std::mt19937_64 gen(7);
  std::vector<std::vector<int32_t>> adj(n);
  for (int64_t u = 2; u < 152; ++u) adj[1].push_back(static_cast<int32_t>(u));
  for (int64_t v = 2; v < n; ++v) {
    std::set<int32_t> nb;
    int deg = static_cast<int>(gen() % 13);
    while (static_cast<int>(nb.size()) < deg) nb.insert(static_cast<int32_t>(gen() % n));
    adj[v].assign(nb.begin(), nb.end());
  }
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (auto& a : adj) {
    indices.insert(indices.end(), a.begin(), a.end());
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  auto p1 = write_file("diskgnn_test_indptr.bin", indptr);
  auto p2 = write_file("diskgnn_test_indices.bin", indices);
  diskgnn::CscView g(p1, p2, n, static_cast<int64_t>(indices.size()), 4);

  std::vector<int64_t> seeds;
  std::vector<int64_t> offsets{0};
  std::vector<uint64_t> keys;
  for (int b = 0; b < 9; ++b) {  // batches of 1..17 seeds, including the hub and the isolated node
    std::set<int64_t> s{b == 0 ? 0 : 1};
    while (static_cast<int>(s.size()) < 1 + 2 * b) s.insert(static_cast<int64_t>(gen() % n));
    seeds.insert(seeds.end(), s.begin(), s.end());
    offsets.push_back(static_cast<int64_t>(seeds.size()));
    keys.push_back(static_cast<uint64_t>(b));
  }
  const std::vector<int64_t> fanouts{5, -1, 3};
  for (int mode = 0; mode < 4; ++mode) {  // uniform; LABOR; LABOR with layer dependency; LABOR with κ = 4
  diskgnn::sampling_options o;
  o.fanouts = fanouts;
  o.seed = 42;
  o.labor = mode > 0;
  o.layer_dependency = mode == 2;
  o.batch_dependency = mode == 3 ? 4 : 1;
  diskgnn::sampling_options o43 = o;
  o43.seed = 43;
  auto one = diskgnn::sample_batches(g, seeds.data(), offsets, keys, o, 1);
  auto three = diskgnn::sample_batches(g, seeds.data(), offsets, keys, o, 3);
  auto other = diskgnn::sample_batches(g, seeds.data(), offsets, keys, o43, 2);
  CHECK(one.size() == 9);
  bool any_difference = false;
  for (size_t b = 0; b < one.size(); ++b) {
    CHECK(one[b].bytes == three[b].bytes);
    any_difference |= one[b].bytes != other[b].bytes;
    const auto& r = one[b].bytes;
    const int64_t* h = at<int64_t>(r, 0);
    const int64_t layers = h[0];
    CHECK(layers == 3);
    const int64_t* cnt = h + 1;
    const int64_t* edges = h + 1 + layers + 1;
    CHECK(cnt[0] == offsets[b + 1] - offsets[b]);
    size_t off = sizeof(int64_t) * (1 + 2 * layers + 1);
    const int64_t* nodes = at<int64_t>(r, off);
    for (int64_t i = 0; i < cnt[0]; ++i) CHECK(nodes[i] == seeds[offsets[b] + i]);
    std::set<int64_t> distinct(nodes, nodes + cnt[layers]);
    CHECK(static_cast<int64_t>(distinct.size()) == cnt[layers]);
    off += sizeof(int64_t) * cnt[layers];
    for (int64_t l = 0; l < layers; ++l) {
      CHECK(cnt[l + 1] >= cnt[l]);
      const int32_t* ptr = at<int32_t>(r, off);
      const int32_t* idx = at<int32_t>(r, off + sizeof(int32_t) * (cnt[l] + 1));
      CHECK(ptr[cnt[l]] == edges[l]);
      for (int64_t i = 0; i < cnt[l]; ++i) {
        const auto& nb = adj[nodes[i]];
        const int64_t want = fanouts[l] < 0 ? static_cast<int64_t>(nb.size())
                                            : std::min<int64_t>(fanouts[l], static_cast<int64_t>(nb.size()));
        CHECK(ptr[i + 1] - ptr[i] == want);
        std::set<int64_t> seen;
        for (int32_t e = ptr[i]; e < ptr[i + 1]; ++e) {
          CHECK(idx[e] >= 0 && idx[e] < cnt[l + 1]);
          int64_t u = nodes[idx[e]];
          CHECK(std::binary_search(nb.begin(), nb.end(), static_cast<int32_t>(u)));
          CHECK(seen.insert(u).second);
        }
      }
      off += sizeof(int32_t) * (cnt[l] + 1 + edges[l]);
    }
    CHECK((off + 7) / 8 * 8 == r.size());
  }
  CHECK(any_difference);
  }
  diskgnn::sampling_options o;
  o.fanouts = fanouts;
  bool threw = false;
  std::vector<int64_t> bad{0, 0};
  try {
    diskgnn::sample_batches(g, bad.data(), {0, 2}, {0}, o, 1);
  } catch (const std::exception&) {
    threw = true;
  }
  CHECK(threw);
  return test_result();
}
