// zipccl._zipccl: the codec, the `inspect` measurements and the hetero Layout for Python (nanobind).
// The Python layer (tools/python/zipccl) turns arrays and tensors into byte buffers and back; this
// module sees only contiguous buffers, and holds them (Py_buffer) while the GIL is released, so the
// exporter cannot free or resize them under the codec.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "frame_stream.h"
#include "inspect.h"
#include "common/settings.h"
#include "common/version.h"
#include "zipccl/codec.h"
#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/groups.h"
#include "zipccl/hetero/layout.h"
#include "zipccl/hetero/plan.h"

namespace nb = nanobind;
using namespace zipccl;

namespace {

// `zipccl compress` writes frames of at most this much input; the Python API cuts the same way, so
// that its output is byte for byte the tool's.
constexpr size_t kFrameInput = tools::kDefaultFrameInput;

struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A contiguous buffer of any exporter (bytes, bytearray, memoryview, numpy), held until destroyed.
class Buffer {
 public:
  Buffer(nb::handle h, bool writable) {
    if (PyObject_GetBuffer(h.ptr(), &view_, PyBUF_SIMPLE | (writable ? PyBUF_WRITABLE : 0)) != 0)
      throw nb::python_error();
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

[[noreturn]] void raise_status(codec::Status s, const std::string& where) {
  const std::string msg = where + ": " + codec::status_string(s);
  switch (s) {
    case codec::Status::kTruncated:
    case codec::Status::kBadMagic:
    case codec::Status::kBadVersion:
    case codec::Status::kCorrupt:
      throw FormatError(msg);
    default:
      throw std::invalid_argument(msg);
  }
}

codec::ElemType elem_type(int t) {
  switch (t) {
    case 0: return codec::ElemType::kNone;
    case 1: return codec::ElemType::kBf16;
    case 2: return codec::ElemType::kFp16;
    case 3: return codec::ElemType::kFp32;
    case 255: return codec::ElemType::kAuto;
  }
  throw std::invalid_argument("element type must be 0 (none), 1 (bf16), 2 (fp16), 3 (fp32) or 255 (auto), not " +
                              std::to_string(t));
}

codec::Isa isa_of(const std::string& name) {
  codec::Isa isa;
  if (!codec::parse_isa(name.c_str(), &isa))
    throw std::invalid_argument("isa must be auto, scalar, avx2, avx512 or neon, not '" + name + "'");
  return isa;
}

void check_threads(int threads) {
  if (threads < 1 || threads > 1024) throw std::invalid_argument("threads must be 1..1024, not " + std::to_string(threads));
}

codec::EncodeOptions encode_options(int type, int block_log2, int threads, const std::string& isa) {
  check_threads(threads);
  if (block_log2 != 0 && (block_log2 < 10 || block_log2 > 14))
    throw std::invalid_argument("block_log2 must be 0 (default) or 10..14, not " + std::to_string(block_log2));
  codec::EncodeOptions opt;
  opt.type = elem_type(type);
  opt.block_log2 = block_log2;
  opt.threads = threads;
  opt.isa = isa_of(isa);
  return opt;
}

// The bound of the whole stream that compress writes for n bytes (an empty input is one frame).
size_t stream_bound(size_t n) {
  size_t cap = codec::max_encoded_size(std::min(kFrameInput, n));
  for (size_t off = kFrameInput; off < n; off += kFrameInput) cap += codec::max_encoded_size(std::min(kFrameInput, n - off));
  return cap;
}

// Encodes src into dst[0, cap) as `zipccl compress` cuts it, without the GIL (the caller holds
// both buffers); returns the bytes written or raises.
size_t encode_stream(const uint8_t* src, size_t n, uint8_t* dst, size_t cap, const codec::EncodeOptions& opt) {
  size_t written = 0, off = 0;
  codec::Status st = codec::Status::kOk;
  {
    nb::gil_scoped_release unlocked;
    do {
      const size_t len = std::min(kFrameInput, n - off);
      size_t frame = 0;
      st = codec::encode(src + off, len, dst + written, cap - written, &frame, opt);
      if (st != codec::Status::kOk) break;
      written += frame;
      off += len;
    } while (off < n);
  }
  if (st != codec::Status::kOk) raise_status(st, "compress (input byte " + std::to_string(off) + ")");
  return written;
}

nb::bytes compress(nb::handle src, int type, int block_log2, int threads, const std::string& isa) {
  const codec::EncodeOptions opt = encode_options(type, block_log2, threads, isa);
  Buffer in(src, false);
  const size_t cap = stream_bound(in.size());
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(cap));
  if (!out) throw nb::python_error();
  nb::object owner = nb::steal(out);
  // The bytes object is not yet visible to any other thread: writing it without the GIL is safe.
  const size_t written = encode_stream(in.data(), in.size(), reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)), cap, opt);
  owner.release();
  if (_PyBytes_Resize(&out, static_cast<Py_ssize_t>(written)) != 0) throw nb::python_error();  // it freed out
  return nb::steal<nb::bytes>(out);
}

