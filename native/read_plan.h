// Turns byte ranges into the aligned reads that fetch them.
//
// O_DIRECT reads must start and end on block boundaries, and the device pays
// per request far more than per byte for small reads, so ranges are sorted by
// offset and every range whose blocks overlap or touch the current read joins
// it, up to max_request_bytes. Gaps are never read unless max_gap_bytes allows
// it: reading unneeded blocks costs bandwidth that random gathers lack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "file_io.h"
#include "reader.h"

namespace diskgnn::detail {

using file_io::align_down;
using file_io::align_up;
using file_io::block_bytes;

/// Bytes [src, src + len) of a read go to [dst, dst + len) of the output.
struct copy_span {
  uint64_t src;
  uint64_t dst;
  uint64_t len;
};

struct read_op {
  uint64_t file_offset;  ///< multiple of block_bytes
  uint64_t length;       ///< multiple of block_bytes, at most max_request_bytes
  /// End of the last byte a copy uses, relative to file_offset. The read may
  /// run past the end of the file (its last block is partial); it has done
  /// its job once it returned this many bytes.
  uint64_t need;
  size_t copy_begin;  ///< this read's copies are copies[copy_begin, copy_end)
  size_t copy_end;
  /// The read covers exactly one aligned destination span, so it goes
  /// straight into the output: no bounce buffer, no copy.
  bool into_destination;
};

struct read_plan {
  std::vector<read_op> ops;
  std::vector<copy_span> copies;
};

struct plan_limits {
  uint64_t max_request_bytes;
  uint64_t max_gap_bytes;
};

/// @brief Sorts ranges by file offset unless they already are.
void sort_by_offset(std::vector<byte_range>& ranges);

/// @param sorted ranges sorted by file_offset (overlaps and duplicates allowed).
/// @param out the output buffer: decides which reads may go straight into it.
read_plan plan_reads(const std::vector<byte_range>& sorted, const plan_limits& limits, const uint8_t* out);

}  // namespace diskgnn::detail
