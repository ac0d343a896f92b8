// The io_uring engine: O_DIRECT reads, queue_depth of them in flight per ring.
//
// Why a worker thread per ring rather than completions polled in wait():
// the training loop waits on batches in whatever order suits it and may
// wait late, so a ring polled only from wait() would sit idle (and its
// device queue drain) while Python computes. The worker keeps the queue full
// regardless, copies rows out of the bounce buffers as they arrive (on a
// second core, off the training thread), and is the only thread touching its
// ring, so the ring needs no lock and can be set up as single-issuer with
// deferred task work, which the kernel runs cheaper.
#include "read_engine.h"
#include "uring_support.h"

#ifdef DISKGNN_HAVE_LIBURING

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "aligned_buffer.h"

namespace diskgnn::detail {
namespace {

// io_uring_enter fails this way only when the engine itself is wrong (a bad
// ring, pointer or flag), never because of the file or the device: I/O
// errors arrive in completions. Carrying on could let the kernel write into
// buffers the caller was told are free, so stop here.
[[noreturn]] void engine_bug(const char* what, int error_number) {
  std::fprintf(stderr, "diskgnn: %s failed unexpectedly: %s\n", what, std::strerror(error_number));
  std::abort();
}

// Cheapest setup first: deferred task work lets completions be processed
// only when this (single) thread asks for them, instead of interrupting it.
// Older kernels reject the newer flags with EINVAL.
int init_ring(io_uring& ring, unsigned entries) {
  const unsigned candidates[] = {
#if defined(IORING_SETUP_SINGLE_ISSUER) && defined(IORING_SETUP_DEFER_TASKRUN)
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
#endif
#ifdef IORING_SETUP_COOP_TASKRUN
      IORING_SETUP_COOP_TASKRUN,
#endif
      0,
  };
  int rc = -EINVAL;
  for (unsigned flags : candidates) {
    io_uring_params params;
    std::memset(&params, 0, sizeof(params));
    params.flags = flags;
    rc = io_uring_queue_init_params(entries, &ring, &params);
    if (rc != -EINVAL) return rc;
  }
  return rc;
}

class uring_worker {
 public:
  struct work {
    std::shared_ptr<read_request> request;
    size_t next_op;
    size_t end_op;
  };

  uring_worker(const file_handle& file, const reader_options& options, io_counters& counters)
      : file_(file),
        counters_(counters),
        slot_bytes_(options.max_request_bytes),
        bounce_(options.queue_depth * options.max_request_bytes, block_bytes),
        slots_(options.queue_depth),
        submit_batch_(std::min(options.submit_batch, options.queue_depth)) {
    for (unsigned i = options.queue_depth; i-- > 0;) free_.push_back(i);
    // The ring is created on the worker thread: a single-issuer ring
    // belongs to the thread that created it.
    std::promise<std::string> setup;
    std::future<std::string> setup_result = setup.get_future();
    const bool register_buffers = options.register_buffers;
    thread_ = std::thread([this, &setup, register_buffers] { run(setup, register_buffers); });
    const std::string why = setup_result.get();
    if (!why.empty()) {
      thread_.join();
      throw std::runtime_error(why);
    }
  }

