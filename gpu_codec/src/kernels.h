// Per-block kernels with a scalar reference and SIMD variants, chosen once at run time.
// Every variant produces exactly the same bytes; tests compare them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "huffman.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {

// Lines to prefetch while a block is coded (frame.cpp): [p, end) the next block will read and
// [w, wend) this block will write. In frames larger than the caches the hardware prefetchers do
// not run ahead of a block's 16 KiB, so each block would start with a burst of misses; the lane
// coders issue a few of these prefetches per step (and advance p and w) so that the misses
// overlap the coding instead. 64 MiB of bf16, one thread: encode +15-25%, decode +5-10% (v1k).
struct Ahead {
  const uint8_t* p = nullptr;
  const uint8_t* end = nullptr;
  uint8_t* w = nullptr;
  uint8_t* wend = nullptr;
};

struct Kernels {
  const char* name;
  // Splits m 16-bit elements into planes p0, p1 (FORMAT.md "Planes").
  void (*split16)(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1);
  void (*merge16)(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst);
  // merge16 with streaming (non-temporal) stores, for outputs far larger than the caches; nullptr
  // where a set has none (merge16 is then used). Same bytes. The stores are weakly ordered and
  // not fenced here: the caller fences once after its last call (an sfence per 8192-element block
  // stalled each block's next stores until the output drained: 64 MiB decode 3-5% slower, v1o).
  void (*merge16_stream)(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst);
  void (*split32)(const uint8_t* src, uint32_t m, uint8_t* const* planes);
  void (*merge32)(const uint8_t* const* planes, uint32_t m, uint8_t* dst);
  // freq[256] = counts of the m bytes.
  void (*histogram)(const uint8_t* p, uint32_t m, uint32_t* freq);
  // Smallest and largest of the m >= 1 bytes.
  void (*minmax)(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi);
  // Codes m symbols as `lanes` lane streams (FORMAT.md "Huffman plane") written back to back at
  // out; lane_bytes[k] receives lane k's length. Returns the total, or SIZE_MAX if it would exceed
  // cap (nothing is written past out + cap). ahead: lines to prefetch meanwhile, or nullptr.
  size_t (*huff_encode)(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out,
                        size_t cap, uint16_t* lane_bytes, Ahead* ahead);
  // Decodes m symbols from back-to-back lane streams at `in`. Reads stay below readable_end (which
  // is >= the streams' end). False if any lane is inconsistent with its length. ahead: as above.
  bool (*huff_decode)(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& table,
                      uint32_t m, uint8_t* out, const uint8_t* readable_end, Ahead* ahead);
  // The decode tables huff_decode takes (read_huff_desc's kind).
  TableKind table_kind;
  // freq[256] = counts of p[0], p[8], p[16], ... below p + m: the sample of encoder_policy.h's
  // screen (kScreenStride = 8).
  void (*sample_histogram)(const uint8_t* p, uint32_t m, uint32_t* freq);
  // split16 that also gives plane 0's smallest and largest byte (m >= 1), found while the plane is in
  // registers (encode_block would read it again for them). nullptr where a set has none.
  void (*split16_range)(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1, uint32_t* lo, uint32_t* hi);
  // Adds to freq the counts of the m bytes below clo or above chi (encoder_policy.h sample_core: a
  // few in a block). Every set has one (the scalar one where it has no own).
  void (*count_outside)(const uint8_t* p, uint32_t m, uint32_t clo, uint32_t chi, uint32_t* freq);
};

// The scalar kernel set's minmax, for the SIMD sets' tails.
void minmax_scalar(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi);
// The scalar kernel set's count_outside (also the AVX2 and NEON sets').
void count_outside_scalar(const uint8_t* p, uint32_t m, uint32_t clo, uint32_t chi, uint32_t* freq);
// The scalar kernel set's sample_histogram (also the AVX2 and NEON sets').
void sample_histogram_scalar(const uint8_t* p, uint32_t m, uint32_t* freq);
// The scalar kernel set's lane coder (huff_lanes.h), exported for tests.
size_t huff_encode_lanes(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out,
                         size_t cap, uint16_t* lane_bytes);
bool huff_decode_lanes(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& table,
                       uint32_t m, uint8_t* out, const uint8_t* readable_end);

const Kernels& scalar_kernels();
// A kernel set's own plane and lane kernels (Kernels' members of the same names).
struct OwnKernels {
  decltype(Kernels::split16) split16;
  decltype(Kernels::merge16) merge16;
  decltype(Kernels::split32) split32;
  decltype(Kernels::merge32) merge32;
  decltype(Kernels::histogram) histogram;
  decltype(Kernels::minmax) minmax;
  decltype(Kernels::huff_encode) huff_encode;
  decltype(Kernels::huff_decode) huff_decode;
};
// The scalar set with those in place (the AVX2 and NEON sets: their sample counts, count_outside and
// table kind stay the scalar set's).
Kernels scalar_with(const char* name, const OwnKernels& own);
// The target files' builders (simd_avx2.cpp, simd_avx512.cpp, simd_neon.cpp: compiled with that
// set's -m flags, so any instruction in them may be the set's). Each writes its set to *k and
// returns true, or returns false where this build compiled the file without its target. Call one
// only after cpu_runs() confirmed the set: kernels_for() is the only caller.
bool avx2_kernel_set(Kernels* k);
bool avx512_kernel_set(const Kernels& avx2, Kernels* k);  // the AVX2 set supplies the fp32 planes
bool neon_kernel_set(Kernels* k);
// The set `isa` names (kAuto: the fastest this build and CPU run), or nullptr where the CPU or the
// build lacks it. Built on first use, after the check (thread-safe).
const Kernels* kernels_for(Isa isa);
// kernels_for(requested), or the fastest set where that is nullptr.
const Kernels& select_kernels(Isa requested);

}  // namespace codec
}  // namespace zipccl
