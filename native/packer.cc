#include "packer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "aligned_buffer.h"
#include "file_io.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace diskgnn {

namespace {

constexpr uint64_t block = file_io::block_bytes;
constexpr uint64_t staging_share_of_pack = 16;  // staging buffers hold at most 1/16 of a pack's bytes

using file_io::align_down;
using file_io::align_up;
using file_io::errno_text;
using file_io::fd_guard;

using steady = std::chrono::steady_clock;

uint64_t nanos_since(steady::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t).count());
}

// Every buffer of one pack, carved from one anonymous mapping (transparent
// huge pages where the kernel gives them: faulting in a gigabyte of 4 KiB
// pages is slow on some VMs).
class arena {
 public:
  explicit arena(uint64_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, bytes_, MADV_HUGEPAGE);
    base_ = static_cast<uint8_t*>(p);
  }
  ~arena() {
    if (base_) ::munmap(base_, bytes_);
  }
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  /// bytes: a multiple of 4096, so that every buffer stays aligned for O_DIRECT.
  uint8_t* take(uint64_t bytes) {
    if (used_ + bytes > bytes_) throw std::logic_error("packer: arena overrun");
    uint8_t* p = base_ + used_;
    used_ += bytes;
    return p;
  }

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t used_ = 0;
};


struct opened_file {
  int fd = -1;
  bool direct = false;
  std::string why_buffered;  // empty when direct
};

// The file opened again with O_DIRECT where its first block transfers that way, else `buffered`
// (the same file opened without it). A full or failing disk is an error, not a reason to buffer.
opened_file with_direct(fd_guard& buffered, const std::string& path, int flags, bool probe, direct_mode mode) {
  opened_file result;
  result.why_buffered = "direct I/O switched off";
  if (mode != direct_mode::off) {
    file_io::direct_open d = file_io::open_direct(path, flags, probe);
    if (d.fd >= 0) {
      result.fd = d.fd;
      result.direct = true;
      result.why_buffered.clear();
      return result;
    }
    const int e = d.error_number;
    if (e == ENOSPC || e == EDQUOT || e == EIO) throw io_error(path, 0, e, d.why);
    result.why_buffered = d.why;
    if (mode == direct_mode::on) throw io_error(path, 0, e, d.why + " (direct I/O required)");
  }
  result.fd = buffered.release();
  return result;
}

// The feature file, with O_DIRECT where a first block reads that way (some
// file systems take O_DIRECT at open and refuse the reads).
opened_file open_features(const std::string& path, uint64_t need_bytes, direct_mode mode) {
  fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    throw io_error(path, 0, e, "cannot open: " + errno_text(e));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) throw std::invalid_argument(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) < need_bytes) {
    throw short_file_error(path + ": " + std::to_string(st.st_size) + " bytes, the feature rows need " +
                           std::to_string(need_bytes) + ": file shorter than expected");
  }
  return with_direct(fd, path, O_RDONLY, true, mode);
}

// The pack file, created at its full size (space reserved up front where the
// file system can, so that a full disk fails before the pass, not during it),
// with O_DIRECT where a first block writes that way. That block is rewritten
// by the region starting at offset 0.
opened_file open_pack(const std::string& path, uint64_t size, direct_mode mode) {
  fd_guard fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int e = errno;
    throw io_error(path, 0, e, "cannot create: " + errno_text(e));
  }
  if (size > 0) {
    int e = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
    if (e == EOPNOTSUPP || e == EINVAL) e = ::ftruncate(fd.get(), static_cast<off_t>(size)) == 0 ? 0 : errno;
    if (e != 0) throw io_error(path, 0, e, "cannot reserve " + std::to_string(size) + " bytes: " + errno_text(e));
  }
  return with_direct(fd, path, O_WRONLY, size >= block, mode);
}

struct region_state {
  const int64_t* ids = nullptr;
  uint64_t count = 0;
  uint64_t cursor = 0;       // rows gathered so far
  uint64_t file_offset = 0;  // where the region starts in the pack
  uint64_t padded_bytes = 0;
  uint64_t flushed = 0;      // bytes handed to the writers
  uint8_t* buf = nullptr;    // staging: the bytes after `flushed`
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t hashed = 0;       // bytes of buf already fed to the hash
  bool pooled = false;       // buf is a full-size buffer swapped with the spares
};

struct write_job {
  uint8_t* buf;
  uint64_t length;
  uint64_t offset;
  bool pooled;  // back to the spares once written
};

