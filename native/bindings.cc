// The only translation unit that includes pybind11: it declares what the
// native library exports to Python and holds no logic of its own. It has no
// defaults either: every option comes from diskgnn/defaults.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <vector>

#include "aggregate.h"
#include "assemble.h"
#include "dropout.h"
#include "hag.h"
#include "packer.h"
#include "reader.h"
#include "sampler.h"
#include "uring_support.h"

namespace py = pybind11;

namespace {

diskgnn::direct_mode parse_direct(const std::string& direct) {
  if (direct == "auto") return diskgnn::direct_mode::automatic;
  if (direct == "on") return diskgnn::direct_mode::on;
  if (direct == "off") return diskgnn::direct_mode::off;
  throw std::invalid_argument("direct must be 'auto', 'on' or 'off', got '" + direct + "'");
}

// Output arrays are taken without conversion (noconvert): a converted copy
// would receive the data and be thrown away.
using out_array = py::array_t<uint8_t, py::array::c_style>;
using id_array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "diskgnn native core (C++17)";
  m.def("io_uring_compiled", &diskgnn::io_uring_compiled,
        "True when built against the system liburing.");
  m.def("io_uring_unavailable_reason", &diskgnn::io_uring_unavailable_reason,
        "Empty when io_uring works on this kernel, else the reason it does not.");