// compress into a caller's buffer of at least max_compressed_size(n) bytes: a loop that reuses
// its buffer does not pay for first touches of fresh memory on every call.
size_t compress_into(nb::handle src, nb::handle dst, int type, int block_log2, int threads, const std::string& isa) {
  const codec::EncodeOptions opt = encode_options(type, block_log2, threads, isa);
  Buffer in(src, false);
  Buffer out(dst, true);
  const size_t cap = stream_bound(in.size());
  if (out.size() < cap)
    throw std::invalid_argument("out holds " + std::to_string(out.size()) + " bytes; compressing " +
                                std::to_string(in.size()) + " bytes needs max_compressed_size() = " + std::to_string(cap));
  return encode_stream(in.data(), in.size(), out.data(), out.size(), opt);
}

using FrameTuple = std::tuple<int, int, uint64_t, uint64_t, uint32_t, uint32_t>;

// Every frame header of a stream (frames back to back, as `zipccl compress` writes them).
std::vector<codec::FrameInfo> walk(const uint8_t* p, size_t n) {
  if (n == 0) throw FormatError("empty input is not a zipccl stream");
  std::vector<codec::FrameInfo> frames;
  size_t off = 0;
  while (off < n) {
    codec::FrameInfo info{};
    const codec::Status st = codec::read_frame_info(p + off, n - off, &info);
    const std::string where = "frame " + std::to_string(frames.size()) + " at byte " + std::to_string(off);
    if (st != codec::Status::kOk) raise_status(st, where);
    if (info.frame_size == 0 || info.frame_size > n - off)
      throw FormatError(where + ": " + codec::status_string(codec::Status::kTruncated));
    frames.push_back(info);
    off += info.frame_size;
  }
  return frames;
}

std::vector<FrameTuple> frames(nb::handle src) {
  Buffer in(src, false);
  std::vector<FrameTuple> out;
  for (const codec::FrameInfo& f : walk(in.data(), in.size()))
    out.emplace_back(static_cast<int>(f.kind), static_cast<int>(f.type), f.original_size, f.frame_size, f.num_blocks,
                     f.block_elems);
  return out;
}

// Decodes a whole stream into dst, whose size must be the stream's decoded size.
size_t decompress_into(nb::handle src, nb::handle dst, int threads, const std::string& isa) {
  check_threads(threads);
  codec::DecodeOptions opt;
  opt.threads = threads;
  opt.isa = isa_of(isa);
  Buffer in(src, false);
  Buffer out(dst, true);
  const std::vector<codec::FrameInfo> fs = walk(in.data(), in.size());
  uint64_t total = 0;
  for (const codec::FrameInfo& f : fs) total += f.original_size;
  if (total != out.size())
    throw std::invalid_argument("out holds " + std::to_string(out.size()) + " bytes; the frames decode to " +
                                std::to_string(total));
  codec::Status st = codec::Status::kOk;
  size_t bad = 0, bad_off = 0;
  {
    nb::gil_scoped_release unlocked;
    size_t in_off = 0, out_off = 0;
    for (size_t i = 0; i < fs.size(); ++i) {
      size_t got = 0;
      st = codec::decode(in.data() + in_off, fs[i].frame_size, out.data() + out_off, fs[i].original_size, &got, opt);
      if (st == codec::Status::kOk && got != fs[i].original_size) st = codec::Status::kCorrupt;
      if (st != codec::Status::kOk) {
        bad = i;
        bad_off = in_off;
        break;
      }
      in_off += fs[i].frame_size;
      out_off += fs[i].original_size;
    }
  }
  if (st != codec::Status::kOk)
    raise_status(st, "frame " + std::to_string(bad) + " at byte " + std::to_string(bad_off));
  return static_cast<size_t>(total);
}

