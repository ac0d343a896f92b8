#include "read_engine.h"

#include <sys/stat.h>

#include <cstring>

namespace diskgnn::detail {

read_request::read_request(read_plan p, uint8_t* out_buffer)
    : plan(std::move(p)), out(out_buffer), ops_left_(plan.ops.size()), done_(plan.ops.empty()) {}

void read_request::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(e);
  failed.store(true, std::memory_order_release);
}

void read_request::finish_op() {
  if (ops_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }
}

void read_request::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool read_request::is_done() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

read_progress advance(const read_op& op, uint64_t got, uint64_t align, uint64_t& pos, uint64_t& done) {
  const uint64_t end = pos + got;
  if (end <= done) return read_progress::end_of_file;
  done = end;
  if (done >= op.need) return read_progress::complete;
  pos = align_down(done, align);
  return read_progress::again;
}

void copy_out(const read_request& request, const read_op& op, const uint8_t* buffer) {
  if (op.into_destination) return;
  for (size_t i = op.copy_begin; i < op.copy_end; ++i) {
    const copy_span& c = request.plan.copies[i];
    std::memcpy(request.out + c.dst, buffer + c.src, c.len);
  }
}

uint8_t* read_target(const read_request& request, const read_op& op, uint8_t* bounce) {
  return op.into_destination ? request.out + request.plan.copies[op.copy_begin].dst : bounce;
}

std::exception_ptr read_error(const file_handle& file, const read_op& op, uint64_t pos, int error_number) {
  const uint64_t offset = op.file_offset + pos;
  return std::make_exception_ptr(
      io_error(file.path, offset, error_number,
               "read of " + std::to_string(op.length - pos) + " bytes at offset " + std::to_string(offset) +
                   " failed: " + std::strerror(error_number)));
}

std::exception_ptr end_of_file_error(const file_handle& file, const read_op& op, uint64_t done) {
  // The size is looked up now: the file was long enough when it was opened.
  struct stat st;
  const uint64_t ends_at = fstat(file.fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : op.file_offset + done;
  return std::make_exception_ptr(short_file_error(
      file.path + ": file shorter than expected: a read needs bytes up to " +
      std::to_string(op.file_offset + op.need) + ", the file ends at byte " + std::to_string(ends_at) +
      " (truncated after it was opened?)"));
}

}  // namespace diskgnn::detail
