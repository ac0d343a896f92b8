// Checks of file_reader against a plain pread oracle, shared by the test
// programs of each backend. Sizes are awkward on purpose: rows of 1, 3, 4097
// bytes, a file that does not end on a block, outputs that start off-block.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "aligned_buffer.h"
#include "check.h"
#include "reader.h"

namespace reader_checks {


/// A temporary file on a disk-backed file system (TMPDIR, else /var/tmp):
/// /tmp may be tmpfs, where O_DIRECT means nothing.
class temp_file {
 public:
  explicit temp_file(const std::vector<uint8_t>& bytes) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/var/tmp") + "/diskgnn-reader-XXXXXX";
    const int fd = mkstemp(path_.data());
    if (fd < 0) {
      std::perror("mkstemp");
      std::exit(1);
    }
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        std::perror("write");
        std::exit(1);
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~temp_file() { ::unlink(path_.c_str()); }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;

  const std::string& path() const { return path_; }
  void truncate(uint64_t size) const {
    if (::truncate(path_.c_str(), static_cast<off_t>(size)) != 0) std::perror("truncate");
  }

 private:
  std::string path_;
};

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

/// The oracle: what a gather must produce, straight from the file's bytes.
inline std::vector<uint8_t> expected_rows(const std::vector<uint8_t>& file, const std::vector<int64_t>& ids,
                                          uint64_t row_bytes, uint64_t base) {
  std::vector<uint8_t> out(ids.size() * row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out.data() + i * row_bytes, file.data() + base + static_cast<uint64_t>(ids[i]) * row_bytes,
                row_bytes);
  }
  return out;
}

template <class E>
bool throws(const std::function<void()>& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  } catch (const std::exception& e) {
    std::printf("unexpected exception: %s\n", e.what());
    return false;
  }
  return false;
}

/// Output memory that starts `skew` bytes past a block boundary, so that
/// both the bounce path and the straight-into-output path are exercised.
struct output {
  output(size_t bytes, size_t skew) : buffer(bytes + skew + 4096, 4096), skew(skew) {
    std::memset(buffer.data(), 0xAB, buffer.size());
  }
  uint8_t* data() const { return buffer.data() + skew; }
  diskgnn::aligned_buffer buffer;
  size_t skew;
};

inline void check_gathers(const diskgnn::reader_options& options) {
  const uint64_t file_bytes = 1000 * 4097 + 123;
  const std::vector<uint8_t> file = random_bytes(file_bytes, 7);
  temp_file tmp(file);
  diskgnn::file_reader reader(tmp.path(), options);
  std::mt19937_64 rng(11);

  const uint64_t row_sizes[] = {1, 3, 512, 4096, 4097, 10000};
  const uint64_t bases[] = {0, 7, 4096};
  const size_t counts[] = {0, 1, 199, 700};
  for (uint64_t row_bytes : row_sizes) {
    for (uint64_t base : bases) {
      const uint64_t num_rows = (file_bytes - base) / row_bytes;
      for (size_t count : counts) {
        std::vector<int64_t> ids(count);
        for (auto& id : ids) id = static_cast<int64_t>(rng() % num_rows);
        if (count > 1) {
          ids[0] = static_cast<int64_t>(num_rows - 1);  // the last row of the file
          ids[count - 1] = ids[count / 2];              // a duplicate
        }
        for (size_t skew : {size_t{0}, size_t{1}}) {
          output out(count * row_bytes, skew);
          reader.submit_gather(ids.data(), ids.size(), row_bytes, base, num_rows, out.data(), count * row_bytes)
              .wait();
          const std::vector<uint8_t> want = expected_rows(file, ids, row_bytes, base);
          if (std::memcmp(out.data(), want.data(), want.size()) != 0) {
            std::printf("gather mismatch: row_bytes=%llu base=%llu count=%zu skew=%zu\n",
                        static_cast<unsigned long long>(row_bytes), static_cast<unsigned long long>(base), count,
                        skew);
            ++test_check::failures;
          }
          CHECK(out.data()[count * row_bytes] == 0xAB);  // nothing written past the output
        }
      }
    }
  }
}

inline void check_ranges(const diskgnn::reader_options& options) {
  const uint64_t file_bytes = (5 << 20) + 333;
  const std::vector<uint8_t> file = random_bytes(file_bytes, 3);
  temp_file tmp(file);
  diskgnn::file_reader reader(tmp.path(), options);

  // Large aligned (split at the request limit, read straight into the
  // output), unaligned, overlapping, zero-length, up to the last byte.
  const std::vector<diskgnn::byte_range> ranges = {
      {0, 3 << 20, 0},
      {4096, 8192, 3 << 20},
      {5, 100, (3 << 20) + 8192},
      {file_bytes - 1000, 1000, (3 << 20) + 8292},
      {(1 << 20) - 10, 20, (3 << 20) + 9292},
      {12345, 0, 0},
      {4 << 20, (1 << 20) + 333, (3 << 20) + 9312},
  };
  const size_t out_bytes = (3 << 20) + 9312 + (1 << 20) + 333;
  for (size_t skew : {size_t{0}, size_t{3}}) {
    output out(out_bytes, skew);
    reader.submit_ranges(ranges.data(), ranges.size(), out.data(), out_bytes).wait();
    for (const auto& r : ranges) {
      if (std::memcmp(out.data() + r.dst_offset, file.data() + r.file_offset, r.length) != 0) {
        std::printf("range mismatch: offset=%llu length=%llu skew=%zu\n",
                    static_cast<unsigned long long>(r.file_offset), static_cast<unsigned long long>(r.length), skew);
        ++test_check::failures;
      }
    }
  }
}

