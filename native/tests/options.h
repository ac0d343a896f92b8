// Option sets the native tests start from. The library has no defaults of its
// own (Python passes diskgnn/defaults.py's), so each test names its values;
// these are small ones that exercise queueing and coalescing.
#pragma once

#include "packer.h"
#include "reader.h"

namespace test_options {

inline diskgnn::reader_options reader(const std::string& backend, diskgnn::direct_mode direct) {
  diskgnn::reader_options o;
  o.backend = backend;
  o.direct = direct;
  o.queue_depth = 8;
  o.num_rings = 1;
  o.submit_batch = 4;
  o.max_request_bytes = 64 << 10;
  o.max_gap_bytes = 0;
  o.register_buffers = true;
  return o;
}

inline diskgnn::packer_options packer(uint64_t chunk_bytes, uint64_t pack_memory, unsigned threads,
                                      diskgnn::direct_mode direct) {
  diskgnn::packer_options o;
  o.chunk_bytes = chunk_bytes;
  o.pack_memory = pack_memory;
  o.max_write_bytes = 1 << 20;
  o.threads = threads;
  o.write_depth = 3;
  o.direct = direct;
  return o;
}

}  // namespace test_options
