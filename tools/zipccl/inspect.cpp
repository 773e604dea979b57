#include "inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "entropy.h"

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;

// Larger tensors are coded as several frames (one frame carries < 4 GiB), as the plugin would.
constexpr size_t kFrameBytes = size_t{1} << 30;

double safe_ratio(size_t in, size_t out) {
  if (in == 0) return 1;
  return out ? static_cast<double>(in) / static_cast<double>(out) : std::numeric_limits<double>::infinity();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string ratio_text(double r) {
  return std::isinf(r) ? "inf" : fmt("%.3fx", r);
}

}  // namespace

bool ExponentHistogram::normal_range(int* lo, int* hi) const {
  *lo = -1;
  *hi = -1;
  for (int f = 1; f < max_field(); ++f) {
    if (!counts[f]) continue;
    if (*lo < 0) *lo = f;
    *hi = f;
  }
  return *lo >= 0;
}

int ExponentHistogram::distinct() const {
  int n = 0;
  for (uint64_t c : counts) n += c != 0;
  return n;
}

ExponentHistogram exponent_histogram(const uint8_t* data, size_t bytes, ElemType t) {
  ExponentHistogram h;
  if (t == ElemType::kBf16 || t == ElemType::kFp32) {
    h.bits = 8;
    h.bias = 127;
  } else if (t == ElemType::kFp16) {
    h.bits = 5;
    h.bias = 15;
  } else {
    return h;
  }
  h.counts.assign(size_t{1} << h.bits, 0);
  const size_t es = codec::elem_size(t);
  const size_t n = bytes / es;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = data + i * es;
    unsigned field;
    if (t == ElemType::kFp32) {
      uint32_t v;
      std::memcpy(&v, e, 4);
      field = (v >> 23) & 0xFF;
    } else {
      uint16_t v = static_cast<uint16_t>(e[0] | (e[1] << 8));
      field = t == ElemType::kBf16 ? (v >> 7) & 0xFF : (v >> 10) & 0x1F;
    }
    ++h.counts[field];
  }
  h.total = n;
  return h;
}

double TensorReport::ratio() const {
  return safe_ratio(bytes, actual);
}
double TensorReport::bound_ratio() const {
  return safe_ratio(bytes, predicted);
}

bool inspect_tensor(const TensorView& t, ElemType type, int threads, TensorReport* out, std::string* error) {
  TensorReport r;
  r.name = t.name;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.bytes = t.size;
  if (type == ElemType::kAuto) {
    type = codec::detect_elem_type(t.data, t.size);
    r.type_detected = true;
  }
  r.type = type;
  r.exponents = exponent_histogram(t.data, t.size, type);

  const EntropyBound b = entropy_bound(t.data, t.size, type);
  for (const PlaneEntropy& p : b.planes) r.entropy_bits += p.whole_bits;
  r.predicted = std::isinf(b.whole_ratio)
                    ? 0
                    : static_cast<size_t>(std::ceil(static_cast<double>(t.size) / b.whole_ratio));

  std::vector<uint8_t> frame(codec::max_encoded_size(std::min(t.size, kFrameBytes)));
  std::vector<uint8_t> back(std::min(t.size, kFrameBytes));
  codec::EncodeOptions eo;
  eo.type = type;
  eo.threads = threads;
  codec::DecodeOptions dopt;
  dopt.threads = threads;
  size_t off = 0;
  do {
    const size_t n = std::min(kFrameBytes, t.size - off);
    size_t frame_size = 0, back_size = 0;
    codec::Status s = codec::encode(t.data + off, n, frame.data(), frame.size(), &frame_size, eo);
    if (s == codec::Status::kOk)
      s = codec::decode(frame.data(), frame_size, back.data(), back.size(), &back_size, dopt);
    if (s != codec::Status::kOk || back_size != n || (n && std::memcmp(back.data(), t.data + off, n) != 0)) {
      *error = "tensor '" + t.name + "': the codec's round trip failed (" + codec::status_string(s) + ")";
      return false;
    }
    if (off == 0) {
      codec::FrameInfo info{};
      if (codec::read_frame_info(frame.data(), frame_size, &info) == codec::Status::kOk) r.kind = info.kind;
    }
    r.actual += frame_size;
    off += n;
  } while (off < t.size);
  *out = std::move(r);
  return true;
}

