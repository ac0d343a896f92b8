// Owned memory aligned for O_DIRECT: the kernel transfers straight into the
// buffer, so both its address and the offsets read into it must be aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace diskgnn {

class aligned_buffer {
 public:
  aligned_buffer() = default;
  aligned_buffer(size_t bytes, size_t alignment) : bytes_(bytes) {
    void* p = nullptr;
    if (bytes > 0 && posix_memalign(&p, alignment, bytes) != 0) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(p);
  }
  ~aligned_buffer() { std::free(data_); }
  aligned_buffer(const aligned_buffer&) = delete;
  aligned_buffer& operator=(const aligned_buffer&) = delete;
  aligned_buffer(aligned_buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  aligned_buffer& operator=(aligned_buffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = other.data_;
      bytes_ = other.bytes_;
      other.data_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace diskgnn
