// Arm NEON kernels (AArch64: Grace and other Arm hosts). Advanced SIMD is part of the AArch64 base
// architecture; the run-time check (HWCAP_ASIMD, cpu_features.cpp) only guards against an unusual kernel. Each kernel
// produces exactly the scalar kernel's bytes: the structure loads (vld2/vld4) de-interleave the
// element bytes, and two bit operations per plane move the exponent's low bit across the byte
// boundary (FORMAT.md "Planes").
#include "kernels.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include "huff_lanes.h"

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

// (hi, lo) element bytes -> plane 0 = (hi << 1) | (lo >> 7), plane 1 = (hi & 0x80) | (lo & 0x7F);
// the same for fp32's upper two bytes.
inline uint8x16_t exp_plane(uint8x16_t hi, uint8x16_t lo) {
  return vsliq_n_u8(vshrq_n_u8(lo, 7), hi, 1);
}
inline uint8x16_t sign_plane(uint8x16_t hi, uint8x16_t lo) {
  return vbslq_u8(vdupq_n_u8(0x80), hi, lo);
}
// And back: lo = (p1 & 0x7F) | (p0 << 7), hi = (p1 & 0x80) | (p0 >> 1).
inline uint8x16_t low_byte(uint8x16_t p0, uint8x16_t p1) {
  return vsliq_n_u8(p1, p0, 7);
}
inline uint8x16_t high_byte(uint8x16_t p0, uint8x16_t p1) {
  return vbslq_u8(vdupq_n_u8(0x80), p1, vshrq_n_u8(p0, 1));
}

void split16(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1) {
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const uint8x16x2_t v = vld2q_u8(src + 2 * i);  // val[0]: low bytes, val[1]: high bytes
    vst1q_u8(p0 + i, exp_plane(v.val[1], v.val[0]));
    vst1q_u8(p1 + i, sign_plane(v.val[1], v.val[0]));
  }
  scalar_kernels().split16(src + 2 * i, m - i, p0 + i, p1 + i);
}

void merge16(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const uint8x16_t a = vld1q_u8(p0 + i), b = vld1q_u8(p1 + i);
    uint8x16x2_t v;
    v.val[0] = low_byte(a, b);
    v.val[1] = high_byte(a, b);
    vst2q_u8(dst + 2 * i, v);
  }
  scalar_kernels().merge16(p0 + i, p1 + i, m - i, dst + 2 * i);
}

void split32(const uint8_t* src, uint32_t m, uint8_t* const* p) {
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const uint8x16x4_t v = vld4q_u8(src + 4 * i);  // val[b]: byte b of each element
    vst1q_u8(p[0] + i, exp_plane(v.val[3], v.val[2]));
    vst1q_u8(p[1] + i, sign_plane(v.val[3], v.val[2]));
    vst1q_u8(p[2] + i, v.val[1]);
    vst1q_u8(p[3] + i, v.val[0]);
  }
  uint8_t* rest[4] = {p[0] + i, p[1] + i, p[2] + i, p[3] + i};
  scalar_kernels().split32(src + 4 * i, m - i, rest);
}

void merge32(const uint8_t* const* p, uint32_t m, uint8_t* dst) {
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const uint8x16_t a = vld1q_u8(p[0] + i), b = vld1q_u8(p[1] + i);
    uint8x16x4_t v;
    v.val[0] = vld1q_u8(p[3] + i);
    v.val[1] = vld1q_u8(p[2] + i);
    v.val[2] = low_byte(a, b);
    v.val[3] = high_byte(a, b);
    vst4q_u8(dst + 4 * i, v);
  }
  const uint8_t* rest[4] = {p[0] + i, p[1] + i, p[2] + i, p[3] + i};
  scalar_kernels().merge32(rest, m - i, dst + 4 * i);
}

void histogram(const uint8_t* p, uint32_t m, uint32_t* freq) {
  scalar_kernels().histogram(p, m, freq);
}

void minmax(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi) {
  uint8x16_t a = vdupq_n_u8(0xFF), b = vdupq_n_u8(0);
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const uint8x16_t v = vld1q_u8(p + i);
    a = vminq_u8(a, v);
    b = vmaxq_u8(b, v);
  }
  uint32_t x = 255, y = 0;
  if (i < m) minmax_scalar(p + i, m - i, &x, &y);
  if (i) {
    x = vminvq_u8(a) < x ? vminvq_u8(a) : x;
    y = vmaxvq_u8(b) > y ? vmaxvq_u8(b) : y;
  }
  *lo = x, *hi = y;
}

}  // namespace

// This file's kernels (the lane coders: its own build of huff_lanes.h); the rest the scalar set's.
bool neon_kernel_set(Kernels* k) {
  *k = scalar_with("neon", {split16, merge16, split32, merge32, histogram, minmax, lanes_encode_k, lanes_decode_k});
  return true;
}

}  // namespace codec
}  // namespace zipccl

#else  // not AArch64 with NEON

namespace zipccl {
namespace codec {
bool neon_kernel_set(Kernels*) { return false; }
}  // namespace codec
}  // namespace zipccl

#endif