bool inspect_file(const std::string& path, ElemType untyped, int threads, InspectReport* out,
                  std::string* error) {
  TensorFile f;
  if (!load_tensor_file(path, &f, error)) return false;
  InspectReport r;
  r.file = path;
  for (const TensorView& t : f.tensors) {
    TensorReport tr;
    if (!inspect_tensor(t, t.type != ElemType::kNone ? t.type : untyped, threads, &tr, error)) return false;
    r.total_bytes += tr.bytes;
    r.total_actual += tr.actual;
    r.total_predicted += tr.predicted;
    r.tensors.push_back(std::move(tr));
  }
  *out = std::move(r);
  return true;
}

std::string exponent_summary(const ExponentHistogram& h, int width) {
  if (h.bits == 0) return "-";
  int lo, hi;
  std::string s;
  if (h.normal_range(&lo, &hi)) {
    static const char kRamp[] = " .:-=+*#%@";  // 10 levels, by share of the fullest column
    const int span = hi - lo + 1;
    const int group = (span + width - 1) / width;
    std::vector<uint64_t> col((span + group - 1) / group, 0);
    for (int f = lo; f <= hi; ++f) col[(f - lo) / group] += h.counts[f];
    const uint64_t top = *std::max_element(col.begin(), col.end());
    s = std::to_string(lo - h.bias) + ".." + std::to_string(hi - h.bias) + " ";
    for (uint64_t c : col) {
      int level = c == 0 ? 0 : 1 + static_cast<int>(8.0 * static_cast<double>(c) / static_cast<double>(top));
      s += kRamp[std::min(level, 9)];
    }
    if (group > 1) s += " (" + std::to_string(group) + "/char)";
  } else {
    s = "no normals";
  }
  if (h.total && h.zero_or_subnormal())
    s += " z" +
         fmt("%.0f%%", 100.0 * static_cast<double>(h.zero_or_subnormal()) / static_cast<double>(h.total));
  if (h.inf_or_nan()) s += " inf/nan " + std::to_string(h.inf_or_nan());
  return s;
}

std::string report_table(const InspectReport& r) {
  size_t name_w = 6;
  for (const TensorReport& t : r.tensors) name_w = std::max(name_w, t.name.size());
  name_w = std::min<size_t>(name_w, 48);
  std::string o = "zipccl inspect " + r.file + "\n\n";
  o += pad("tensor", name_w, false) + "  type  " + pad("shape", 14, false) + pad("bytes", 12, true) + "  " +
       pad("exponents (2^lo..2^hi, histogram)", 40, false) + pad("H b/el", 7, true) + pad("bound", 12, true) +
       pad("zipccl", 12, true) + pad("ratio", 9, true) + pad("bound", 9, true) + "\n";
  for (const TensorReport& t : r.tensors) {
    std::string name = t.name.size() > name_w ? t.name.substr(0, name_w - 1) + "~" : t.name;
    std::string type = codec::elem_type_name(t.type);
    if (t.type_detected) type += "?";
    o += pad(name, name_w, false) + "  " + pad(type, 4, false) + "  " +
         pad(shape_string(t.shape), 14, false) + pad(std::to_string(t.bytes), 12, true) + "  " +
         pad(exponent_summary(t.exponents), 40, false) + pad(fmt("%.2f", t.entropy_bits), 7, true) +
         pad(std::to_string(t.predicted), 12, true) + pad(std::to_string(t.actual), 12, true) +
         pad(ratio_text(t.ratio()), 9, true) + pad(ratio_text(t.bound_ratio()), 9, true) + "\n";
  }
  const double ratio = safe_ratio(r.total_bytes, r.total_actual);
  const double saved =
      r.total_bytes ? 1.0 - static_cast<double>(r.total_actual) / static_cast<double>(r.total_bytes) : 0;
  o += "\n" + std::to_string(r.tensors.size()) + " tensor(s), " + std::to_string(r.total_bytes) + " bytes (" +
       human_bytes(static_cast<double>(r.total_bytes)) + "); zipccl frames " +
       std::to_string(r.total_actual) + " bytes (" + ratio_text(ratio) + "); order-0 entropy bound " +
       std::to_string(r.total_predicted) + " bytes (" +
       ratio_text(safe_ratio(r.total_bytes, r.total_predicted)) + ")\n";
  o += "on the wire: tensors like these cross the network in " +
       human_bytes(static_cast<double>(r.total_actual)) + " instead of " +
       human_bytes(static_cast<double>(r.total_bytes)) + ", " + fmt("%.1f%%", 100.0 * saved) +
       " less traffic per transfer (zipccl frames, headers included)\n";
  o += "columns: type '?' = detected from the bytes; H = order-0 entropy of the codec's byte planes in bits "
       "per "
       "element; bound = bytes at that entropy; z = zeros and subnormals\n";
  return o;
}

}  // namespace tools
}  // namespace zipccl