  // OSError(errno, detail, path) becomes FileNotFoundError, PermissionError...
  // as Python's own file functions raise them.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const diskgnn::io_error& e) {
      py::object error = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(PyExc_OSError, "iss", e.error_number(), e.detail().c_str(), e.path().c_str()));
      if (error) PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    } catch (const diskgnn::short_file_error& e) {
      PyErr_SetString(PyExc_EOFError, e.what());
    }
  });

  py::register_exception<diskgnn::pack_memory_error>(m, "PackMemoryError", PyExc_ValueError);

  py::class_<diskgnn::read_ticket>(m, "ReadTicket", "A submitted read; the output is ready once wait() returns.")
      .def("wait", &diskgnn::read_ticket::wait, py::call_guard<py::gil_scoped_release>(),
           "Blocks until the read is done; raises its error.")
      .def("done", &diskgnn::read_ticket::done);

  py::class_<diskgnn::file_reader>(m, "FileReader")
      .def(py::init([](const std::string& path, const std::string& backend, const std::string& direct,
                       unsigned queue_depth, unsigned num_rings, unsigned submit_batch,
                       uint64_t max_request_bytes, uint64_t max_gap_bytes, bool register_buffers) {
             diskgnn::reader_options o;
             o.backend = backend;
             o.direct = parse_direct(direct);
             o.queue_depth = queue_depth;
             o.num_rings = num_rings;
             o.submit_batch = submit_batch;
             o.max_request_bytes = max_request_bytes;
             o.max_gap_bytes = max_gap_bytes;
             o.register_buffers = register_buffers;
             py::gil_scoped_release release;
             return std::make_unique<diskgnn::file_reader>(path, o);
           }),
           py::arg("path"), py::arg("backend"), py::arg("direct"), py::arg("queue_depth"), py::arg("num_rings"),
           py::arg("submit_batch"), py::arg("max_request_bytes"), py::arg("max_gap_bytes"),
           py::arg("register_buffers"))
      .def(
          "submit_gather",
          [](diskgnn::file_reader& self, const py::array_t<int64_t, py::array::c_style>& ids, uint64_t row_bytes,
             uint64_t base_offset, uint64_t num_rows, out_array& out) {
            const int64_t* id_data = ids.data();
            const size_t count = static_cast<size_t>(ids.size());
            uint8_t* out_data = out.mutable_data();
            const size_t out_bytes = static_cast<size_t>(out.size());
            py::gil_scoped_release release;
            return self.submit_gather(id_data, count, row_bytes, base_offset, num_rows, out_data, out_bytes);
          },
          py::arg("ids"), py::arg("row_bytes"), py::arg("base_offset"), py::arg("num_rows"),
          py::arg("out").noconvert(), "Rows ids[i] into out[i * row_bytes:]; out is a flat uint8 array.")
      .def(
          "submit_ranges",
          [](diskgnn::file_reader& self, const py::array_t<uint64_t, py::array::c_style>& ranges, out_array& out) {
            if (ranges.ndim() != 2 || ranges.shape(1) != 3) {
              throw std::invalid_argument("ranges must have shape (n, 3): file_offset, length, dst_offset");
            }
            auto r = ranges.unchecked<2>();
            std::vector<diskgnn::byte_range> list(static_cast<size_t>(r.shape(0)));
            for (size_t i = 0; i < list.size(); ++i) list[i] = {r(i, 0), r(i, 1), r(i, 2)};
            uint8_t* out_data = out.mutable_data();
            const size_t out_bytes = static_cast<size_t>(out.size());
            py::gil_scoped_release release;
            return self.submit_ranges(list.data(), list.size(), out_data, out_bytes);
          },
          py::arg("ranges"), py::arg("out").noconvert(),
          "ranges: uint64 (n, 3) rows of file_offset, length, dst_offset; out: flat uint8 array.")
      .def("close", &diskgnn::file_reader::close, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("path", &diskgnn::file_reader::path)
      .def_property_readonly("backend", &diskgnn::file_reader::backend)
      .def_property_readonly("direct", &diskgnn::file_reader::direct)
      .def_property_readonly("file_size", &diskgnn::file_reader::file_size)
      .def_property_readonly("fallback_reason", &diskgnn::file_reader::fallback_reason)
      .def("stats", [](const diskgnn::file_reader& self) {
        const diskgnn::read_stats s = self.stats();
        py::dict d;
        d["reads"] = s.reads;
        d["bytes"] = s.bytes;
        return d;
      });

  using edge_array = py::array_t<int64_t, py::array::c_style>;
  // The kernels' rows: C-contiguous float32, or bfloat16 as int16 bits (numpy has no bfloat16), all of one
  // type; true for bf16. The last array is written.
  auto rows_type = [](std::initializer_list<const py::array*> arrays, const char* what) {
    const py::array& first = **arrays.begin();
    const bool bf16 = first.dtype().is(py::dtype::of<int16_t>());
    for (const py::array* a : arrays) {
      if (!(bf16 || first.dtype().is(py::dtype::of<float>())) || !a->dtype().is(first.dtype()) ||
          !(a->flags() & py::array::c_style)) {
        throw std::invalid_argument(std::string(what) + ": arrays must be C-contiguous float32 (or bf16 as int16), "
                                    "all of one type");
      }
    }
    if (!(*(arrays.end() - 1))->writeable()) throw std::invalid_argument(std::string(what) + ": output not writable");
    return bf16;
  };
  // scale: None or one float32 per destination row. One entry per direction, dispatching on the rows' type.
  // The sums' rows and scale checked, then `kernel` run on them as float or bf16 without the GIL.
  auto sum_rows = [rows_type](int64_t num_dst, const py::array& in, py::array& out, const py::object& scale,
                              int64_t in_rows, int64_t out_rows, auto kernel) {
    const bool bf16 = rows_type({&in, &out}, "csc_sum");
    if (in.ndim() != 2 || out.ndim() != 2 || in.shape(1) != out.shape(1)) {
      throw std::invalid_argument("rows must be 2-d arrays of the same width");
    }
    if (in.shape(0) != in_rows || out.shape(0) != out_rows) {
      throw std::invalid_argument("row counts do not match the block");
    }
    const float* k = nullptr;
    py::array_t<float, py::array::c_style | py::array::forcecast> scales;
    if (!scale.is_none()) {
      scales = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(scale);
      if (!scales || scales.ndim() != 1 || scales.shape(0) != num_dst) {
        throw std::invalid_argument("scale must hold one float32 per destination row");
      }
      k = scales.data();
    }
    void* o = out.mutable_data();
    const void* i = in.data();
    const int64_t dim = in.shape(1);
    py::gil_scoped_release release;
    if (bf16) {
      kernel(static_cast<const diskgnn::bf16*>(i), static_cast<diskgnn::bf16*>(o), dim, k);
    } else {
      kernel(static_cast<const float*>(i), static_cast<float*>(o), dim, k);
    }
  };
  auto csc_dst = [](const edge_array& indptr, const edge_array& indices) {
    const int64_t num_dst = indptr.size() - 1;
    if (indptr.size() < 1 || indices.size() < indptr.data()[num_dst]) {
      throw std::invalid_argument("indptr and indices do not match");
    }
    return num_dst;
  };
  m.def(
      "csc_sum",
      [sum_rows, csc_dst](const edge_array& indptr, const edge_array& indices, const py::array& src, py::array& out,
                          int num_threads, const py::object& scale, bool self_loop) {
        const int64_t num_dst = csc_dst(indptr, indices), num_src = src.ndim() == 2 ? src.shape(0) : 0;
        sum_rows(num_dst, src, out, scale, num_src, num_dst, [&](auto in, auto o, int64_t dim, const float* k) {
          diskgnn::csc_sum(indptr.data(), indices.data(), num_dst, in, num_src, dim, k, self_loop, o, num_threads);
        });
      },
      py::arg("indptr"), py::arg("indices"), py::arg("src"), py::arg("out").noconvert(), py::arg("num_threads"),
      py::arg("scale"), py::arg("self_loop"),
      "out[i] = scale[i] * (sum of src[indices[indptr[i]:indptr[i+1]]] (+ src[i] with self_loop)) (float32 or "
      "bf16-bit rows, int64 CSC).");
  m.def(
      "csc_sum_transpose",
      [sum_rows, csc_dst](const edge_array& indptr, const edge_array& indices, const py::array& grad_out,
                          py::array& grad_src, int num_threads, const py::object& scale, bool self_loop) {
        const int64_t num_dst = csc_dst(indptr, indices), num_src = grad_src.ndim() == 2 ? grad_src.shape(0) : 0;
        sum_rows(num_dst, grad_out, grad_src, scale, num_dst, num_src, [&](auto g, auto o, int64_t dim, const float* k) {
          diskgnn::csc_sum_transpose(indptr.data(), indices.data(), num_dst, g, num_src, dim, k, self_loop, o,
                                     num_threads);
        });
      },
      py::arg("indptr"), py::arg("indices"), py::arg("grad_out"), py::arg("grad_src").noconvert(),
      py::arg("num_threads"), py::arg("scale"), py::arg("self_loop"),
      "grad_src[j] = sum of scale[i] * grad_out[i] over the edges (j -> i): csc_sum's transpose.");

  // Rows as bytes: a C-contiguous 2-d array of any dtype, row_bytes = its width times its item size.
  auto row_bytes_of = [](const py::array& a, const char* what) {
    if (a.ndim() != 2 || !(a.flags() & py::array::c_style)) {
      throw std::invalid_argument(std::string("assemble_rows: ") + what + " must be a C-contiguous 2-d array");
    }
    return static_cast<int64_t>(a.shape(1) * a.itemsize());
  };
  m.def(
      "assemble_rows",
      [row_bytes_of](py::array& out, const py::list& sources, int num_threads) {
        const int64_t row_bytes = row_bytes_of(out, "out");
        if (!out.writeable()) throw std::invalid_argument("assemble_rows: out is not writable");
        std::vector<diskgnn::RowSource> rs;
        std::vector<py::object> keep;  // the arrays, ids converted to int64, alive until the copy ends
        // null where the source gives none (None)
        auto ids = [&keep](const py::handle& h) -> const int64_t* {
          if (h.is_none()) return nullptr;
          auto a = id_array::ensure(h);
          if (!a || a.ndim() != 1) throw std::invalid_argument("assemble_rows: ids must be 1-d integer arrays");
          keep.push_back(a);
          return a.data();
        };
        auto length = [](const py::handle& h) { return h.is_none() ? int64_t{-1} : static_cast<int64_t>(py::len(h)); };
        for (const py::handle& item : sources) {
          auto t = item.cast<py::tuple>();
          if (t.size() != 4) throw std::invalid_argument("assemble_rows: a source is (rows, slots, positions, first)");
          auto rows = t[0].cast<py::array>();
          if (row_bytes_of(rows, "rows") != row_bytes) {
            throw std::invalid_argument("assemble_rows: a source's rows are not as wide as out's");
          }
          const int64_t n_slots = length(t[1]), n_positions = length(t[2]);
          if (n_slots >= 0 && n_positions >= 0 && n_slots != n_positions) {
            throw std::invalid_argument("assemble_rows: a source's slots and positions differ in length");
          }
          diskgnn::RowSource s;
          s.rows = static_cast<const uint8_t*>(rows.data());
          s.num_rows = rows.shape(0);
          s.slots = ids(t[1]);
          s.positions = ids(t[2]);
          s.first = t[3].cast<int64_t>();
          s.count = n_slots >= 0 ? n_slots : n_positions >= 0 ? n_positions : s.num_rows;
          keep.push_back(rows);
          rs.push_back(s);
        }
        uint8_t* o = static_cast<uint8_t*>(out.mutable_data());
        const int64_t out_rows = out.shape(0);
        py::gil_scoped_release release;
        diskgnn::assemble_rows(rs, row_bytes, o, out_rows, num_threads);
      },
      py::arg("out").noconvert(), py::arg("sources"), py::arg("num_threads"),
      "out[positions[i]] = rows[slots[i]] for each source (rows, slots, positions, first); slots None: rows[i], "
      "positions None: first + i; rows of every array as wide in bytes as out's.");

  // Elementwise kernels' arrays: rows_type's, all of one size.
  auto elementwise = [rows_type](std::initializer_list<const py::array*> arrays, const char* what) {
    for (const py::array* a : arrays) {
      if (a->size() != (*arrays.begin())->size()) throw std::invalid_argument(std::string(what) + ": sizes differ");
    }
    return rows_type(arrays, what);
  };
  m.def(
      "dropout",
      [elementwise](const py::array& in, py::array& out, double p, uint64_t key, uint64_t offset,
                    const py::object& row_base, int64_t dim, bool relu, int num_threads) {
        const bool bf16 = elementwise({&in, &out}, "dropout");
        id_array bases;
        if (!row_base.is_none()) {
          bases = id_array::ensure(row_base);
          if (!bases || bases.ndim() != 1 || dim < 1 || bases.shape(0) * dim != in.size()) {
            throw std::invalid_argument("dropout: row_base must hold one int64 per row of dim elements");
          }
        }
        const int64_t* b = row_base.is_none() ? nullptr : bases.data();
        const void* i = in.data();
        void* o = out.mutable_data();
        const int64_t n = in.size();
        py::gil_scoped_release release;
        if (bf16) {
          diskgnn::dropout(static_cast<const diskgnn::bf16*>(i), static_cast<diskgnn::bf16*>(o), n, p, key, offset, b,
                           dim, relu, num_threads);
        } else {
          diskgnn::dropout(static_cast<const float*>(i), static_cast<float*>(o), n, p, key, offset, b, dim, relu,
                           num_threads);
        }
      },
      py::arg("in"), py::arg("out").noconvert(), py::arg("p"), py::arg("key"), py::arg("offset"),
      py::arg("row_base"), py::arg("dim"), py::arg("relu"), py::arg("num_threads"),
      "out = in / (1 - p) where the draw of (key, position) keeps an element (and, with relu, in > 0), else 0; "
      "positions offset + i, or with row_base (int64 per row of dim elements) row_base[r] + c.");
  m.def(
      "relu_dropout_backward",
      [elementwise](const py::array& grad, const py::array& out, py::array& grad_in, double p, int num_threads) {
        const bool bf16 = elementwise({&grad, &out, &grad_in}, "relu_dropout_backward");
        const void* g = grad.data();
        const void* o = out.data();
        void* gi = grad_in.mutable_data();
        const int64_t n = grad.size();
        py::gil_scoped_release release;
        if (bf16) {
          diskgnn::relu_dropout_backward(static_cast<const diskgnn::bf16*>(g), static_cast<const diskgnn::bf16*>(o),
                                         static_cast<diskgnn::bf16*>(gi), n, p, num_threads);
        } else {
          diskgnn::relu_dropout_backward(static_cast<const float*>(g), static_cast<const float*>(o),
                                         static_cast<float*>(gi), n, p, num_threads);
        }
      },
      py::arg("grad"), py::arg("out"), py::arg("grad_in").noconvert(), py::arg("p"), py::arg("num_threads"),
      "grad_in = grad / (1 - p) where out > 0, else 0: ReLU-then-dropout's backward.");

  py::class_<diskgnn::Hag>(m, "Hag", "A block's HAG: aggregation nodes by level and the rewritten lists.")
      .def_property_readonly("inputs", [](const diskgnn::Hag& h) { return py::array_t<int64_t>(h.inputs.size(), h.inputs.data()); })
      .def_property_readonly("level_bounds", [](const diskgnn::Hag& h) {
        return py::array_t<int64_t>(h.level_bounds.size(), h.level_bounds.data());
      })
      .def_property_readonly("indptr", [](const diskgnn::Hag& h) { return py::array_t<int64_t>(h.indptr.size(), h.indptr.data()); })
      .def_property_readonly("indices", [](const diskgnn::Hag& h) {
        return py::array_t<int64_t>(h.indices.size(), h.indices.data());
      })
      .def_property_readonly("num_agg", [](const diskgnn::Hag& h) { return static_cast<int64_t>(h.inputs.size() / 2); })
      .def_property_readonly("num_edges", [](const diskgnn::Hag& h) { return static_cast<int64_t>(h.indices.size()); })
      .def_readonly("num_src", &diskgnn::Hag::num_src)
      .def_readonly("frozen", &diskgnn::Hag::frozen);
  m.def(
      "hag_from_arrays",
      [](int64_t num_src, int64_t frozen, const edge_array& inputs, const edge_array& level_bounds,
         const edge_array& indptr, const edge_array& indices) {
        const auto vec = [](const edge_array& a) { return std::vector<int64_t>(a.data(), a.data() + a.size()); };
        diskgnn::Hag hag;
        hag.num_src = num_src;
        hag.frozen = frozen;
        hag.inputs = vec(inputs);
        hag.level_bounds = vec(level_bounds);
        hag.indptr = vec(indptr);
        hag.indices = vec(indices);
        diskgnn::hag_check(hag);
        return hag;
      },
      py::arg("num_src"), py::arg("frozen"), py::arg("inputs"), py::arg("level_bounds"), py::arg("indptr"),
      py::arg("indices"), "A stored HAG back from its arrays, checked as hag_check does (native/hag.h).");
  m.def(
      "hag_search",
      [](const edge_array& indptr, const edge_array& indices, int64_t num_src, int64_t capacity, int64_t min_shared,
         int max_depth, int64_t max_degree) {
        const int64_t num_dst = indptr.size() - 1;
        if (indptr.size() < 1 || indices.size() < indptr.data()[num_dst]) {
          throw std::invalid_argument("hag_search: indptr and indices do not match");
        }
        py::gil_scoped_release release;
        return diskgnn::hag_search(indptr.data(), indices.data(), num_dst, num_src, capacity, min_shared, max_depth,
                                   max_degree);
      },
      py::arg("indptr"), py::arg("indices"), py::arg("num_src"), py::arg("capacity"), py::arg("min_shared"),
      py::arg("max_depth"), py::arg("max_degree"), "The greedy HAG of a CSC block (native/hag.h).");
  m.def(
      "hag_sum",
      [sum_rows](const diskgnn::Hag& hag, const py::array& src, py::array& out, int num_threads,
                 const py::object& scale, bool self_loop) {
        const int64_t num_dst = static_cast<int64_t>(hag.indptr.size()) - 1;
        sum_rows(num_dst, src, out, scale, hag.num_src, num_dst, [&](auto in, auto o, int64_t dim, const float* k) {
          std::unique_ptr<float[]> agg(new float[hag.inputs.size() / 2 * dim]);  // every row written
          diskgnn::hag_sum(hag, in, dim, k, self_loop, agg.get(), o, num_threads);
        });
      },
      py::arg("hag"), py::arg("src"), py::arg("out").noconvert(), py::arg("num_threads"), py::arg("scale"),
      py::arg("self_loop"), "csc_sum over the HAG's block, through its aggregation nodes.");
  m.def(
      "hag_sum_transpose",
      [sum_rows](const diskgnn::Hag& hag, const py::array& grad_out, py::array& grad_src, int num_threads,
                 const py::object& scale, bool self_loop) {
        const int64_t num_dst = static_cast<int64_t>(hag.indptr.size()) - 1;
        sum_rows(num_dst, grad_out, grad_src, scale, num_dst, hag.num_src,
                 [&](auto g, auto o, int64_t dim, const float* k) {
                   std::unique_ptr<float[]> grad_agg(new float[hag.inputs.size() / 2 * dim]);  // zeroed inside
                   diskgnn::hag_sum_transpose(hag, g, dim, k, self_loop, grad_agg.get(), o, num_threads);
                 });
      },
      py::arg("hag"), py::arg("grad_out"), py::arg("grad_src").noconvert(), py::arg("num_threads"),
      py::arg("scale"), py::arg("self_loop"), "hag_sum's transpose, for backward.");

  py::class_<diskgnn::CscView>(m, "CscView", "A dataset's CSC topology, memory-mapped read-only.")
      .def(py::init<const std::string&, const std::string&, int64_t, int64_t, int>(), py::arg("indptr_path"),
           py::arg("indices_path"), py::arg("num_nodes"), py::arg("num_edges"), py::arg("indices_bytes_per_id"))
      .def_property_readonly("num_nodes", &diskgnn::CscView::num_nodes);

  auto sampling = [](const std::vector<int64_t>& fanouts, uint64_t seed, bool labor, bool layer_dependency,
                     uint64_t batch_dependency) {
    diskgnn::sampling_options o;
    o.fanouts = fanouts;
    o.seed = seed;
    o.labor = labor;
    o.layer_dependency = layer_dependency;
    o.batch_dependency = batch_dependency;
    return o;
  };
  m.def(
      "sample_batches",
      [sampling](const diskgnn::CscView& graph,
                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& seeds,
                 const std::vector<int64_t>& batch_offsets, const std::vector<uint64_t>& batch_keys,
                 const std::vector<int64_t>& fanouts, uint64_t seed, int num_threads, bool labor, bool layer_dependency,
                 uint64_t batch_dependency, int64_t partition_rows, const std::vector<uint64_t>& batch_masks,
                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& exclude_pairs,
                 const std::vector<int64_t>& exclude_offsets) {
        if (batch_offsets.empty() || batch_offsets.back() != seeds.size()) {
          throw std::invalid_argument("batch_offsets must end at len(seeds)");
        }
        diskgnn::sampling_options o = sampling(fanouts, seed, labor, layer_dependency, batch_dependency);
        o.partition_rows = partition_rows;
        o.batch_masks = batch_masks;
        if (!exclude_offsets.empty()) {
          if (exclude_pairs.ndim() != 2 || exclude_pairs.shape(1) != 2 || exclude_offsets.front() != 0 ||
              exclude_offsets.back() != exclude_pairs.shape(0)) {
            throw std::invalid_argument("exclude_pairs must be [E, 2] with exclude_offsets from 0 to E");
          }
          o.exclude_pairs = exclude_pairs.data();
          o.exclude_offsets = exclude_offsets;
        }
        std::vector<diskgnn::SampleRecord> records;
        {
          py::gil_scoped_release release;
          records = diskgnn::sample_batches(graph, seeds.data(), batch_offsets, batch_keys, o, num_threads);
        }
        py::list out;
        for (auto& r : records) {
          out.append(py::bytes(reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size()));
        }
        return out;
      },
      py::arg("graph"), py::arg("seeds"), py::arg("batch_offsets"), py::arg("batch_keys"), py::arg("fanouts"),
      py::arg("seed"), py::arg("num_threads"), py::arg("labor"), py::arg("layer_dependency"),
      py::arg("batch_dependency"), py::arg("partition_rows") = 0, py::arg("batch_masks") = std::vector<uint64_t>{},
      py::arg("exclude_pairs") = py::array_t<int64_t>(std::vector<py::ssize_t>{0, 2}),
      py::arg("exclude_offsets") = std::vector<int64_t>{},
      "Samples batches of seeds; returns one record (bytes) per batch, in order (layout in sampler.h); with "
      "batch_masks, batch b samples only neighbours v whose partition v // partition_rows has its bit set; with "
      "exclude_offsets, never along batch b's pairs exclude_pairs[exclude_offsets[b]:exclude_offsets[b + 1]] "
      "(source, destination).");
  m.def(
      "sample_hetero_batches",
      [sampling](const std::vector<const diskgnn::CscView*>& graphs, const std::vector<int>& src_types,
                 const std::vector<int>& dst_types, int num_types, int target_type,
                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& seeds,
                 const std::vector<int64_t>& batch_offsets, const std::vector<uint64_t>& batch_keys,
                 const std::vector<std::vector<int64_t>>& fanouts, uint64_t seed, int num_threads, bool labor,
                 bool layer_dependency, uint64_t batch_dependency,
                 const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& seed_types) {
        if (batch_offsets.empty() || batch_offsets.front() != 0 || batch_offsets.back() != seeds.size()) {
          throw std::invalid_argument("batch_offsets must run from 0 to len(seeds)");
        }
        if (seed_types.size() != 0 && seed_types.size() != seeds.size()) {
          throw std::invalid_argument("seed_types: one type per seed, or none (all of the target type)");
        }
        if (graphs.size() != src_types.size() || graphs.size() != dst_types.size()) {
          throw std::invalid_argument("need a source and a destination type per relation");
        }
        std::vector<diskgnn::HeteroRelation> rels;
        for (size_t r = 0; r < graphs.size(); ++r) rels.push_back({graphs[r], src_types[r], dst_types[r]});
        const diskgnn::sampling_options o = sampling({}, seed, labor, layer_dependency, batch_dependency);
        std::vector<diskgnn::SampleRecord> records;
        {
          py::gil_scoped_release release;
          records = diskgnn::sample_hetero_batches(rels, num_types, target_type, seeds.data(),
                                                   seed_types.size() ? seed_types.data() : nullptr, batch_offsets,
                                                   batch_keys, fanouts, o, num_threads);
        }
        py::list out;
        for (auto& r : records) out.append(py::bytes(reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size()));
        return out;
      },
      py::arg("graphs"), py::arg("src_types"), py::arg("dst_types"), py::arg("num_types"), py::arg("target_type"),
      py::arg("seeds"), py::arg("batch_offsets"), py::arg("batch_keys"), py::arg("fanouts"), py::arg("seed"),
      py::arg("num_threads"), py::arg("labor") = false, py::arg("layer_dependency") = false,
      py::arg("batch_dependency") = 1, py::arg("seed_types") = py::array_t<int32_t>(0),
      "Samples batches of target-type seeds (or of seed_types[i]) over typed relations (fanouts[hop][relation]; "
      "-1 all, 0 none), "
      "node-wise uniform or LABOR-0 per relation; one record (bytes) per batch, layout in sampler.h.");
  m.def(
      "labor_variates",
      [sampling](uint64_t seed, bool layer_dependency, uint64_t batch_dependency, uint64_t step, size_t hop,
                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& ids, int node_type) {
        const diskgnn::sampling_options o = sampling({}, seed, true, layer_dependency, batch_dependency);
        std::vector<double> r =
            diskgnn::labor_variates(o, step, hop, ids.data(), static_cast<size_t>(ids.size()), node_type);
        return py::array_t<double>(static_cast<py::ssize_t>(r.size()), r.data());
      },
      py::arg("seed"), py::arg("layer_dependency"), py::arg("batch_dependency"), py::arg("step"), py::arg("hop"),
      py::arg("ids"), py::arg("node_type") = 0,
      "LABOR's variates r_t of `ids` (of a typed graph's `node_type`) at a step and hop (uniform in (0, 1)).");

  m.def(
      "pack_regions",
      [](const std::string& features_path, uint64_t num_rows, uint64_t row_bytes, const id_array& ids,
         const id_array& starts, const id_array& offsets, const std::string& out_path, uint64_t chunk_bytes,
         uint64_t pack_memory, uint64_t max_write_bytes, unsigned threads, unsigned write_depth,
         const std::string& direct) {
        if (starts.ndim() != 1 || offsets.ndim() != 1 || starts.size() < 1 || offsets.size() != starts.size()) {
          throw std::invalid_argument("starts and offsets must be 1-d with one entry per region plus one");
        }
        diskgnn::packer_options o;
        o.chunk_bytes = chunk_bytes;
        o.pack_memory = pack_memory;
        o.max_write_bytes = max_write_bytes;
        o.threads = threads;
        o.write_depth = write_depth;
        o.direct = parse_direct(direct);
        diskgnn::pack_result r;
        {
          py::gil_scoped_release release;
          r = diskgnn::pack_regions(features_path, num_rows, row_bytes, ids.data(), static_cast<size_t>(ids.size()),
                                    starts.data(), offsets.data(), static_cast<size_t>(starts.size() - 1), out_path, o);
        }
        py::dict d;
        d["checksums"] = r.checksums;
        d["read_direct"] = r.read_direct;
        d["write_direct"] = r.write_direct;
        d["read_fallback_reason"] = r.read_fallback_reason;
        d["write_fallback_reason"] = r.write_fallback_reason;
        d["chunk_bytes"] = r.chunk_bytes;
        d["staging_bytes"] = r.staging_bytes;
        d["buffer_bytes"] = r.buffer_bytes;
        d["bytes_read"] = r.bytes_read;
        d["bytes_written"] = r.bytes_written;
        d["writes"] = r.writes;
        d["read_wait_s"] = r.read_wait_s;
        d["buffer_wait_s"] = r.buffer_wait_s;
        d["sync_s"] = r.sync_s;
        return d;
      },
      py::arg("features_path"), py::arg("num_rows"), py::arg("row_bytes"), py::arg("ids"), py::arg("starts"),
      py::arg("offsets"), py::arg("out_path"), py::arg("chunk_bytes"), py::arg("pack_memory"),
      py::arg("max_write_bytes"), py::arg("threads"), py::arg("write_depth"), py::arg("direct"),
      "Writes a pack file in one pass over the features (layout in packer.h); returns the regions' XXH3-64 "
      "checksums and I/O statistics.");
}
