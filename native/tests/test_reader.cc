// Description: the pread engine (O_DIRECT and buffered) matches a plain
// pread oracle on awkward sizes, and reports errors by file, offset, errno.
#include "options.h"
#include "reader_checks.h"

int main() {
  diskgnn::reader_options options = test_options::reader("pread", diskgnn::direct_mode::off);
  reader_checks::check_all(options);

  const reader_checks::temp_file probe(reader_checks::random_bytes(4096, 1));
  options.direct = diskgnn::direct_mode::automatic;
  if (diskgnn::file_reader(probe.path(), options).direct()) {
    reader_checks::check_all(options);
  } else {
    std::printf("note: O_DIRECT unsupported under TMPDIR; only buffered pread was tested\n");
  }
  return test_result();
}
