// What the engines share: the request a ticket waits on, the engine
// interface, and the rules for short reads and copying out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "read_plan.h"
#include "reader.h"

namespace diskgnn::detail {

struct io_counters {
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> bytes{0};
};

/// One submitted gather or range read. Engines run its ops in any order and
/// on any thread; the last op to finish wakes the waiters.
struct read_request {
  read_request(read_plan p, uint8_t* out_buffer);

  /// Records the first error; later ops of this request are skipped.
  void fail(std::exception_ptr e);
  /// Called exactly once per op, whether it succeeded, failed or was skipped.
  void finish_op();
  void wait();
  bool is_done();

  const read_plan plan;
  uint8_t* const out;
  std::atomic<bool> failed{false};

 private:
  std::atomic<size_t> ops_left_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class read_engine {
 public:
  virtual ~read_engine() = default;
  /// @brief Queues every op of a request with at least one op.
  virtual void submit(const std::shared_ptr<read_request>& request) = 0;
};

/// How the open file is read, for the engines.
struct file_handle {
  int fd;
  std::string path;
  /// Offsets and lengths of resubmitted reads must stay on blocks under O_DIRECT.
  uint64_t align;
};

/// @brief The destructor finishes every queued op before it returns.
std::unique_ptr<read_engine> make_pread_engine(const file_handle& file, const reader_options& options,
                                               io_counters& counters);

/// @throws std::runtime_error naming why io_uring cannot be used here
///         (not compiled in, refused by the kernel).
std::unique_ptr<read_engine> make_uring_engine(const file_handle& file, const reader_options& options,
                                               io_counters& counters);

/// Where an op stands after a read returned.
enum class read_progress { complete, again, end_of_file };

/// @brief Accounts for `got` bytes read at op-relative position `pos`.
///
/// Reads may come back short (signals, the end of the file). After a short
/// read the remainder is read from the last aligned position (O_DIRECT
/// rejects unaligned offsets), so a read that brings nothing new means the
/// file ends before the bytes the op needs.
/// @param done bytes of the op known to be read; updated.
/// @param pos where the next read starts; updated when the result is `again`.
read_progress advance(const read_op& op, uint64_t got, uint64_t align, uint64_t& pos, uint64_t& done);

/// @brief Copies the op's rows out of the buffer it was read into.
void copy_out(const read_request& request, const read_op& op, const uint8_t* buffer);

/// @brief The memory a read of `op` goes into: the output itself or a bounce buffer.
uint8_t* read_target(const read_request& request, const read_op& op, uint8_t* bounce);

std::exception_ptr read_error(const file_handle& file, const read_op& op, uint64_t pos, int error_number);
std::exception_ptr end_of_file_error(const file_handle& file, const read_op& op, uint64_t done);

}  // namespace diskgnn::detail