struct chunk_slot {
  uint8_t* data = nullptr;
  uint64_t chunk = 0;   // chunk index
  uint64_t base = 0;    // file offset of data[0]
};

// Sizes every buffer from pack_memory: two chunk buffers, one staging buffer
// per non-empty region (the whole padded region when it is at most
// `staging`), and `spares` buffers of `staging` bytes to switch to while a
// full one is written.
struct buffer_plan {
  uint64_t chunk_rows = 0;
  uint64_t chunk_buffer = 0;
  uint64_t staging = 0;
  uint64_t spares = 0;
  uint64_t total = 0;
};

class packer {
 public:
  packer(const std::string& features_path, uint64_t num_rows, uint64_t row_bytes, const int64_t* ids,
         size_t num_ids, const int64_t* starts, const int64_t* offsets, size_t num_regions,
         const std::string& out_path, const packer_options& options)
      : features_path_(features_path),
        out_path_(out_path),
        num_rows_(num_rows),
        row_bytes_(row_bytes),
        options_(options) {
    check_options();
    validate(ids, num_ids, starts, offsets, num_regions);
    plan_buffers();
  }

  ~packer() { stop_threads(); }

  pack_result run();

 private:
  void check_options() const;
  void validate(const int64_t* ids, size_t num_ids, const int64_t* starts, const int64_t* offsets,
                size_t num_regions);
  void plan_buffers();
  uint64_t staging_bytes(uint64_t staging, uint64_t* spares) const;
  uint64_t chunk_buffer_bytes(uint64_t rows) const { return align_up(rows * row_bytes_) + block; }

  void reader_loop();
  void writer_loop();
  void gather_worker(unsigned index);
  void gather_regions();
  void gather(region_state& r, const chunk_slot& chunk, uint64_t hi);
  void hand_off(region_state& r, XXH3_state_t& hash);
  void finish_region(size_t index);
  uint8_t* take_spare();
  void submit(const write_job& job);
  void fail(std::exception_ptr error);
  void stop_threads();
  void rethrow_if_failed();

  const std::string features_path_;
  const std::string out_path_;
  const uint64_t num_rows_;
  const uint64_t row_bytes_;
  const packer_options options_;

  std::vector<region_state> regions_;
  std::vector<XXH3_state_t> hashes_;
  std::vector<uint64_t> needed_chunks_;  // chunk indices holding a row some region needs
  uint64_t file_bytes_ = 0;
  buffer_plan plan_;
  std::unique_ptr<arena> arena_;
  int in_fd_ = -1;
  int out_fd_ = -1;
  fd_guard in_guard_, out_guard_;

  // Everything below is shared between threads and guarded by mutex_.
  std::mutex mutex_;
  bool abort_ = false;
  std::exception_ptr error_;
  std::atomic<bool> aborting_{false};  // abort_, readable without the lock
  // chunks: the reader fills free slots in order, the gather takes them in order
  std::vector<chunk_slot> free_slots_;
  std::deque<chunk_slot> full_slots_;
  std::condition_variable slot_cv_;
  // gather: each round the threads take regions of the current chunk
  const chunk_slot* current_ = nullptr;
  uint64_t current_hi_ = 0;
  std::atomic<size_t> next_region_{0};
  uint64_t round_ = 0;
  unsigned busy_workers_ = 0;
  bool stopping_ = false;
  std::condition_variable round_cv_, round_done_cv_;
  // writes: the queue, the spare buffers and the writers
  std::deque<write_job> jobs_;
  std::vector<uint8_t*> spares_;
  bool closing_ = false;
  std::condition_variable job_cv_, spare_cv_;
  uint64_t bytes_written_ = 0;
  uint64_t writes_ = 0;
  std::atomic<uint64_t> buffer_wait_ns_{0};

  std::thread reader_;
  std::vector<std::thread> writers_, workers_;
};

void packer::check_options() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument("pack: " + what); };
  if (row_bytes_ == 0) bad("row_bytes must be positive");
  uint64_t total;
  if (__builtin_mul_overflow(num_rows_, row_bytes_, &total) || total > (uint64_t{1} << 62)) {
    bad("num_rows * row_bytes overflows");
  }
  if (options_.chunk_bytes == 0) bad("chunk_bytes must be positive");
  if (options_.threads < 1 || options_.threads > 256) bad("threads must be in [1, 256]");
  if (options_.write_depth < 1 || options_.write_depth > 256) bad("write_depth must be in [1, 256]");
  if (options_.max_write_bytes < block) bad("max_write_bytes must be at least 4096");
}

