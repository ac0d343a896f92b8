// The portable engine: a pool of threads, each with one blocking pread in
// flight, so the pool size is the queue depth the device sees. Used where
// io_uring is unavailable, where O_DIRECT is not (tmpfs), and as the
// baseline io_uring is measured against.
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <thread>
#include <vector>

#include "aligned_buffer.h"
#include "read_engine.h"

namespace diskgnn::detail {
namespace {

class pread_engine final : public read_engine {
 public:
  pread_engine(const file_handle& file, const reader_options& options, io_counters& counters)
      : file_(file), counters_(counters) {
    for (unsigned i = 0; i < options.queue_depth; ++i) bounce_.emplace_back(options.max_request_bytes, block_bytes);
    threads_.reserve(options.queue_depth);
    try {
      for (unsigned i = 0; i < options.queue_depth; ++i) {
        threads_.emplace_back([this, i] { run(bounce_[i].data()); });
      }
    } catch (...) {
      stop();
      throw;
    }
  }

  ~pread_engine() override { stop(); }

  void submit(const std::shared_ptr<read_request>& request) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(work{request, 0});
    }
    cv_.notify_all();
  }

 private:
  struct work {
    std::shared_ptr<read_request> request;
    size_t next_op;
  };

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(uint8_t* bounce) {
    for (;;) {
      std::shared_ptr<read_request> request;
      size_t op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Stopping still drains the queue: callers' buffers are only
        // released once every op has finished.
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work& front = queue_.front();
        request = front.request;
        op = front.next_op++;
        if (front.next_op == request->plan.ops.size()) queue_.pop_front();
      }
      if (!request->failed.load(std::memory_order_acquire)) read(*request, request->plan.ops[op], bounce);
      request->finish_op();
    }
  }

  void read(read_request& request, const read_op& op, uint8_t* bounce) {
    uint8_t* target = read_target(request, op, bounce);
    uint64_t pos = 0;
    uint64_t done = 0;
    for (;;) {
      counters_.reads.fetch_add(1, std::memory_order_relaxed);
      const ssize_t got = ::pread(file_.fd, target + pos, op.length - pos, static_cast<off_t>(op.file_offset + pos));
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        request.fail(read_error(file_, op, pos, errno));
        return;
      }
      counters_.bytes.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
      switch (advance(op, static_cast<uint64_t>(got), file_.align, pos, done)) {
        case read_progress::complete:
          copy_out(request, op, target);
          return;
        case read_progress::end_of_file:
          request.fail(end_of_file_error(file_, op, done));
          return;
        case read_progress::again:
          break;
      }
    }
  }

  const file_handle file_;
  io_counters& counters_;
  std::vector<aligned_buffer> bounce_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<work> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<read_engine> make_pread_engine(const file_handle& file, const reader_options& options,
                                               io_counters& counters) {
  return std::make_unique<pread_engine>(file, options, counters);
}

}  // namespace diskgnn::detail
