// Batched packing: one sequential pass over a feature file writes every
// region's rows contiguously into a pack file (layout: docs/format.md, "Pack files").
//
// The feature file is read front to back in large chunks (O_DIRECT where the
// file system takes it, else buffered) by a reader thread, one chunk ahead of
// the gather. Gather threads split the regions of each chunk among them: a
// region's ids are sorted, so its cursor only moves forwards, and the rows it
// takes from the chunk are appended to the region's staging buffer and hashed
// (XXH3-64, streaming). A full staging buffer hands its 4 KiB-aligned prefix to
// a pool of writer threads (O_DIRECT pwrite, else buffered) and continues in a
// spare buffer with the unaligned tail; a region's last write is zero-padded to
// 4 KiB. Every buffer comes out of pack_memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "reader.h"

namespace diskgnn {

/// @brief pack_memory cannot hold the packer's smallest buffers.
class pack_memory_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Every number here is set by the caller (Python passes diskgnn/defaults.py's
/// values); zero is refused, so none has a second default in C++.
struct packer_options {
  /// Largest feature chunk read at once. Each of the two chunk buffers also
  /// takes at most an eighth of pack_memory, and less where the staging
  /// buffers' minimum needs it.
  uint64_t chunk_bytes = 0;
  /// Bytes for the chunk buffers and every staging buffer together.
  uint64_t pack_memory = 0;
  /// Largest staging buffer, i.e. the largest single write.
  uint64_t max_write_bytes = 0;
  /// Gather threads, the caller's among them.
  unsigned threads = 0;
  /// Writer threads, i.e. writes in flight.
  unsigned write_depth = 0;
  /// O_DIRECT for the reads of the features and the writes of the packs.
  direct_mode direct = direct_mode::automatic;
};

struct pack_result {
  /// XXH3-64 (seed 0) of each region's rows, without the padding.
  std::vector<uint64_t> checksums;
  bool read_direct = false;
  bool write_direct = false;
  /// Why reads or writes went through the page cache; empty when they did not.
  std::string read_fallback_reason;
  std::string write_fallback_reason;
  uint64_t chunk_bytes = 0;     ///< feature bytes per chunk read
  uint64_t staging_bytes = 0;   ///< largest staging buffer
  uint64_t buffer_bytes = 0;    ///< chunk buffers and staging buffers allocated
  uint64_t bytes_read = 0;      ///< feature bytes read (chunks no region needs are skipped)
  uint64_t bytes_written = 0;   ///< pack bytes written, padding included
  uint64_t writes = 0;          ///< write requests
  double read_wait_s = 0;       ///< gather threads idle, waiting for a chunk
  double buffer_wait_s = 0;     ///< gather threads idle, waiting for a spare staging buffer
  double sync_s = 0;            ///< draining the last writes and fsync
};

/// @brief Writes the pack file `out_path` (created or truncated) from the
/// feature file, whose row i is bytes [i * row_bytes, (i + 1) * row_bytes).
/// Region r holds rows ids[starts[r]:starts[r+1]] (strictly ascending, each
/// < num_rows) at byte offsets[r] of the pack, zero-padded to offsets[r+1] =
/// offsets[r] + its size rounded up to 4096. The file is fsynced before this
/// returns.
/// @param ids num_ids row ids; starts and offsets: num_regions + 1 entries each,
///        starts[0] = 0, starts[num_regions] = num_ids, offsets[0] = 0.
/// @throws std::invalid_argument for inconsistent regions or options;
///         pack_memory_error when pack_memory cannot hold the smallest buffers;
///         io_error when a file cannot be opened, read, written or synced;
///         short_file_error when the feature file is shorter than num_rows rows.
pack_result pack_regions(const std::string& features_path, uint64_t num_rows, uint64_t row_bytes, const int64_t* ids,
                         size_t num_ids, const int64_t* starts, const int64_t* offsets, size_t num_regions,
                         const std::string& out_path, const packer_options& options);

}  // namespace diskgnn
