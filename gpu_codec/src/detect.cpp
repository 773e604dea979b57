// Element-type detection for `auto`: the NCCL net API carries no dtype, so the codec predicts, on a
// sample, which plane model (FORMAT.md "Planes") codes the bytes shortest.
#include <cmath>
#include <cstring>

#include "format.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

double entropy_bits(const uint32_t* freq, int bins, uint32_t total) {
  if (!total) return 0.0;
  double h = 0.0;
  for (int s = 0; s < bins; ++s) {
    if (freq[s]) {
      const double p = double(freq[s]) / total;
      h -= p * std::log2(p);
    }
  }
  return h;
}

}  // namespace

ElemType detect_elem_type(const void* src_v, size_t n) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  if (!src || n < 64) return ElemType::kNone;
  // Up to 16 evenly spaced 1 KiB chunks, each starting at a multiple of 4 bytes.
  constexpr size_t kChunk = 1024, kChunks = 16;
  uint32_t h16[2][256] = {{0}}, h32[4][256] = {{0}}, e5[32] = {0};
  uint32_t n16 = 0, n32 = 0;
  const size_t chunks = n >= kChunk * kChunks ? kChunks : (n + kChunk - 1) / kChunk;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t at = ((n - std::min(n, kChunk)) * c / (chunks > 1 ? chunks - 1 : 1)) & ~size_t(3);
    const size_t len = std::min(kChunk, n - at) & ~size_t(3);
    for (size_t i = 0; i + 4 <= len; i += 4) {
      const uint32_t v = load_le32(src + at + i);
      const uint16_t lo = uint16_t(v), hi = uint16_t(v >> 16);
      h16[0][split16_p0(lo)]++, h16[1][split16_p1(lo)]++;
      h16[0][split16_p0(hi)]++, h16[1][split16_p1(hi)]++;
      e5[(lo >> 10) & 31]++, e5[(hi >> 10) & 31]++;
      h32[0][split32_p0(v)]++, h32[1][split32_p1(v)]++, h32[2][uint8_t(v >> 8)]++, h32[3][uint8_t(v)]++;
      n16 += 2, n32 += 1;
    }
  }
  const double p0_16 = entropy_bits(h16[0], 256, n16);
  const double bits16 = p0_16 + entropy_bits(h16[1], 256, n16);
  double bits32 = 0;
  for (int p = 0; p < 4; ++p) bits32 += entropy_bits(h32[p], 256, n32);
  const double r16 = bits16 / 16, r32 = bits32 / 32;
  // Not worth coding (the per-block choice would ship it raw anyway).
  if (std::min(r16, r32) > 0.97) return ElemType::kNone;
  // fp32 must win clearly: 16-bit data also looks compressible through the fp32 planes.
  if (r32 < r16 * 0.98) return ElemType::kFp32;
  // bf16 and fp16 share the plane split; the label only picks the block size. In fp16 data the
  // three low bits of plane 0 are mantissa bits (near 3 bits of entropy on top of the exponent's).
  const double exp5 = entropy_bits(e5, 32, n16);
  return p0_16 - exp5 > 2.75 ? ElemType::kFp16 : ElemType::kBf16;
}

}  // namespace codec
}  // namespace zipccl