inline void check_async(const diskgnn::reader_options& options) {
  const std::vector<uint8_t> file = random_bytes(3 << 20, 5);
  temp_file tmp(file);
  diskgnn::file_reader reader(tmp.path(), options);
  const uint64_t row_bytes = 300;
  const uint64_t num_rows = file.size() / row_bytes;
  std::mt19937_64 rng(2);
  std::vector<std::vector<int64_t>> batches(8);
  std::vector<std::vector<uint8_t>> outs(batches.size());
  std::vector<diskgnn::read_ticket> tickets;
  for (size_t b = 0; b < batches.size(); ++b) {
    batches[b].resize(500);
    for (auto& id : batches[b]) id = static_cast<int64_t>(rng() % num_rows);
    outs[b].resize(500 * row_bytes);
    tickets.push_back(reader.submit_gather(batches[b].data(), 500, row_bytes, 0, num_rows, outs[b].data(),
                                           outs[b].size()));
  }
  for (size_t b = batches.size(); b-- > 0;) {  // waited in reverse order of submission
    tickets[b].wait();
    tickets[b].wait();  // waiting twice is fine
    CHECK(tickets[b].done());
    CHECK(outs[b] == expected_rows(file, batches[b], row_bytes, 0));
  }
  {
    // A ticket dropped unwaited still finishes before its destructor returns.
    std::vector<uint8_t> out(500 * row_bytes);
    reader.submit_gather(batches[0].data(), 500, row_bytes, 0, num_rows, out.data(), out.size());
    CHECK(out == expected_rows(file, batches[0], row_bytes, 0));
  }
  // Closing finishes what is in flight.
  std::vector<uint8_t> out(500 * row_bytes);
  diskgnn::read_ticket last =
      reader.submit_gather(batches[1].data(), 500, row_bytes, 0, num_rows, out.data(), out.size());
  reader.close();
  CHECK(last.done());
  CHECK(out == expected_rows(file, batches[1], row_bytes, 0));
  CHECK(throws<std::invalid_argument>(
      [&] { reader.submit_gather(batches[1].data(), 1, row_bytes, 0, num_rows, out.data(), out.size()); }));
  CHECK(reader.stats().reads > 0);
}

inline void check_errors(const diskgnn::reader_options& options) {
  const std::vector<uint8_t> file = random_bytes(10 * 4096 + 100, 9);
  temp_file tmp(file);
  diskgnn::file_reader reader(tmp.path(), options);
  std::vector<uint8_t> out(1 << 16);
  auto gather = [&](int64_t id, uint64_t num_rows) {
    reader.submit_gather(&id, 1, 100, 0, num_rows, out.data(), out.size()).wait();
  };
  CHECK(throws<std::out_of_range>([&] { gather(-1, 100); }));
  CHECK(throws<std::out_of_range>([&] { gather(410, 410); }));
  // More rows than the file holds: the row is past the end, not zeros.
  CHECK(throws<diskgnn::short_file_error>([&] { gather(410, 500); }));
  CHECK(throws<std::invalid_argument>([&] {
    int64_t ids[2] = {0, 1};
    reader.submit_gather(ids, 2, 100, 0, 410, out.data(), 150);
  }));
  const diskgnn::byte_range past{file.size() - 10, 11, 0};
  CHECK(throws<diskgnn::short_file_error>([&] { reader.submit_ranges(&past, 1, out.data(), out.size()); }));
  const diskgnn::byte_range too_far{0, 100, out.size() - 50};
  CHECK(throws<std::invalid_argument>([&] { reader.submit_ranges(&too_far, 1, out.data(), out.size()); }));

  // Truncated after open: the read itself finds the end of the file.
  tmp.truncate(4096 + 10);
  bool named_file = false;
  CHECK(throws<diskgnn::short_file_error>([&] {
    try {
      gather(300, 410);
    } catch (const diskgnn::short_file_error& e) {
      named_file = std::string(e.what()).find(tmp.path()) != std::string::npos;
      throw;
    }
  }));
  CHECK(named_file);
  // A row that ends inside what is left still reads; the next row does not.
  gather(40, 410);
  CHECK(std::memcmp(out.data(), file.data() + 4000, 100) == 0);
  CHECK(throws<diskgnn::short_file_error>([&] { gather(41, 410); }));

  CHECK(throws<std::invalid_argument>([&] {
    diskgnn::reader_options bad = options;
    bad.max_request_bytes = 1000;
    diskgnn::file_reader r(tmp.path(), bad);
  }));
  bool errno_named = false;
  try {
    diskgnn::file_reader r(tmp.path() + ".missing", options);
  } catch (const diskgnn::io_error& e) {
    errno_named = e.error_number() == ENOENT && e.path() == tmp.path() + ".missing";
  }
  CHECK(errno_named);
}

/// Every check under a few option sets that move the coalescing and
/// queueing boundaries.
inline void check_all(diskgnn::reader_options base) {
  struct variant {
    unsigned queue_depth;
    unsigned num_rings;
    unsigned submit_batch;
    uint64_t max_request_bytes;
    uint64_t max_gap_bytes;
    bool register_buffers;
  };
  const variant variants[] = {
      {64, 1, 4, 1 << 20, 0, true},
      {1, 1, 1, 4096, 0, false},
      {4, 3, 8, 8192, 8192, true},
      {16, 2, 1, 64 << 10, 4096, false},
  };
  for (const variant& v : variants) {
    diskgnn::reader_options o = base;
    o.queue_depth = v.queue_depth;
    o.num_rings = v.num_rings;
    o.submit_batch = v.submit_batch;
    o.max_request_bytes = v.max_request_bytes;
    o.max_gap_bytes = v.max_gap_bytes;
    o.register_buffers = v.register_buffers;
    check_gathers(o);
    check_ranges(o);
    check_async(o);
    check_errors(o);
  }
}

}  // namespace reader_checks
