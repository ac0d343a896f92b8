// Description: reads are coalesced as promised: rows sharing or touching
// blocks become one read, gaps are not read, duplicates are read once,
// no read exceeds the size limit, and aligned spans skip the bounce buffer.
#include <cstdio>
#include <vector>

#include "aligned_buffer.h"
#include "check.h"
#include "read_plan.h"

using diskgnn::byte_range;
using diskgnn::detail::plan_reads;
using diskgnn::detail::read_plan;


static read_plan plan(std::vector<byte_range> ranges, uint64_t max_request = 1 << 20, uint64_t gap = 0,
                      const uint8_t* out = reinterpret_cast<const uint8_t*>(8)) {
  diskgnn::detail::sort_by_offset(ranges);
  return plan_reads(ranges, {max_request, gap}, out);
}

static std::vector<byte_range> rows(const std::vector<uint64_t>& ids, uint64_t row_bytes) {
  std::vector<byte_range> r;
  for (size_t i = 0; i < ids.size(); ++i) r.push_back({ids[i] * row_bytes, row_bytes, i * row_bytes});
  return r;
}

int main() {
  // 512-byte rows 0..7 share block 0; row 8 starts block 1 (touching): one read.
  read_plan p = plan(rows({3, 0, 8, 7}, 512));
  CHECK(p.ops.size() == 1);
  CHECK(p.ops[0].file_offset == 0 && p.ops[0].length == 8192 && p.ops[0].need == 9 * 512);

  // A one-block gap is not read unless allowed.
  p = plan(rows({0, 16}, 512));
  CHECK(p.ops.size() == 2);
  p = plan(rows({0, 16}, 512), 1 << 20, 4096);
  CHECK(p.ops.size() == 1 && p.ops[0].length == 3 * 4096);

  // Duplicates: one read, one copy per output row.
  p = plan(rows({5, 5, 5}, 100));
  CHECK(p.ops.size() == 1 && p.ops[0].length == 4096);
  CHECK(p.copies.size() == 3);

  // Consecutive rows become one copy.
  p = plan(rows({0, 1, 2, 3}, 3));
  CHECK(p.ops.size() == 1 && p.copies.size() == 1 && p.copies[0].len == 12);

  // 4097-byte rows straddle blocks; reads never exceed the limit.
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 100; ++i) ids.push_back(i);
  p = plan(rows(ids, 4097), 16384);
  uint64_t covered = 0;
  for (const auto& op : p.ops) {
    CHECK(op.length <= 16384 && op.length % 4096 == 0 && op.file_offset % 4096 == 0);
    CHECK(op.file_offset == covered);  // contiguous, no block read twice
    covered = op.file_offset + op.length;
  }
  CHECK(covered >= 100 * 4097);
  uint64_t copied = 0;
  for (const auto& c : p.copies) copied += c.len;
  CHECK(copied == 100 * 4097);

  // A large aligned range into aligned memory is read straight into it, in pieces.
  diskgnn::aligned_buffer out(3 << 20, 4096);
  p = plan({{1 << 20, 3 << 20, 0}}, 1 << 20, 0, out.data());
  CHECK(p.ops.size() == 3);
  for (const auto& op : p.ops) CHECK(op.into_destination && op.need == op.length);
  // ... but not into memory off a block boundary, nor when only part of a read is needed.
  p = plan({{1 << 20, 3 << 20, 0}}, 1 << 20, 0, out.data() + 1);
  for (const auto& op : p.ops) CHECK(!op.into_destination);
  p = plan({{0, 100, 0}}, 1 << 20, 0, out.data());
  CHECK(p.ops.size() == 1 && !p.ops[0].into_destination && p.ops[0].need == 100);

  // Overlapping ranges: the second starts inside a piece of the first that
  // was already closed, so it gets a read of its own.
  p = plan({{0, 3 << 20, 0}, {(1 << 20) + 10, 100, 3 << 20}});
  CHECK(p.ops.size() == 4);
  for (const auto& op : p.ops) {
    for (size_t i = op.copy_begin; i < op.copy_end; ++i) CHECK(p.copies[i].src + p.copies[i].len <= op.need);
    CHECK(op.need <= op.length);
  }

  // Nothing to read.
  CHECK(plan({}).ops.empty());
  CHECK(plan({{4096, 0, 0}}).ops.empty());

  return test_result();
}
