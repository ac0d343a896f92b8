// What every file access of the native library shares: the block O_DIRECT
// needs, an owned descriptor, opening with O_DIRECT where a first block
// transfers that way (with the message saying why not), and read and write
// loops that retry interrupted and short transfers. The reader, the packer
// and the sampler use these; nothing here knows about rows or regions.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "aligned_buffer.h"
#include "reader.h"

namespace diskgnn::file_io {

/// O_DIRECT alignment of offsets, lengths and memory. 4096 satisfies every
/// device with logical blocks up to 4 KiB (512e and 4Kn disks, NVMe).
constexpr uint64_t block_bytes = 4096;

constexpr uint64_t align_down(uint64_t x, uint64_t a = block_bytes) { return x / a * a; }
constexpr uint64_t align_up(uint64_t x, uint64_t a = block_bytes) { return (x + a - 1) / a * a; }

inline std::string errno_text(int e) { return std::strerror(e); }

/// @brief Owns a file descriptor: closed when the guard goes, unless released.
class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

/// @brief The outcome of opening with O_DIRECT: a descriptor, or why not.
struct direct_open {
  int fd = -1;
  int error_number = 0;
  std::string why;  ///< empty on success
};

/// @brief Opens `path` with O_DIRECT | flags and, when `probe` is set, moves
/// its first block that way (a read, or a write of zeros where flags write):
/// some file systems take O_DIRECT at open and refuse the transfers (or the
/// reverse, tmpfs before Linux 6.6).
inline direct_open open_direct(const std::string& path, int flags, bool probe) {
  direct_open result;
  fd_guard fd(::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC));
  if (fd.get() < 0) {
    result.error_number = errno;
    result.why = "opening with O_DIRECT failed: " + errno_text(errno);
    return result;
  }
  if (probe) {
    const bool write = (flags & O_ACCMODE) != O_RDONLY;
    aligned_buffer buf(block_bytes, block_bytes);
    std::memset(buf.data(), 0, block_bytes);
    ssize_t n;
    do {
      n = write ? ::pwrite(fd.get(), buf.data(), block_bytes, 0) : ::pread(fd.get(), buf.data(), block_bytes, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      result.error_number = errno;
      result.why = std::string(write ? "writing" : "reading") + " with O_DIRECT failed: " + errno_text(errno);
      return result;
    }
  }
  result.fd = fd.release();
  return result;
}

/// @brief Reads bytes [offset, offset + need) into buf, asking for `ask` >= need
/// bytes (O_DIRECT reads whole blocks, the file may end sooner) and retrying
/// interrupted and short reads.
/// @throws io_error when a read fails; short_file_error (with `what_needs` in
///         its message) when the file ends before `need` bytes.
inline void read_at_least(int fd, const std::string& path, uint8_t* buf, uint64_t ask, uint64_t need, uint64_t offset,
                          const std::string& what_needs) {
  uint64_t got = 0;
  while (got < need) {
    const ssize_t n = ::pread(fd, buf + got, ask - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw io_error(path, offset + got, e,
                     "read of " + std::to_string(ask - got) + " bytes at offset " + std::to_string(offset + got) +
                         " failed: " + errno_text(e));
    }
    if (n == 0) {
      throw short_file_error(path + ": ends at byte " + std::to_string(offset + got) + ", before the " +
                             std::to_string(offset + need) + " bytes " + what_needs + ": file shorter than expected");
    }
    got += static_cast<uint64_t>(n);
  }
}

/// @brief Writes len bytes at offset, retrying interrupted and short writes.
/// @throws io_error naming the offset when a write fails or writes nothing.
inline void write_all(int fd, const std::string& path, const uint8_t* buf, uint64_t len, uint64_t offset) {
  uint64_t done = 0;
  while (done < len) {
    const ssize_t n = ::pwrite(fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw io_error(path, offset + done, e,
                     "write of " + std::to_string(len - done) + " bytes at offset " + std::to_string(offset + done) +
                         " failed: " + errno_text(e));
    }
    if (n == 0) {
      throw io_error(path, offset + done, EIO, "write at offset " + std::to_string(offset + done) + " wrote nothing");
    }
    done += static_cast<uint64_t>(n);
  }
}

}  // namespace diskgnn::file_io