  ~uring_worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void enqueue(work w) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(w));
    }
    cv_.notify_one();
  }

 private:
  struct slot {
    std::shared_ptr<read_request> request;
    size_t op = 0;
    uint64_t pos = 0;   // op-relative offset of the read in flight
    uint64_t done = 0;  // op-relative bytes known read
    uint8_t* target = nullptr;
  };

  void run(std::promise<std::string>& setup, bool register_buffers) {
    const int rc = init_ring(ring_, static_cast<unsigned>(slots_.size()));
    if (rc < 0) {
      setup.set_value(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
      return;
    }
    if (register_buffers) {
      fixed_file_ = io_uring_register_files(&ring_, &file_.fd, 1) == 0;
      iovec iov{bounce_.data(), bounce_.size()};
      fixed_buffers_ = io_uring_register_buffers(&ring_, &iov, 1) == 0;
    }
    setup.set_value("");  // `setup` dies with the constructor's frame: not touched after this
    loop();
    io_uring_queue_exit(&ring_);
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (pending_.empty() && in_flight_ == 0) cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        while (!queue_.empty()) {
          pending_.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        // Stopping still drains: callers' buffers may be released only once
        // every read into them has completed.
        if (pending_.empty() && in_flight_ == 0) return;
      }
      start_ops();
      if (in_flight_ == 0) continue;
      submit_and_wait();
      reap();
    }
  }

  // Fills free slots with ops of pending requests.
  void start_ops() {
    while (!free_.empty() && !pending_.empty()) {
      work& w = pending_.front();
      read_request& request = *w.request;
      if (request.failed.load(std::memory_order_acquire)) {
        for (; w.next_op < w.end_op; ++w.next_op) request.finish_op();
        pending_.pop_front();
        continue;
      }
      const unsigned index = free_.back();
      free_.pop_back();
      slot& s = slots_[index];
      s.request = w.request;
      s.op = w.next_op++;
      s.pos = 0;
      s.done = 0;
      s.target = read_target(request, request.plan.ops[s.op], bounce_.data() + index * slot_bytes_);
      ++in_flight_;
      queue_read(index);
      if (w.next_op == w.end_op) pending_.pop_front();
    }
  }

  // Queues the read of the slot's op from s.pos on; the kernel gets it once
  // submit_batch_ reads are queued, or at the next submit_and_wait.
  void queue_read(unsigned index) {
    const slot& s = slots_[index];
    const read_op& op = s.request->plan.ops[s.op];
    // Never empty: each slot has at most one read queued or in flight and
    // the ring has an entry per slot.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) engine_bug("io_uring_get_sqe", EBUSY);
    const int fd = fixed_file_ ? 0 : file_.fd;
    const unsigned length = static_cast<unsigned>(op.length - s.pos);
    const uint64_t offset = op.file_offset + s.pos;
    if (fixed_buffers_ && !op.into_destination) {
      io_uring_prep_read_fixed(sqe, fd, s.target + s.pos, length, offset, 0);
    } else {
      io_uring_prep_read(sqe, fd, s.target + s.pos, length, offset);
    }
    if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, index);
    counters_.reads.fetch_add(1, std::memory_order_relaxed);
    if (io_uring_sq_ready(&ring_) >= submit_batch_) submit();
  }

  void submit() {
    const int rc = io_uring_submit(&ring_);
    // Refused entries stay queued; submit_and_wait hands them over again.
    if (rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY || rc == -ENOMEM) return;
    engine_bug("io_uring_submit", -rc);
  }

  void submit_and_wait() {
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc >= 0 || rc == -EINTR) return;
    if (rc == -EAGAIN || rc == -EBUSY || rc == -ENOMEM) {
      // The kernel is short of memory for requests: let completions free
      // some (reap follows), then the loop submits again.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      return;
    }
    engine_bug("io_uring_submit_and_wait", -rc);
  }

  // Completions are taken one at a time and each freed slot is refilled and
  // submitted (in batches of submit_batch_) straight away. Reaping a whole
  // queue's worth before submitting again would hand the device its work in
  // lockstep rounds, idle between them: on a virtio disk that cost a quarter
  // of the random-read rate.
  void reap() {
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const unsigned index = static_cast<unsigned>(cqe->user_data);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      complete(index, res);
      start_ops();
    }
  }

  void complete(unsigned index, int res) {
    slot& s = slots_[index];
    read_request& request = *s.request;
    const read_op& op = request.plan.ops[s.op];
    if (!request.failed.load(std::memory_order_acquire)) {
      if (res == -EAGAIN || res == -EINTR) {
        queue_read(index);
        return;
      }
      if (res < 0) {
        request.fail(read_error(file_, op, s.pos, -res));
      } else {
        counters_.bytes.fetch_add(static_cast<uint64_t>(res), std::memory_order_relaxed);
        switch (advance(op, static_cast<uint64_t>(res), file_.align, s.pos, s.done)) {
          case read_progress::complete:
            copy_out(request, op, s.target);
            break;
          case read_progress::end_of_file:
            request.fail(end_of_file_error(file_, op, s.done));
            break;
          case read_progress::again:
            queue_read(index);
            return;
        }
      }
    }
    request.finish_op();
    s.request.reset();
    free_.push_back(index);
    --in_flight_;
  }

  const file_handle file_;
  io_counters& counters_;
  const uint64_t slot_bytes_;
  aligned_buffer bounce_;  // queue_depth slots of slot_bytes_
  std::vector<slot> slots_;
  std::vector<unsigned> free_;
  unsigned in_flight_ = 0;  // slots with a read queued or in the kernel
  io_uring ring_{};
  bool fixed_file_ = false;
  bool fixed_buffers_ = false;

  const unsigned submit_batch_;
  std::deque<work> pending_;  // taken from queue_; only the worker touches it

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<work> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

class uring_engine final : public read_engine {
 public:
  uring_engine(const file_handle& file, const reader_options& options, io_counters& counters) {
    for (unsigned i = 0; i < options.num_rings; ++i) {
      workers_.push_back(std::make_unique<uring_worker>(file, options, counters));
    }
  }

  // Splits the request's ops (sorted by offset) into one contiguous share per
  // ring; small requests rotate over the rings so that they spread too.
  void submit(const std::shared_ptr<read_request>& request) override {
    const size_t ops = request->plan.ops.size();
    const size_t rings = std::min(workers_.size(), ops);
    const size_t first = next_ring_.fetch_add(1, std::memory_order_relaxed);
    for (size_t j = 0; j < rings; ++j) {
      workers_[(first + j) % workers_.size()]->enqueue(
          uring_worker::work{request, ops * j / rings, ops * (j + 1) / rings});
    }
  }

 private:
  std::vector<std::unique_ptr<uring_worker>> workers_;
  std::atomic<size_t> next_ring_{0};
};

}  // namespace

std::unique_ptr<read_engine> make_uring_engine(const file_handle& file, const reader_options& options,
                                               io_counters& counters) {
  return std::make_unique<uring_engine>(file, options, counters);
}

}  // namespace diskgnn::detail

#else  // !DISKGNN_HAVE_LIBURING

namespace diskgnn::detail {

std::unique_ptr<read_engine> make_uring_engine(const file_handle&, const reader_options&, io_counters&) {
  throw std::runtime_error(io_uring_unavailable_reason());
}

}  // namespace diskgnn::detail

#endif
