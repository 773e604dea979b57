// zipccl codec: lossless compression of floating-point training traffic.
//
// The wire format is normative and written out in gpu_codec/FORMAT.md; this header is the CPU API.
// Every function here is thread-safe (no global mutable state) and never allocates on the encode or
// decode path: callers size buffers with max_encoded_size() up front.
//
// Ownership: the caller owns every buffer. Inputs are never modified. Outputs are written only
// inside [dst, dst + dst_capacity).
//
// Untrusted input: decode() validates every header field, offset and length of a frame. A malformed
// frame returns an error status; decode never reads outside [src, src + src_size) and never writes
// outside [dst, dst + dst_capacity). It does not abort and does not throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zipccl {
namespace codec {

// Element types. The numeric values are the wire values of the frame header's `dtype` field.
enum class ElemType : uint8_t {
  kNone = 0,  // no element structure (raw and constant frames over bytes)
  kBf16 = 1,
  kFp16 = 2,
  kFp32 = 3,
  kAuto = 255,  // options only: detect from the bytes (see detect_elem_type)
};

// Bytes per element of a concrete type (kNone: 1; kAuto: 0).
size_t elem_size(ElemType t);
const char* elem_type_name(ElemType t);  // "bf16", "fp16", "fp32", "none", "auto"
// Parses "bf16" / "fp16" / "fp32" / "auto" (case-sensitive). Returns false on anything else.
bool parse_elem_type(const char* s, ElemType* out);

enum class Status : int {
  kOk = 0,
  kInvalidArgument,  // null pointer with non-zero size, bad option value
  kDstTooSmall,      // dst_capacity is smaller than the output needs
  kTooLarge,         // input larger than one frame can carry (kMaxFrameInput)
  kTruncated,        // frame shorter than its header says
  kBadMagic,         // not a zipccl frame
  kBadVersion,       // a zipccl frame of a version this build does not decode
  kCorrupt,          // a field, offset, code table or bit stream is inconsistent
};
const char* status_string(Status s);

// Largest input one frame carries. Larger buffers are split into several frames by the caller
// (the tool and the plugin do so); 4 GiB - 1 keeps every in-frame offset a 32-bit value.
constexpr uint64_t kMaxFrameInput = 0xFFFFFFFFull;

// Upper bound of encode()'s output for an n-byte input, for every input and option.
size_t max_encoded_size(size_t n);

// The CPU encoder's block size when EncodeOptions::block_log2 is 0: 16384 elements (the CUDA
// encoder's default is 8192: gpu::kDefaultBlockLog2).
constexpr int kDefaultBlockLog2 = 14;

// The CPU kernel sets. Every set writes the same bytes; they differ in speed and in the
// instructions they need. kAuto: the fastest set this build and CPU run (AVX-512, else AVX2; NEON;
// else scalar).
enum class Isa : uint8_t { kAuto = 0, kScalar, kAvx2, kAvx512, kNeon };
const char* isa_name(Isa isa);  // "auto", "scalar", "avx2", "avx512", "neon"
// Parses isa_name's strings (case-sensitive). Returns false on anything else.
bool parse_isa(const char* s, Isa* out);
// Whether this build and this CPU run the set (kAuto and kScalar: always). Reads cpuid (HWCAP on
// AArch64) once per process; thread-safe.
bool isa_supported(Isa isa);
// The set encode() and decode() run when asked for `requested`: itself where isa_supported(),
// otherwise (and for kAuto) the fastest set that is. Never kAuto.
Isa effective_isa(Isa requested);
// Why isa_supported(isa) is false: the CPU features the set needs that this CPU lacks
// ("avx512f avx512bw avx512vbmi"), or "not in this build"; "" when it is supported.
std::string isa_missing(Isa isa);
// The CPU features the sets are chosen from that this CPU has ("popcnt avx2 bmi2"; "" for none).
std::string cpu_features();

struct EncodeOptions {
  ElemType type = ElemType::kAuto;  // element type of the input; kAuto detects it
  // log2 of elements per block, 10..14; 0 picks kDefaultBlockLog2 (FORMAT.md section 6).
  int block_log2 = 0;
  // Threads for large inputs (>= 1). Blocks are coded independently, so the output is the same
  // byte string whatever the thread count. Threads are created per call: use > 1 only for inputs of
  // several MiB.
  int threads = 1;
  // Kernel set (effective_isa(isa) runs; output is identical whichever).
  Isa isa = Isa::kAuto;
  // Shorthand for isa = Isa::kScalar, which it overrides.
  bool force_scalar = false;
};

struct DecodeOptions {
  int threads = 1;
  Isa isa = Isa::kAuto;       // as EncodeOptions::isa
  bool force_scalar = false;  // as EncodeOptions::force_scalar
  // Writes the output around the caches (streaming stores, where the kernel set has them) whatever
  // its size; without it only outputs of 32 MiB and more are. For a caller that decodes frame after
  // frame into reused buffers that other traffic evicts before it reads them again: `zipccl
  // decompress` of 8 MiB frames decoded 15% faster with it (docs/benchmarks-journal.md section 8). Same bytes.
  bool stream_out = false;
};

// Encodes src[0, n) into one frame at dst. On kOk, *encoded_size is the frame's length.
// The frame is never larger than max_encoded_size(n); if dst_capacity is smaller than that the
// encoder still succeeds whenever the frame it would produce fits (it then falls back to a raw
// frame if a coded one does not fit), and returns kDstTooSmall otherwise.
Status encode(const void* src, size_t n, void* dst, size_t dst_capacity, size_t* encoded_size,
              const EncodeOptions& opt = EncodeOptions());

// Decodes one frame src[0, src_size) into dst. On kOk, *decoded_size is the original length.
// The frame must span exactly src_size bytes (trailing bytes are an error: kCorrupt).
Status decode(const void* src, size_t src_size, void* dst, size_t dst_capacity, size_t* decoded_size,
              const DecodeOptions& opt = DecodeOptions());

enum class FrameKind : uint8_t { kRaw = 0, kConst = 1, kCoded = 2 };

struct FrameInfo {
  FrameKind kind;
  ElemType type;
  uint64_t original_size;  // bytes decode() writes
  uint64_t frame_size;     // bytes the frame occupies, header included
  uint32_t num_blocks;     // coded frames; 0 otherwise
  uint32_t block_elems;    // elements per block (coded frames); 0 otherwise
};

// Reads and validates the frame header (not the blocks). Use it to size a decode buffer.
Status read_frame_info(const void* src, size_t src_size, FrameInfo* info);

// Picks the element type whose exponent coding is predicted to pay most on a sample of the bytes,
// or kNone when none is predicted to compress. Deterministic, O(sample), no allocation.
ElemType detect_elem_type(const void* src, size_t n);

// The kernel set kAuto runs: isa_name(effective_isa(Isa::kAuto)) ("avx512", "avx2", "neon", "scalar").
const char* simd_path();

}  // namespace codec
}  // namespace zipccl
