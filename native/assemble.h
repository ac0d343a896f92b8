// A batch's feature rows put in place from the places that hold them, in one multi-threaded pass.
//
// A batch's input rows come from several places: a memory tier's table (by slot), its pack region and its
// segment's rows (contiguous, in the order of their batch positions), the rows an earlier batch read. The
// CPU path writes them all into the batch's matrix; the GPU path gathers a host tier's rows into a pinned
// staging buffer that crosses to the device as one copy. Either is this one call: the sources are checked
// first, then threads take equal shares of all the rows, each row one memcpy.
#pragma once

#include <cstdint>
#include <vector>

namespace diskgnn {

/// @brief Rows of one place: row `slots[i]` of `rows` (slots null: row i) goes to row `positions[i]` of
/// the output (positions null: row first + i).
struct RowSource {
  const uint8_t* rows = nullptr;
  int64_t num_rows = 0;
  const int64_t* slots = nullptr;
  const int64_t* positions = nullptr;
  int64_t first = 0;
  int64_t count = 0;
};

/// @brief Copies every source's rows (each row_bytes long) into out (out_rows rows); throws
/// std::invalid_argument, before copying anything, where a slot or a position is out of range.
void assemble_rows(const std::vector<RowSource>& sources, int64_t row_bytes, uint8_t* out, int64_t out_rows,
                   int num_threads);

}  // namespace diskgnn