// The figures of one row of `zipccl inspect` (tools/zipccl/inspect.h), for one buffer.
nb::dict inspect(nb::handle src, int type, int threads) {
  check_threads(threads);
  Buffer in(src, false);
  tools::TensorView view;
  view.name = "tensor";
  view.dtype = "raw";
  view.data = in.data();
  view.size = in.size();
  tools::TensorReport r;
  std::string error;
  bool ok;
  {
    nb::gil_scoped_release unlocked;
    ok = tools::inspect_tensor(view, elem_type(type), threads, &r, &error);
  }
  if (!ok) throw std::runtime_error(error);
  nb::dict d;
  d["dtype"] = codec::elem_type_name(r.type);
  d["type_detected"] = r.type_detected;
  d["bytes"] = r.bytes;
  d["compressed_bytes"] = r.actual;
  d["ratio"] = r.ratio();
  d["entropy_bits"] = r.entropy_bits;
  d["predicted_bytes"] = r.predicted;
  d["bound_ratio"] = r.bound_ratio();
  static const char* const kKinds[] = {"raw", "const", "coded"};
  d["frame_kind"] = kKinds[static_cast<int>(r.kind)];
  int lo = 0, hi = 0;
  if (r.exponents.normal_range(&lo, &hi)) {
    d["exponent_range"] = nb::make_tuple(lo - r.exponents.bias, hi - r.exponents.bias);
  } else {
    d["exponent_range"] = nb::none();
  }
  d["exponent_counts"] = r.exponents.counts;
  d["distinct_exponents"] = r.exponents.distinct();
  d["zero_or_subnormal"] = r.exponents.zero_or_subnormal();
  d["inf_or_nan"] = r.exponents.inf_or_nan();
  d["exponent_summary"] = tools::exponent_summary(r.exponents);
  return d;
}

// ---- hetero ----

hetero::ModuleSpec module_spec(const nb::dict& d, const char* what) {
  hetero::ModuleSpec m;
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "name") m.name = nb::cast<std::string>(v);
    else if (key == "tp") m.tp = nb::cast<int>(v);
    else if (key == "cp") m.cp = nb::cast<int>(v);
    else if (key == "pp") m.pp = nb::cast<int>(v);
    else if (key == "dp") m.dp = nb::cast<int>(v);
    else if (key == "sequence_parallel") m.sequence_parallel = nb::cast<bool>(v);
    else if (key == "first_rank") m.first_rank = nb::cast<int>(v);
    else if (key == "num_ranks") m.num_ranks = nb::cast<int>(v);
    else if (key == "order") m.order = hetero::parse_rank_order(nb::cast<std::string>(v));
    else
      throw std::invalid_argument(std::string(what) + ": unknown field '" + key +
                                  "' (name, tp, cp, pp, dp, sequence_parallel, first_rank, num_ranks, order)");
  }
  return m;
}

nb::dict module_dict(const hetero::Module& m) {
  nb::dict d;
  d["name"] = m.name();
  d["role"] = m.role() == hetero::Role::llm ? "llm" : "encoder";
  d["tp"] = m.tp();
  d["cp"] = m.cp();
  d["dp"] = m.dp();
  d["pp"] = m.pp();
  d["first_rank"] = m.first_rank();
  d["num_ranks"] = m.num_ranks();
  d["sequence_parallel"] = m.sequence_parallel();
  d["order"] = hetero::to_string(m.order());
  nb::list strides;
  for (hetero::Dim dim : {hetero::Dim::tp, hetero::Dim::cp, hetero::Dim::dp, hetero::Dim::pp}) strides.append(m.stride(dim));
  d["strides"] = strides;
  return d;
}

hetero::Layout make_layout(int world_size, const nb::dict& llm, const nb::list& encoders) {
  hetero::LayoutSpec spec;
  spec.world_size = world_size;
  spec.llm = module_spec(llm, "llm");
  for (size_t i = 0; i < encoders.size(); ++i)
    spec.encoders.push_back(module_spec(nb::cast<nb::dict>(encoders[i]), ("encoder " + std::to_string(i)).c_str()));
  return hetero::Layout(spec);
}

