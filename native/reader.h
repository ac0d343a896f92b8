// Reads rows and byte ranges of one file into caller memory, asynchronously.
//
// A gather turns row ids into byte ranges, sorts them by file offset and
// coalesces ranges that share or touch 4 KiB blocks into aligned requests of
// at most max_request_bytes (see read_plan.h). Requests run on one of two
// engines:
//   io_uring: O_DIRECT reads through rings owned by worker threads;
//   pread:    a pool of threads, one blocking pread in flight per thread,
//             O_DIRECT where the file system supports it, else buffered.
// Every submit returns a read_ticket; the caller keeps computing and waits
// on the ticket later, so several batches can be in flight at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace diskgnn {

/// @brief Bytes [file_offset, file_offset + length) of the file go to
/// bytes [dst_offset, dst_offset + length) of the output.
struct byte_range {
  uint64_t file_offset;
  uint64_t length;
  uint64_t dst_offset;
};

/// @brief A read or open the operating system refused: names the file, the
/// offset and errno.
class io_error : public std::runtime_error {
 public:
  /// @param detail What failed, without the path, e.g. "read of 4096 bytes at offset 0".
  io_error(const std::string& path, uint64_t offset, int error_number, const std::string& detail);
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }
  int error_number() const { return error_number_; }
  /// @brief The message without the path, for APIs that carry the path apart (Python's OSError).
  const std::string& detail() const { return detail_; }

 private:
  std::string path_;
  uint64_t offset_;
  int error_number_;
  std::string detail_;
};

/// @brief The file ends before bytes a read needs: a truncated file or the
/// wrong file. Never reported as zeros.
class short_file_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class direct_mode {
  automatic,  ///< O_DIRECT where the file system supports it
  on,         ///< O_DIRECT or fail
  off,        ///< through the page cache
};

/// Every number here is set by the caller (Python passes diskgnn/defaults.py's
/// values); zero is refused, so none has a second default in C++.
struct reader_options {
  /// "auto": io_uring when the kernel allows it and O_DIRECT works on the
  /// file's file system, else pread; "io_uring"; "pread".
  std::string backend = "auto";
  /// For pread only: io_uring always reads with O_DIRECT.
  direct_mode direct = direct_mode::automatic;
  /// Reads in flight per ring (io_uring) or pread threads (pread). Each
  /// holds a bounce buffer of max_request_bytes, so the engine allocates
  /// queue_depth * num_rings * max_request_bytes.
  unsigned queue_depth = 0;
  /// io_uring rings, each with its own worker thread; a request's reads are
  /// split evenly among them. One ring saturates a device unless the copies
  /// out of the bounce buffers are what limits.
  unsigned num_rings = 0;
  /// io_uring: reads are handed to the kernel as soon as this many are
  /// prepared, so the device gets refills while completions are processed.
  unsigned submit_batch = 0;
  /// Largest single read; a multiple of 4096.
  uint64_t max_request_bytes = 0;
  /// Unneeded bytes a read may span to join two neighbouring reads into one.
  uint64_t max_gap_bytes = 0;
  /// Register bounce buffers and the file with each ring, which spares the
  /// kernel pinning pages and looking up the file on every read. Silently
  /// skipped where registration fails (e.g. RLIMIT_MEMLOCK).
  bool register_buffers = false;
};

struct read_stats {
  uint64_t reads = 0;  ///< reads issued, including resubmissions after short reads
  uint64_t bytes = 0;  ///< bytes the reads returned
};

namespace detail {
struct read_request;
class read_engine;
struct io_counters;
}  // namespace detail

/// @brief A submitted read: wait() blocks until it is done.
///
/// The output buffer must outlive the read; the destructor waits for it so
/// that memory is never written after its ticket is gone.
class read_ticket {
 public:
  explicit read_ticket(std::shared_ptr<detail::read_request> request);
  read_ticket(read_ticket&& other) noexcept = default;
  read_ticket& operator=(read_ticket&&) = delete;
  read_ticket(const read_ticket&) = delete;
  read_ticket& operator=(const read_ticket&) = delete;
  ~read_ticket();

  /// @brief Blocks until every read finished; throws the first error (again on each call).
  void wait() const;
  bool done() const;

 private:
  std::shared_ptr<detail::read_request> request_;
};

class file_reader {
 public:
  /// @throws io_error when the file cannot be opened or the requested backend
  ///         cannot read it; std::invalid_argument for bad options.
  file_reader(const std::string& path, const reader_options& options);
  ~file_reader();
  file_reader(const file_reader&) = delete;
  file_reader& operator=(const file_reader&) = delete;

  /// @brief Reads rows `ids` (each row_bytes long, row r at byte
  /// base_offset + r * row_bytes) into out, row i of the output from ids[i].
  /// ids are copied before this returns; out must stay valid until the ticket is done.
  /// @throws std::out_of_range for an id outside [0, num_rows);
  ///         short_file_error when a row lies past the end of the file;
  ///         std::invalid_argument when out is too small.
  read_ticket submit_gather(const int64_t* ids, size_t count, uint64_t row_bytes, uint64_t base_offset,
                            uint64_t num_rows, void* out, size_t out_bytes);

  /// @throws short_file_error when a range lies past the end of the file;
  ///         std::invalid_argument when a destination lies outside out.
  read_ticket submit_ranges(const byte_range* ranges, size_t count, void* out, size_t out_bytes);

  /// @brief Finishes every submitted read, then releases the file and the engine.
  void close();

  const std::string& path() const { return path_; }
  /// "io_uring" or "pread".
  const std::string& backend() const { return backend_; }
  bool direct() const { return direct_; }
  uint64_t file_size() const { return file_size_; }
  /// Why "auto" did not get io_uring with O_DIRECT; empty when it did or was not asked.
  const std::string& fallback_reason() const { return fallback_reason_; }
  read_stats stats() const;

 private:
  read_ticket start(std::vector<byte_range> ranges, uint8_t* out);
  void check_open() const;

  std::string path_;
  reader_options options_;
  int fd_ = -1;
  pid_t owner_ = ::getpid();  // the process whose threads the engine runs on (a forked child has none)
  uint64_t file_size_ = 0;
  std::string backend_;
  bool direct_ = false;
  std::string fallback_reason_;
  std::unique_ptr<detail::io_counters> counters_;
  // Held while handing a request to the engine and while closing, so that a
  // close from another thread never frees the engine under a submit.
  mutable std::mutex engine_mutex_;
  std::unique_ptr<detail::read_engine> engine_;
};

}  // namespace diskgnn
