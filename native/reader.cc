#include "reader.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <vector>

#include "file_io.h"
#include "read_engine.h"

namespace diskgnn {

io_error::io_error(const std::string& path, uint64_t offset, int error_number, const std::string& detail)
    : std::runtime_error(path + ": " + detail + " (errno " + std::to_string(error_number) + ")"),
      path_(path),
      offset_(offset),
      error_number_(error_number),
      detail_(detail) {}

read_ticket::read_ticket(std::shared_ptr<detail::read_request> request) : request_(std::move(request)) {}

read_ticket::~read_ticket() {
  if (!request_) return;  // moved from
  try {
    request_->wait();
  } catch (...) {
    // Nobody asked for the result; what matters here is that no read
    // writes into the output after this returns.
  }
}

void read_ticket::wait() const { request_->wait(); }

bool read_ticket::done() const { return request_->is_done(); }

namespace {

using file_io::block_bytes;

bool memory_backed(int fd) {
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return false;
  return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

std::invalid_argument closed_reader(const std::string& path) {
  return std::invalid_argument(path + ": I/O on a closed reader");
}

void check_options(const std::string& path, const reader_options& o) {
  auto bad = [&](const std::string& what) { throw std::invalid_argument(path + ": " + what); };
  if (o.backend != "auto" && o.backend != "io_uring" && o.backend != "pread") {
    bad("unknown backend '" + o.backend + "' (use auto, io_uring or pread)");
  }
  if (o.queue_depth < 1 || o.queue_depth > 1024) bad("queue_depth must be in [1, 1024]");
  if (o.num_rings < 1 || o.num_rings > 64) bad("num_rings must be in [1, 64]");
  if (o.submit_batch < 1) bad("submit_batch must be at least 1");
  if (o.max_request_bytes < block_bytes || o.max_request_bytes % block_bytes != 0 ||
      o.max_request_bytes > (64u << 20)) {
    bad("max_request_bytes must be a multiple of 4096 in [4096, 64 MiB]");
  }
  if (o.max_gap_bytes > o.max_request_bytes) bad("max_gap_bytes must not exceed max_request_bytes");
}

}  // namespace

file_reader::file_reader(const std::string& path, const reader_options& options)
    : path_(path), options_(options), counters_(std::make_unique<detail::io_counters>()) {
  check_options(path, options);
  file_io::fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    throw io_error(path, 0, e, "cannot open: " + file_io::errno_text(e));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) throw std::invalid_argument(path + ": not a regular file");
  file_size_ = static_cast<uint64_t>(st.st_size);

  const bool want_uring = options.backend != "pread";
  const bool direct_required =
      options.backend == "io_uring" || (options.backend == "pread" && options.direct == direct_mode::on);
  bool try_direct = options.backend == "io_uring" || options.direct != direct_mode::off;
  std::string why_buffered = "direct I/O switched off";
  if (try_direct && !direct_required && memory_backed(fd.get())) {
    // The page cache is the storage there: bypassing it gains nothing.
    try_direct = false;
    why_buffered = "the file is on a memory-backed file system (tmpfs or ramfs)";
  }
  if (try_direct) {
    file_io::direct_open d = file_io::open_direct(path, O_RDONLY, file_size_ > 0);
    if (d.fd >= 0) {
      fd.reset(d.fd);
      direct_ = true;
    } else if (direct_required) {
      throw io_error(path, 0, d.error_number,
                     d.why + "; backend '" + options.backend + "' with direct I/O needs it (use backend 'auto')");
    } else {
      why_buffered = d.why;
    }
  }

