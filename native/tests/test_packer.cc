// Description: pack_regions writes every region as the direct gather of its
// rows, zero-padded to 4 KiB, with XXH3-64 checksums of the rows; the same
// bytes for any thread count, chunk size, memory budget and O_DIRECT or not;
// inconsistent regions and a too small budget are refused.
#include <sys/stat.h>

#include <algorithm>
#include <random>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "options.h"
#include "packer.h"
#include "reader_checks.h"

namespace {

using reader_checks::temp_file;
using reader_checks::throws;

uint64_t padded(uint64_t n) { return (n + 4095) / 4096 * 4096; }

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

struct regions {
  std::vector<int64_t> ids, starts{0}, offsets{0};
  void add(const std::vector<int64_t>& r, uint64_t row_bytes) {
    ids.insert(ids.end(), r.begin(), r.end());
    starts.push_back(static_cast<int64_t>(ids.size()));
    offsets.push_back(offsets.back() + static_cast<int64_t>(padded(r.size() * row_bytes)));
  }
  size_t count() const { return starts.size() - 1; }
};

diskgnn::pack_result pack(const std::string& features, uint64_t num_rows, uint64_t row_bytes, const regions& g,
                          const std::string& out, const diskgnn::packer_options& o) {
  return diskgnn::pack_regions(features, num_rows, row_bytes, g.ids.data(), g.ids.size(), g.starts.data(),
                               g.offsets.data(), g.count(), out, o);
}

// The pack must be, region by region, the gathered rows then zeros up to the next region.
void check_pack(const std::vector<uint8_t>& features, uint64_t row_bytes, const regions& g,
                const std::vector<uint8_t>& pack, const std::vector<uint64_t>& checksums) {
  CHECK(pack.size() == static_cast<size_t>(g.offsets.back()));
  CHECK(checksums.size() == g.count());
  if (pack.size() != static_cast<size_t>(g.offsets.back()) || checksums.size() != g.count()) return;
  for (size_t r = 0; r < g.count(); ++r) {
    const std::vector<int64_t> ids(g.ids.begin() + g.starts[r], g.ids.begin() + g.starts[r + 1]);
    const std::vector<uint8_t> rows = reader_checks::expected_rows(features, ids, row_bytes, 0);
    const uint8_t* at = pack.data() + g.offsets[r];
    CHECK(std::equal(rows.begin(), rows.end(), at));
    const uint64_t end = static_cast<uint64_t>(g.offsets[r + 1] - g.offsets[r]);
    CHECK(std::all_of(at + rows.size(), at + end, [](uint8_t b) { return b == 0; }));
    CHECK(checksums[r] == XXH3_64bits(rows.data(), rows.size()));
  }
}

}  // namespace

