#include "read_plan.h"

#include <algorithm>

namespace diskgnn::detail {

void sort_by_offset(std::vector<byte_range>& ranges) {
  auto by_offset = [](const byte_range& a, const byte_range& b) { return a.file_offset < b.file_offset; };
  if (!std::is_sorted(ranges.begin(), ranges.end(), by_offset)) {
    std::sort(ranges.begin(), ranges.end(), by_offset);
  }
}

namespace {

class planner {
 public:
  planner(const plan_limits& limits, const uint8_t* out) : limits_(limits), out_(out) {}

  void add(const byte_range& range) {
    uint64_t off = range.file_offset;
    const uint64_t end = off + range.length;
    uint64_t dst = range.dst_offset;
    // A range longer than one read is cut at the read's size limit; its
    // pieces land in consecutive reads.
    while (off < end) {
      const uint64_t block = align_down(off, block_bytes);
      if (open_ && !joins(block, off)) close();
      if (!open_) {
        cur_ = read_op{block, 0, 0, plan_.copies.size(), 0, false};
        open_ = true;
      }
      const uint64_t piece_end = std::min(end, cur_.file_offset + limits_.max_request_bytes);
      add_copy(copy_span{off - cur_.file_offset, dst, piece_end - off});
      cur_.length = std::max(cur_.length, align_up(piece_end, block_bytes) - cur_.file_offset);
      cur_.need = std::max(cur_.need, piece_end - cur_.file_offset);
      dst += piece_end - off;
      off = piece_end;
    }
  }

  read_plan finish() {
    if (open_) close();
    return std::move(plan_);
  }

 private:
  // Whether bytes starting at `off` (in block `block`) can be served by the
  // open read: its blocks overlap or touch (within the allowed gap) and the
  // read has room left before its size limit.
  bool joins(uint64_t block, uint64_t off) const {
    const uint64_t cur_end = cur_.file_offset + cur_.length;
    return block >= cur_.file_offset && block <= cur_end + limits_.max_gap_bytes &&
           off < cur_.file_offset + limits_.max_request_bytes;
  }

  // Consecutive rows (or touching ranges) become one memcpy.
  void add_copy(const copy_span& c) {
    if (plan_.copies.size() > cur_.copy_begin) {
      copy_span& last = plan_.copies.back();
      if (last.src + last.len == c.src && last.dst + last.len == c.dst) {
        last.len += c.len;
        return;
      }
    }
    plan_.copies.push_back(c);
  }

  void close() {
    cur_.copy_end = plan_.copies.size();
    const copy_span& first = plan_.copies[cur_.copy_begin];
    cur_.into_destination = cur_.copy_end - cur_.copy_begin == 1 && first.src == 0 &&
                            first.len == cur_.length &&
                            reinterpret_cast<uintptr_t>(out_ + first.dst) % block_bytes == 0;
    plan_.ops.push_back(cur_);
    open_ = false;
  }

  plan_limits limits_;
  const uint8_t* out_;
  read_plan plan_;
  read_op cur_{};
  bool open_ = false;
};

}  // namespace

read_plan plan_reads(const std::vector<byte_range>& sorted, const plan_limits& limits, const uint8_t* out) {
  planner p(limits, out);
  for (const byte_range& r : sorted) p.add(r);
  return p.finish();
}

}  // namespace diskgnn::detail