// Validates the spec with the C++ Layout (its messages, as LayoutError) and returns the modules as
// the C++ library derived them: LLM first, then the encoders.
nb::list validate_layout(int world_size, const nb::dict& llm, const nb::list& encoders) {
  const hetero::Layout layout = make_layout(world_size, llm, encoders);
  nb::list out;
  for (const hetero::Module& m : layout.modules()) out.append(module_dict(m));
  return out;
}

// (kind, module index, groups) for every family, in all_group_families' order (every process gets
// the same list: torch.distributed.new_group must be called in the same order everywhere).
std::vector<std::tuple<std::string, int, std::vector<std::vector<int>>>> group_families(int world_size, const nb::dict& llm,
                                                                                    const nb::list& encoders) {
  const hetero::Layout layout = make_layout(world_size, llm, encoders);
  std::vector<std::tuple<std::string, int, std::vector<std::vector<int>>>> out;
  for (const hetero::GroupFamily& f : hetero::all_group_families(layout))
    out.emplace_back(hetero::group_kind_name(f.kind), f.module, f.groups);
  return out;
}

hetero::SampleAssignment assignment(const std::string& rule, const std::vector<int>& replica) {
  hetero::SampleAssignment a;
  if (rule == "contiguous") a.rule = hetero::AssignmentRule::contiguous;
  else if (rule == "balanced") a.rule = hetero::AssignmentRule::balanced;
  else if (rule == "given") a.rule = hetero::AssignmentRule::given, a.replica = replica;
  else throw std::invalid_argument("assignment must be 'contiguous', 'balanced' or a list of replicas, not '" + rule + "'");
  return a;
}

struct BatchArgs {
  BatchArgs(std::vector<int64_t> t, int64_t h, int64_t e, std::string er, std::string lr, std::vector<int> erep,
            std::vector<int> lrep)
      : tokens(std::move(t)), hidden(h), element_size(e), encoder_rule(std::move(er)), llm_rule(std::move(lr)),
        encoder_replica(std::move(erep)), llm_replica(std::move(lrep)) {}
  std::vector<int64_t> tokens;
  int64_t hidden, element_size;
  std::string encoder_rule, llm_rule;
  std::vector<int> encoder_replica, llm_replica;

  hetero::BoundaryBatch batch() const {
    hetero::BoundaryBatch b(tokens, hidden, element_size);
    b.encoder_assignment = assignment(encoder_rule, encoder_replica);
    b.llm_assignment = assignment(llm_rule, llm_replica);
    hetero::validate_batch(b);
    return b;
  }
};

using TransferTuple = std::tuple<int, int, int, int64_t, int64_t, int, int64_t, int64_t, int64_t>;

// A boundary plan: phases of (src, dst, sample, row_begin, row_end, src_buffer (0 source,
// 1 destination), src_offset, dst_offset, bytes), and per-rank buffer sizes.
nb::dict plan(int world_size, const nb::dict& llm, const nb::list& encoders, int encoder, const BatchArgs& args,
              bool backward, const std::string& strategy) {
  const hetero::Layout layout = make_layout(world_size, llm, encoders);
  hetero::PlanOptions opt;
  if (strategy == "direct") opt.strategy = hetero::Strategy::direct;
  else if (strategy == "scatter_allgather") opt.strategy = hetero::Strategy::scatter_allgather;
  else if (strategy == "automatic") opt.strategy = hetero::Strategy::automatic;
  else throw std::invalid_argument("strategy must be direct, scatter_allgather or automatic, not '" + strategy + "'");
  const hetero::BoundaryPlan p = hetero::plan_boundary(layout, encoder, args.batch(),
                                                       backward ? hetero::Direction::backward : hetero::Direction::forward, opt);
  std::vector<std::vector<TransferTuple>> phases;
  for (const auto& ph : p.phases) {
    std::vector<TransferTuple> out;
    out.reserve(ph.size());
    for (const hetero::Transfer& t : ph)
      out.emplace_back(t.src, t.dst, t.sample, t.rows.begin, t.rows.end, static_cast<int>(t.src_buffer), t.src_offset,
                       t.dst_offset, t.bytes);
    phases.push_back(std::move(out));
  }
  nb::dict d;
  d["strategy"] = hetero::strategy_name(p.strategy);
  d["source_module"] = p.source_module;
  d["destination_module"] = p.destination_module;
  d["row_bytes"] = p.row_bytes;
  d["phases"] = phases;
  d["source_bytes"] = p.source_bytes;
  d["destination_bytes"] = p.destination_bytes;
  return d;
}