  const detail::file_handle handle{fd.get(), path_, direct_ ? file_io::block_bytes : 1};
  if (want_uring && direct_) {
    try {
      engine_ = detail::make_uring_engine(handle, options, *counters_);
      backend_ = "io_uring";
    } catch (const std::runtime_error& e) {
      if (options.backend == "io_uring") throw std::runtime_error(path + ": io_uring backend unavailable: " + e.what());
      fallback_reason_ = std::string("io_uring unavailable: ") + e.what();
    }
  } else if (want_uring) {
    fallback_reason_ = "no O_DIRECT: " + why_buffered;
  }
  if (!engine_) {
    engine_ = detail::make_pread_engine(handle, options, *counters_);
    backend_ = "pread";
  }
  fd_ = fd.release();
}

file_reader::~file_reader() { close(); }

void file_reader::close() {
  if (::getpid() != owner_) {
    // Inherited across fork (a DataLoader worker collecting its parent's reader): the engine's threads live
    // only in the parent, so stopping them here would wait forever. The engine is left to this process's exit;
    // closing this process's copy of the fd leaves the parent's reader as it is.
    (void)engine_.release();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return;
  }
  std::lock_guard<std::mutex> lock(engine_mutex_);
  engine_.reset();  // finishes every queued read first
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void file_reader::check_open() const {
  std::lock_guard<std::mutex> lock(engine_mutex_);
  if (!engine_) throw closed_reader(path_);
}

read_stats file_reader::stats() const {
  read_stats s;
  s.reads = counters_->reads.load(std::memory_order_relaxed);
  s.bytes = counters_->bytes.load(std::memory_order_relaxed);
  return s;
}

read_ticket file_reader::submit_gather(const int64_t* ids, size_t count, uint64_t row_bytes, uint64_t base_offset,
                                       uint64_t num_rows, void* out, size_t out_bytes) {
  check_open();
  if (row_bytes == 0) throw std::invalid_argument(path_ + ": row_bytes must be positive");
  uint64_t needed;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), row_bytes, &needed) || needed > out_bytes) {
    throw std::invalid_argument(path_ + ": the output holds " + std::to_string(out_bytes) + " bytes; " +
                                std::to_string(count) + " rows of " + std::to_string(row_bytes) + " bytes need more");
  }
  std::vector<byte_range> ranges(count);
  for (size_t i = 0; i < count; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || static_cast<uint64_t>(id) >= num_rows) {
      throw std::out_of_range(path_ + ": row id " + std::to_string(id) + " (at position " + std::to_string(i) +
                              ") is out of range for " + std::to_string(num_rows) + " rows");
    }
    uint64_t offset;
    uint64_t end;
    if (__builtin_mul_overflow(static_cast<uint64_t>(id), row_bytes, &offset) ||
        __builtin_add_overflow(offset, base_offset, &offset) || __builtin_add_overflow(offset, row_bytes, &end) ||
        end > file_size_) {
      throw short_file_error(path_ + ": row " + std::to_string(id) + " of " + std::to_string(row_bytes) +
                             " bytes lies past the end of the file (" + std::to_string(file_size_) +
                             " bytes): file shorter than expected");
    }
    ranges[i] = byte_range{offset, row_bytes, i * row_bytes};
  }
  return start(std::move(ranges), static_cast<uint8_t*>(out));
}

read_ticket file_reader::submit_ranges(const byte_range* ranges, size_t count, void* out, size_t out_bytes) {
  check_open();
  std::vector<byte_range> sorted(ranges, ranges + count);
  for (const byte_range& r : sorted) {
    uint64_t end;
    if (__builtin_add_overflow(r.file_offset, r.length, &end) || end > file_size_) {
      throw short_file_error(path_ + ": range of " + std::to_string(r.length) + " bytes at offset " +
                             std::to_string(r.file_offset) + " lies past the end of the file (" +
                             std::to_string(file_size_) + " bytes): file shorter than expected");
    }
    if (__builtin_add_overflow(r.dst_offset, r.length, &end) || end > out_bytes) {
      throw std::invalid_argument(path_ + ": range of " + std::to_string(r.length) + " bytes to output offset " +
                                  std::to_string(r.dst_offset) + " does not fit the output of " +
                                  std::to_string(out_bytes) + " bytes");
    }
  }
  return start(std::move(sorted), static_cast<uint8_t*>(out));
}

read_ticket file_reader::start(std::vector<byte_range> ranges, uint8_t* out) {
  detail::sort_by_offset(ranges);
  auto request = std::make_shared<detail::read_request>(
      detail::plan_reads(ranges, {options_.max_request_bytes, options_.max_gap_bytes}, out), out);
  if (!request->plan.ops.empty()) {
    std::lock_guard<std::mutex> lock(engine_mutex_);
    if (!engine_) throw closed_reader(path_);
    engine_->submit(request);
  }
  return read_ticket(std::move(request));
}

}  // namespace diskgnn