void packer::validate(const int64_t* ids, size_t num_ids, const int64_t* starts, const int64_t* offsets,
                      size_t num_regions) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("pack: " + what); };
  if (starts[0] != 0) bad("region 0 must start at id 0 (starts[0] = " + std::to_string(starts[0]) + ")");
  if (static_cast<uint64_t>(starts[num_regions]) != num_ids) {
    bad("the regions cover " + std::to_string(starts[num_regions]) + " ids, the id array holds " +
        std::to_string(num_ids));
  }
  if (offsets[0] != 0) bad("region 0 must start at byte 0 of the pack (offsets[0] = " + std::to_string(offsets[0]) + ")");
  regions_.resize(num_regions);
  for (size_t r = 0; r < num_regions; ++r) {
    if (starts[r + 1] < starts[r]) bad("region " + std::to_string(r) + " ends before it starts (starts not ascending)");
    region_state& s = regions_[r];
    s.ids = ids + starts[r];
    s.count = static_cast<uint64_t>(starts[r + 1] - starts[r]);
    s.file_offset = static_cast<uint64_t>(offsets[r]);
    s.padded_bytes = align_up(s.count * row_bytes_);
    if (offsets[r + 1] < offsets[r] || static_cast<uint64_t>(offsets[r + 1] - offsets[r]) != s.padded_bytes) {
      bad("region " + std::to_string(r) + " has " + std::to_string(s.count) + " rows of " + std::to_string(row_bytes_) +
          " bytes = " + std::to_string(s.padded_bytes) + " bytes padded, but offsets[" + std::to_string(r + 1) +
          "] - offsets[" + std::to_string(r) + "] = " + std::to_string(offsets[r + 1] - offsets[r]));
    }
    for (uint64_t i = 0; i < s.count; ++i) {
      const int64_t id = s.ids[i];
      if (id < 0 || static_cast<uint64_t>(id) >= num_rows_) {
        bad("region " + std::to_string(r) + ": id " + std::to_string(id) + " is out of range for " +
            std::to_string(num_rows_) + " rows");
      }
      if (i > 0 && id <= s.ids[i - 1]) {
        bad("region " + std::to_string(r) + ": ids are not strictly ascending (" + std::to_string(s.ids[i - 1]) +
            " then " + std::to_string(id) + ")");
      }
    }
  }
  file_bytes_ = static_cast<uint64_t>(offsets[num_regions]);
}

// Staging bytes for buffers of `staging` bytes, and the spares that takes.
uint64_t packer::staging_bytes(uint64_t staging, uint64_t* spares) const {
  uint64_t total = 0;
  bool any_pooled = false;
  for (const region_state& r : regions_) {
    if (r.count == 0) continue;
    total += std::min(staging, r.padded_bytes);
    any_pooled |= r.padded_bytes > staging;
  }
  *spares = any_pooled ? options_.write_depth : 0;
  return total + *spares * staging;
}

