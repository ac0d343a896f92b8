// Threads over parts of a kernel's work, shared by the neighbour-sum kernels (aggregate.cc, hag.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace diskgnn {

/// @brief Runs fn(part) for part in [0, parts) on up to `parts` threads, the caller's included.
template <typename Fn>
void parallel_parts(int parts, Fn fn) {
  std::vector<std::thread> threads;
  for (int p = 1; p < parts; ++p) threads.emplace_back(fn, p);
  fn(0);
  for (auto& t : threads) t.join();
}

/// @brief Parts for `work` element operations: no thread for less than 64 Ki of them (small blocks are not
/// worth one), at most `num_threads`.
inline int parts_for(int64_t work, int num_threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads, work / (1 << 16))));
}

/// @brief Parts for work split by column ranges of `dim` columns: as parts_for, each range at least 16 wide.
inline int column_parts(int64_t work, int64_t dim, int num_threads) {
  return std::min(parts_for(work, num_threads), static_cast<int>(std::max<int64_t>(1, dim / 16)));
}

}  // namespace diskgnn
