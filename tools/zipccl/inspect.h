// `zipccl inspect`: what zipccl does to each tensor of a checkpoint or tensor dump. Per tensor: the
// element type, the histogram of IEEE exponents, the order-0 entropy of the codec's plane model
// (tools/zipccl/entropy.h), the size that bound predicts, and the size zipccl's codec actually produces
// (every frame decoded again and compared). The text table and the SVG picture (tools/zipccl/svg.h) are
// both drawn from an InspectReport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/units.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

// Counts of the raw exponent field: 256 bins for bf16 and fp32, 32 for fp16; empty for other types.
// Field 0 holds zeros and subnormals, the all-ones field infinities and NaNs.
struct ExponentHistogram {
  int bits = 0;  // 8 (bf16, fp32), 5 (fp16), 0 (no float type)
  int bias = 0;  // 127, 15
  std::vector<uint64_t> counts;
  uint64_t total = 0;

  int max_field() const { return (1 << bits) - 1; }
  // Lowest and highest field of a normal number that occurs; false when none does.
  bool normal_range(int* lo, int* hi) const;
  uint64_t zero_or_subnormal() const { return counts.empty() ? 0 : counts[0]; }
  uint64_t inf_or_nan() const { return counts.empty() ? 0 : counts[max_field()]; }
  int distinct() const;
};

ExponentHistogram exponent_histogram(const uint8_t* data, size_t bytes, codec::ElemType t);

struct TensorReport {
  std::string name;
  std::string dtype;  // as the file spells it
  std::vector<uint64_t> shape;
  codec::ElemType type = codec::ElemType::kNone;  // the type the codec was given
  bool type_detected = false;                     // chosen by detect_elem_type (raw input, no -t)
  size_t bytes = 0;
  ExponentHistogram exponents;
  double entropy_bits = 0;  // per element (per byte for kNone): order-0, whole tensor, sum of planes
  size_t predicted = 0;     // bytes that bound predicts (bytes * entropy / element bits)
  size_t actual = 0;        // bytes of zipccl frames
  codec::FrameKind kind = codec::FrameKind::kRaw;  // of the first frame

  double ratio() const;        // bytes / actual
  double bound_ratio() const;  // bytes / predicted (infinity for a constant tensor)
};

struct InspectReport {
  std::string file;
  std::vector<TensorReport> tensors;
  size_t total_bytes = 0;
  size_t total_actual = 0;
  size_t total_predicted = 0;
};

// Measures one tensor. `type` is the element type to code it as (kAuto: detect from the bytes).
// Fails (false, *error set) only if a frame does not decode back to the input.
bool inspect_tensor(const TensorView& t, codec::ElemType type, int threads, TensorReport* out,
                    std::string* error);

// Loads a .safetensors, .npy or raw file and measures every tensor. Tensors whose dtype is a float
// type are coded as that type; the others (raw files, integer tensors) as `untyped` (kAuto: detect).
bool inspect_file(const std::string& path, codec::ElemType untyped, int threads, InspectReport* out,
                  std::string* error);

// The histogram as one line of text: "-9..3 .:=#%=:." - the range of unbiased exponents of normal
// numbers, then one character per exponent (or per group of exponents when the range is wider than
// `width`), darker for more elements; zeros/subnormals and inf/NaN are listed apart when present.
std::string exponent_summary(const ExponentHistogram& h, int width = 24);

// The per-tensor table and the summary of what zipccl would save, as printed by `zipccl inspect`.
std::string report_table(const InspectReport& r);

// Whether the file starts with a zipccl frame: a stream written by `zipccl compress`.
bool is_frame_stream(const std::string& path);
// Lists such a stream to `out`, one line per frame (offset, kind, type, block size, bytes before and
// after, ratio), every frame decoded to check it, then the totals. Reads the frames one at a time
// into reused buffers (tools/zipccl/inspect_stream.cpp). False with *error at the first frame that does not
// decode or is cut short.
bool inspect_stream(const std::string& path, int threads, FILE* out, std::string* error);

// Byte counts for people: the settings' grammar's formatter (binary units).
inline std::string human_bytes(double n) { return units::human_size(n); }

}  // namespace tools
}  // namespace zipccl