void packer::plan_buffers() {
  const uint64_t memory = options_.pack_memory;
  uint64_t max_region = 0;
  for (const region_state& r : regions_) max_region = std::max(max_region, r.padded_bytes);
  // A full buffer must hold a row after its unaligned tail, so that every hand-off writes at least a block.
  const uint64_t min_staging = align_up(row_bytes_) + block;
  uint64_t spares;
  // The least staging: the smallest buffers with their spares, or whole regions and no spares where that is less.
  const uint64_t whole = std::max(min_staging, max_region);
  const uint64_t min_staging_total = std::min(staging_bytes(min_staging, &spares), staging_bytes(whole, &spares));
  const uint64_t min_chunk = chunk_buffer_bytes(1);
  const uint64_t minimum = 2 * min_chunk + min_staging_total;
  if (memory < minimum) {
    size_t busy = 0;
    for (const region_state& r : regions_) busy += r.count > 0;
    throw pack_memory_error("pack: pack_memory of " + std::to_string(memory) + " bytes is below the packer's minimum of " +
                              std::to_string(minimum) + " bytes (two one-row feature chunks of " +
                              std::to_string(min_chunk) + " bytes and staging for " + std::to_string(busy) +
                              " non-empty regions of " + std::to_string(row_bytes_) + "-byte rows); raise it");
  }
  // Chunks: up to chunk_bytes, an eighth of the memory each, leaving the staging minimum.
  uint64_t chunk_cap = std::min(options_.chunk_bytes, memory / 8);
  chunk_cap = std::min(chunk_cap, (memory - min_staging_total) / 2 - block);
  plan_.chunk_rows = std::max<uint64_t>(1, chunk_cap / row_bytes_);
  plan_.chunk_rows = std::min(plan_.chunk_rows, std::max<uint64_t>(1, num_rows_));
  while (plan_.chunk_rows > 1 && 2 * chunk_buffer_bytes(plan_.chunk_rows) + min_staging_total > memory) {
    plan_.chunk_rows /= 2;
  }
  plan_.chunk_buffer = chunk_buffer_bytes(plan_.chunk_rows);
  // No region writes before its buffer is full, so the pass reads without writing until the
  // buffers fill: a fixed stretch of the memory's size, not the pack's. Staging at most a
  // sixteenth of the pack keeps it proportional (W1 at 2M nodes, 2.9 GB of packs: 944 MiB of
  // buffers packed at 1.45 s per million nodes, 384 MiB at 1.0 s, as fast as 16M with 1.5 GiB).
  const uint64_t avail = std::min(memory - 2 * plan_.chunk_buffer,
                                  std::max(min_staging_total, file_bytes_ / staging_share_of_pack));
  // Staging: the largest buffers that fit, at most max_write_bytes.
  const uint64_t cap = std::max(min_staging, align_down(std::min(options_.max_write_bytes, max_region)));
  uint64_t best = min_staging;
  if (cap >= max_region && staging_bytes(whole, &spares) <= avail) {
    best = whole;  // every region fits its buffer: no spares
  } else if (staging_bytes(min_staging, &spares) > avail) {
    best = whole;  // only whole regions fit (fewer bytes than the smallest buffers and their spares)
  } else {
    // Below max_region there are spares and the total grows with the size.
    uint64_t lo = min_staging / block, hi = std::max(lo, std::min(cap, max_region > block ? max_region - block : block) / block);
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (staging_bytes(mid * block, &spares) <= avail) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    best = lo * block;
  }
  plan_.staging = best;
  plan_.total = 2 * plan_.chunk_buffer + staging_bytes(best, &plan_.spares);
}

// Thrown in a thread that waits when another thread has failed; the first error is what the caller sees.
struct aborted {};

void packer::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = error;
    abort_ = true;
    aborting_ = true;
  }
  slot_cv_.notify_all();
  job_cv_.notify_all();
  spare_cv_.notify_all();
}

void packer::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void packer::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    abort_ = true;
    aborting_ = true;
  }
  round_cv_.notify_all();
  slot_cv_.notify_all();
  job_cv_.notify_all();
  spare_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  for (std::thread& t : writers_) {
    if (t.joinable()) t.join();
  }
}

void packer::reader_loop() {
  try {
    for (const uint64_t c : needed_chunks_) {
      chunk_slot slot;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        slot_cv_.wait(lock, [&] { return abort_ || !free_slots_.empty(); });
        if (abort_) return;
        slot = free_slots_.back();
        free_slots_.pop_back();
      }
      const uint64_t lo = c * plan_.chunk_rows;
      const uint64_t hi = std::min(num_rows_, lo + plan_.chunk_rows);
      slot.chunk = c;
      slot.base = align_down(lo * row_bytes_);
      const uint64_t need = hi * row_bytes_ - slot.base;
      file_io::read_at_least(in_fd_, features_path_, slot.data, align_up(need), need, slot.base, "the feature rows need");
      {
        std::lock_guard<std::mutex> lock(mutex_);
        full_slots_.push_back(slot);
      }
      slot_cv_.notify_all();
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

void packer::writer_loop() {
  for (;;) {
    write_job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      job_cv_.wait(lock, [&] { return abort_ || closing_ || !jobs_.empty(); });
      if (abort_ || jobs_.empty()) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    try {
      file_io::write_all(out_fd_, out_path_, job.buf, job.length, job.offset);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes_written_ += job.length;
      ++writes_;
      if (job.pooled) spares_.push_back(job.buf);
    }
    if (job.pooled) spare_cv_.notify_one();
  }
}

void packer::submit(const write_job& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_) throw aborted{};
    jobs_.push_back(job);
  }
  job_cv_.notify_one();
}