int main() {
  std::mt19937_64 gen(3);
  for (const uint64_t row_bytes : {13ull, 4096ull, 4097ull, 1ull}) {
    const uint64_t num_rows = row_bytes >= 4096 ? 300 : 20000;
    std::vector<uint8_t> bytes = reader_checks::random_bytes(num_rows * row_bytes, static_cast<uint32_t>(row_bytes));
    const std::vector<uint8_t> features = bytes;
    bytes.resize(padded(bytes.size()), 0);  // dataset files are zero-padded to 4 KiB
    const temp_file file(bytes);

    regions g;
    g.add({}, row_bytes);                               // empty
    g.add({0}, row_bytes);                              // one row, the first
    g.add({static_cast<int64_t>(num_rows - 1)}, row_bytes);  // one row, the last
    std::vector<int64_t> all(num_rows);
    for (uint64_t i = 0; i < num_rows; ++i) all[i] = static_cast<int64_t>(i);
    g.add(all, row_bytes);                              // every row: one long run
    for (int k = 0; k < 6; ++k) {                       // random subsets, some dense, some sparse
      std::vector<int64_t> r;
      const uint64_t keep = 1 + gen() % (k % 2 ? 3 : 40);
      for (uint64_t i = 0; i < num_rows; ++i) {
        if (gen() % keep == 0) r.push_back(static_cast<int64_t>(i));
      }
      g.add(r, row_bytes);
    }
    g.add({}, row_bytes);

    const std::string out = file.path() + ".pack";
    std::vector<uint8_t> reference;
    struct variant {
      uint64_t chunk_bytes, budget;
      unsigned threads;
      diskgnn::direct_mode direct;
    };
    const std::vector<variant> variants = {
        {64 << 20, 64 << 20, 1, diskgnn::direct_mode::automatic},  // one chunk, staging holds whole regions
        {1, 64 << 20, 3, diskgnn::direct_mode::automatic},         // one-row chunks
        {5000, 0, 2, diskgnn::direct_mode::automatic},             // the minimum budget: many flushes
        {5000, 0, 3, diskgnn::direct_mode::off},                   // the same through the page cache
        {65536, 1 << 20, 2, diskgnn::direct_mode::automatic},
    };
    for (const variant& v : variants) {
      diskgnn::packer_options o = test_options::packer(v.chunk_bytes, v.budget, v.threads, v.direct);
      if (v.budget == 0) {
        // Find the minimum from the refusal, then pack at exactly that budget.
        try {
          o.pack_memory = 1;
          pack(file.path(), num_rows, row_bytes, g, out, o);
          CHECK(false);
        } catch (const diskgnn::pack_memory_error& e) {
          const std::string what = e.what();
          const size_t at = what.find("minimum of ");
          CHECK(at != std::string::npos);
          o.pack_memory = std::stoull(what.substr(at + 11));
        }
        CHECK(throws<diskgnn::pack_memory_error>([&] {
          diskgnn::packer_options less = o;
          less.pack_memory -= 1;
          pack(file.path(), num_rows, row_bytes, g, out, less);
        }));
      }
      const diskgnn::pack_result res = pack(file.path(), num_rows, row_bytes, g, out, o);
      const std::vector<uint8_t> packed = read_file(out);
      check_pack(features, row_bytes, g, packed, res.checksums);
      CHECK(res.buffer_bytes <= o.pack_memory);
      CHECK(res.bytes_written == static_cast<uint64_t>(g.offsets.back()));
      if (v.direct == diskgnn::direct_mode::off) CHECK(!res.read_direct && !res.write_direct);
      if (v.budget == 0) CHECK(res.writes > g.count());  // staging had to flush mid-region
      if (reference.empty()) reference = packed;
      CHECK(packed == reference);
    }

    // Inconsistent regions are refused before anything is written; so are options left unset
    // (the library has no defaults of its own).
    const diskgnn::packer_options valid = test_options::packer(64 << 20, 64 << 20, 2, diskgnn::direct_mode::automatic);
    CHECK(throws<std::invalid_argument>([&] { pack(file.path(), num_rows, row_bytes, g, out, {}); }));
    auto refused = [&](regions bad) {
      return throws<std::invalid_argument>([&] { pack(file.path(), num_rows, row_bytes, bad, out, valid); });
    };
    regions unsorted;
    unsorted.add({5, 3}, row_bytes);
    CHECK(refused(unsorted));
    regions duplicate;
    duplicate.add({3, 3}, row_bytes);
    CHECK(refused(duplicate));
    regions outside;
    outside.add({static_cast<int64_t>(num_rows)}, row_bytes);
    CHECK(refused(outside));
    regions negative;
    negative.add({-1}, row_bytes);
    CHECK(refused(negative));
    regions misplaced = g;
    misplaced.offsets[2] += 4096;
    CHECK(refused(misplaced));
    regions short_ids = g;
    short_ids.ids.pop_back();
    CHECK(refused(short_ids));

    // A feature file shorter than num_rows rows is a short file, never zeros.
    CHECK(throws<diskgnn::short_file_error>([&] { pack(file.path(), num_rows + 5000, row_bytes, g, out, valid); }));
    std::remove(out.c_str());
  }
  return test_result();
}
