#include "assemble.h"

#include "parallel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace diskgnn {
namespace {

void check_ids(const int64_t* ids, int64_t count, int64_t bound, const char* what, size_t source) {
  if (ids == nullptr) return;
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= bound) {
      throw std::invalid_argument("assemble_rows: source " + std::to_string(source) + "'s " + what + " " +
                                  std::to_string(ids[i]) + " out of range [0, " + std::to_string(bound) + ")");
    }
  }
}

}  // namespace

void assemble_rows(const std::vector<RowSource>& sources, int64_t row_bytes, uint8_t* out, int64_t out_rows,
                   int num_threads) {
  std::vector<int64_t> starts(sources.size() + 1, 0);  // each source's first row among all the rows
  for (size_t s = 0; s < sources.size(); ++s) {
    const RowSource& src = sources[s];
    if (src.count < 0) throw std::invalid_argument("assemble_rows: a negative row count");
    if (src.slots == nullptr && src.count > src.num_rows) {
      throw std::invalid_argument("assemble_rows: source " + std::to_string(s) + " has " +
                                  std::to_string(src.num_rows) + " rows, " + std::to_string(src.count) + " asked");
    }
    check_ids(src.slots, src.count, src.num_rows, "slot", s);
    check_ids(src.positions, src.count, out_rows, "position", s);
    if (src.positions == nullptr && (src.first < 0 || src.first + src.count > out_rows)) {
      throw std::invalid_argument("assemble_rows: source " + std::to_string(s) + "'s rows [" +
                                  std::to_string(src.first) + ", " + std::to_string(src.first + src.count) +
                                  ") out of range [0, " + std::to_string(out_rows) + ")");
    }
    starts[s + 1] = starts[s] + src.count;
  }
  const int64_t total = starts.back();
  const int parts = parts_for(total * row_bytes / 16, num_threads);
  parallel_parts(parts, [&](int p) {
    const int64_t lo = total * p / parts, hi = total * (p + 1) / parts;
    size_t s = std::upper_bound(starts.begin(), starts.end(), lo) - starts.begin() - 1;
    for (int64_t k = lo; k < hi; ++s) {
      const RowSource& src = sources[s];
      const int64_t end = std::min(hi, starts[s + 1]);
      for (int64_t i = k - starts[s]; k < end; ++k, ++i) {
        const int64_t from = src.slots ? src.slots[i] : i;
        const int64_t to = src.positions ? src.positions[i] : src.first + i;
        std::memcpy(out + to * row_bytes, src.rows + from * row_bytes, static_cast<size_t>(row_bytes));
      }
    }
  });
}

}  // namespace diskgnn