uint8_t* packer::take_spare() {
  const auto start = steady::now();
  std::unique_lock<std::mutex> lock(mutex_);
  spare_cv_.wait(lock, [&] { return abort_ || !spares_.empty(); });
  if (abort_) throw aborted{};
  uint8_t* p = spares_.back();
  spares_.pop_back();
  buffer_wait_ns_ += nanos_since(start);
  return p;
}

// The region's buffer is full: its aligned prefix goes to the writers and the
// unaligned tail moves to a spare buffer, which becomes the region's.
void packer::hand_off(region_state& r, XXH3_state_t& hash) {
  XXH3_64bits_update(&hash, r.buf + r.hashed, r.used - r.hashed);
  const uint64_t aligned = align_down(r.used);
  if (!r.pooled || aligned == 0) throw std::logic_error("pack: a region outgrew its staging buffer");
  uint8_t* fresh = take_spare();
  const uint64_t tail = r.used - aligned;
  std::memcpy(fresh, r.buf + aligned, tail);
  submit({r.buf, aligned, r.file_offset + r.flushed, true});
  r.flushed += aligned;
  r.buf = fresh;
  r.used = r.hashed = tail;
}

// Appends the region's rows below `hi` from the chunk (runs of consecutive ids in one copy).
void packer::gather(region_state& r, const chunk_slot& chunk, uint64_t hi) {
  if (r.cursor == r.count || static_cast<uint64_t>(r.ids[r.cursor]) >= hi) return;
  XXH3_state_t& hash = hashes_[static_cast<size_t>(&r - regions_.data())];
  while (r.cursor < r.count) {
    const uint64_t id = static_cast<uint64_t>(r.ids[r.cursor]);
    if (id >= hi) break;
    const uint64_t room = (r.capacity - r.used) / row_bytes_;
    if (room == 0) {
      hand_off(r, hash);
      continue;
    }
    uint64_t n = 1;
    while (n < room && r.cursor + n < r.count && static_cast<uint64_t>(r.ids[r.cursor + n]) == id + n && id + n < hi) ++n;
    std::memcpy(r.buf + r.used, chunk.data + (id * row_bytes_ - chunk.base), n * row_bytes_);
    r.used += n * row_bytes_;
    r.cursor += n;
  }
  XXH3_64bits_update(&hash, r.buf + r.hashed, r.used - r.hashed);
  r.hashed = r.used;
}

void packer::gather_regions() {
  for (;;) {
    if (aborting_.load(std::memory_order_relaxed)) return;
    const size_t r = next_region_.fetch_add(1, std::memory_order_relaxed);
    if (r >= regions_.size()) return;
    gather(regions_[r], *current_, current_hi_);
  }
}

void packer::gather_worker(unsigned) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      round_cv_.wait(lock, [&] { return stopping_ || round_ != seen; });
      if (stopping_) return;
      seen = round_;
    }
    try {
      gather_regions();
    } catch (const aborted&) {
    } catch (...) {
      fail(std::current_exception());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_workers_ == 0) round_done_cv_.notify_all();
  }
}

// Hashes and writes what is left of region r, zero-padded to its end.
void packer::finish_region(size_t index) {
  region_state& r = regions_[index];
  XXH3_64bits_update(&hashes_[index], r.buf + r.hashed, r.used - r.hashed);
  r.hashed = r.used;
  if (r.cursor != r.count) throw std::logic_error("pack: a region missed rows");
  const uint64_t length = align_up(r.used);
  if (r.flushed + length != r.padded_bytes) throw std::logic_error("pack: a region's bytes do not add up");
  if (length == 0) return;
  std::memset(r.buf + r.used, 0, length - r.used);
  submit({r.buf, length, r.file_offset + r.flushed, false});
  r.flushed += length;
}