// Where `rank` keeps module `module`'s part of the boundary tensor: (sample, row_begin, row_end,
// byte offset) segments of its packed local buffer (batch.h).
std::vector<std::tuple<int, int64_t, int64_t, int64_t>> segments(int world_size, const nb::dict& llm, const nb::list& encoders,
                                                                 int module, const BatchArgs& args, int rank) {
  const hetero::Layout layout = make_layout(world_size, llm, encoders);
  if (module < 0 || module >= static_cast<int>(layout.modules().size()))
    throw std::invalid_argument("module index " + std::to_string(module) + " out of range");
  std::vector<std::tuple<int, int64_t, int64_t, int64_t>> out;
  for (const hetero::BufferSegment& s : hetero::buffer_segments(layout.modules()[module], args.batch(), rank))
    out.emplace_back(s.sample, s.rows.begin, s.rows.end, s.offset);
  return out;
}

}  // namespace

NB_MODULE(_zipccl, m) {
  m.doc() = "zipccl's native part: the codec, inspect, the hetero Layout (use the zipccl package)";
  nb::exception<FormatError>(m, "FormatError", PyExc_ValueError);
  nb::exception<hetero::LayoutError>(m, "LayoutError", PyExc_ValueError);
  nb::exception<hetero::LimitError>(m, "LimitError", PyExc_ValueError);
  nb::exception<hetero::BatchError>(m, "BatchError", PyExc_ValueError);
  m.def("compress", &compress, nb::arg("src"), nb::arg("type"), nb::arg("block_log2"), nb::arg("threads"),
        nb::arg("isa"));
  m.def("frames", &frames, nb::arg("src"));
  m.def("decompress_into", &decompress_into, nb::arg("src"), nb::arg("dst"), nb::arg("threads"), nb::arg("isa"));
  m.def("inspect", &inspect, nb::arg("src"), nb::arg("type"), nb::arg("threads"));
  m.def("compress_into", &compress_into, nb::arg("src"), nb::arg("dst"), nb::arg("type"), nb::arg("block_log2"),
        nb::arg("threads"), nb::arg("isa"));
  m.def("max_compressed_size", &stream_bound, nb::arg("n"));
  m.def("simd_path", [] { return std::string(codec::simd_path()); });
  m.def("cpu_features", &codec::cpu_features);
  m.def("version", [] { return std::string(zipccl::version_string()); });
  // The plugin's settings registry, so that enable() knows exactly the names the plugin reads.
  m.def("setting_names", [] {
    std::vector<std::string> names;
    for (const net::SettingInfo& s : net::describe_settings()) names.push_back(s.name);
    return names;
  });
  m.def("validate_layout", &validate_layout, nb::arg("world_size"), nb::arg("llm"), nb::arg("encoders"));
  m.def("group_families", &group_families, nb::arg("world_size"), nb::arg("llm"), nb::arg("encoders"));
  nb::class_<BatchArgs>(m, "Batch")
      .def(nb::init<std::vector<int64_t>, int64_t, int64_t, std::string, std::string, std::vector<int>, std::vector<int>>(),
           nb::arg("tokens"), nb::arg("hidden"), nb::arg("element_size"), nb::arg("encoder_rule"), nb::arg("llm_rule"),
           nb::arg("encoder_replica"), nb::arg("llm_replica"));
  m.def("plan", &plan, nb::arg("world_size"), nb::arg("llm"), nb::arg("encoders"), nb::arg("encoder"), nb::arg("batch"),
        nb::arg("backward"), nb::arg("strategy"));
  m.def("segments", &segments, nb::arg("world_size"), nb::arg("llm"), nb::arg("encoders"), nb::arg("module"),
        nb::arg("batch"), nb::arg("rank"));
}