pack_result packer::run() {
  pack_result result;
  double read_wait_s = 0;
  steady::time_point sync_start = steady::now();
  try {
    opened_file in = open_features(features_path_, num_rows_ * row_bytes_, options_.direct);
    in_guard_.reset(in.fd);
    in_fd_ = in.fd;
    opened_file out = open_pack(out_path_, file_bytes_, options_.direct);
    out_guard_.reset(out.fd);
    out_fd_ = out.fd;
    result.read_direct = in.direct;
    result.write_direct = out.direct;
    result.read_fallback_reason = in.why_buffered;
    result.write_fallback_reason = out.why_buffered;

    const uint64_t num_chunks = num_rows_ == 0 ? 0 : (num_rows_ + plan_.chunk_rows - 1) / plan_.chunk_rows;
    std::vector<uint8_t> needed(num_chunks, 0);
    for (const region_state& r : regions_) {
      for (uint64_t i = 0; i < r.count; ++i) needed[static_cast<uint64_t>(r.ids[i]) / plan_.chunk_rows] = 1;
    }
    for (uint64_t c = 0; c < num_chunks; ++c) {
      if (needed[c]) needed_chunks_.push_back(c);
    }

    arena_ = std::make_unique<arena>(plan_.total);
    for (int i = 0; i < 2; ++i) free_slots_.push_back({arena_->take(plan_.chunk_buffer), 0, 0});
    hashes_.resize(regions_.size());
    for (size_t i = 0; i < regions_.size(); ++i) {
      region_state& r = regions_[i];
      XXH3_64bits_reset(&hashes_[i]);
      if (r.count == 0) continue;
      r.pooled = r.padded_bytes > plan_.staging;
      r.capacity = std::min(r.padded_bytes, plan_.staging);
      r.buf = arena_->take(r.capacity);
    }
    for (uint64_t i = 0; i < plan_.spares; ++i) spares_.push_back(arena_->take(plan_.staging));

    for (unsigned i = 0; i < options_.write_depth; ++i) writers_.emplace_back([this] { writer_loop(); });
    for (unsigned i = 1; i < options_.threads; ++i) workers_.emplace_back([this, i] { gather_worker(i); });
    reader_ = std::thread([this] { reader_loop(); });

    for (size_t k = 0; k < needed_chunks_.size(); ++k) {
      chunk_slot slot;
      {
        const auto start = steady::now();
        std::unique_lock<std::mutex> lock(mutex_);
        slot_cv_.wait(lock, [&] { return abort_ || !full_slots_.empty(); });
        if (abort_) break;
        slot = full_slots_.front();
        full_slots_.pop_front();
        read_wait_s += static_cast<double>(nanos_since(start)) * 1e-9;
        current_ = &slot;
        current_hi_ = std::min(num_rows_, (slot.chunk + 1) * plan_.chunk_rows);
        next_region_ = 0;
        busy_workers_ = static_cast<unsigned>(workers_.size());
        ++round_;
      }
      round_cv_.notify_all();
      try {
        gather_regions();
      } catch (const aborted&) {
      } catch (...) {
        fail(std::current_exception());
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        round_done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
        current_ = nullptr;
        free_slots_.push_back(slot);
      }
      slot_cv_.notify_all();
    }
    rethrow_if_failed();
    sync_start = steady::now();
    for (size_t i = 0; i < regions_.size(); ++i) finish_region(i);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    job_cv_.notify_all();
    for (std::thread& t : writers_) t.join();
    rethrow_if_failed();
    if (::fsync(out_fd_) != 0) {
      const int e = errno;
      throw io_error(out_path_, 0, e, "fsync failed: " + errno_text(e));
    }
  } catch (const aborted&) {
  } catch (...) {
    fail(std::current_exception());
  }
  stop_threads();
  rethrow_if_failed();

  result.checksums.reserve(hashes_.size());
  for (XXH3_state_t& h : hashes_) result.checksums.push_back(XXH3_64bits_digest(&h));
  result.chunk_bytes = plan_.chunk_rows * row_bytes_;
  result.staging_bytes = plan_.staging;
  result.buffer_bytes = plan_.total;
  for (const uint64_t c : needed_chunks_) {
    const uint64_t lo = c * plan_.chunk_rows;
    const uint64_t hi = std::min(num_rows_, lo + plan_.chunk_rows);
    result.bytes_read += align_up(hi * row_bytes_) - align_down(lo * row_bytes_);
  }
  result.bytes_written = bytes_written_;
  result.writes = writes_;
  result.read_wait_s = read_wait_s;
  result.buffer_wait_s = static_cast<double>(buffer_wait_ns_.load()) * 1e-9;
  result.sync_s = static_cast<double>(nanos_since(sync_start)) * 1e-9;
  return result;
}

}  // namespace

pack_result pack_regions(const std::string& features_path, uint64_t num_rows, uint64_t row_bytes, const int64_t* ids,
                         size_t num_ids, const int64_t* starts, const int64_t* offsets, size_t num_regions,
                         const std::string& out_path, const packer_options& options) {
  packer p(features_path, num_rows, row_bytes, ids, num_ids, starts, offsets, num_regions, out_path, options);
  return p.run();
}

}  // namespace diskgnn
