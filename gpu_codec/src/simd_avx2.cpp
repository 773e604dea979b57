// AVX2 kernels (x86-64). Compiled with -mavx2 -mbmi2 -mpopcnt for this file only; nothing here runs
// before cpuid has confirmed those (kernels_for), so the library still runs on CPUs without AVX2. Each kernel produces exactly the scalar kernel's bytes.
#include "kernels.h"

#if defined(__AVX2__)
#include <immintrin.h>

#include "huff_lanes.h"

#include <cstring>

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

void split16(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1) {
  const __m256i ff = _mm256_set1_epi16(0xFF), x80 = _mm256_set1_epi16(0x80), x7f = _mm256_set1_epi16(0x7F);
  uint32_t i = 0;
  for (; i + 32 <= m; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i + 32));
    const __m256i a0 = _mm256_and_si256(_mm256_srli_epi16(a, 7), ff);
    const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(b, 7), ff);
    const __m256i a1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 8), x80), _mm256_and_si256(a, x7f));
    const __m256i b1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 8), x80), _mm256_and_si256(b, x7f));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p0 + i), _mm256_permute4x64_epi64(_mm256_packus_epi16(a0, b0), 0xD8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p1 + i), _mm256_permute4x64_epi64(_mm256_packus_epi16(a1, b1), 0xD8));
  }
  scalar_kernels().split16(src + 2 * i, m - i, p0 + i, p1 + i);
}

void merge16(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  const __m256i x80 = _mm256_set1_epi16(0x80), x7f = _mm256_set1_epi16(0x7F);
  uint32_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + i)));
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + i)));
    const __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, x80), 8), _mm256_slli_epi16(a, 7)),
                                      _mm256_and_si256(b, x7f));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), v);
  }
  scalar_kernels().merge16(p0 + i, p1 + i, m - i, dst + 2 * i);
}

void split32(const uint8_t* src, uint32_t m, uint8_t* const* p) {
  // Per 32-bit lane, rearrange to bytes (p3, p2, p1, p0), then transpose bytes to planes.
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF), sign = _mm256_set1_epi32(0x00800000),
                mant = _mm256_set1_epi32(0x007F0000), expo = _mm256_set1_epi32(int(0xFF000000u));
  const __m256i group = _mm256_setr_epi8(3, 7, 11, 15, 2, 6, 10, 14, 1, 5, 9, 13, 0, 4, 8, 12,  //
                                         3, 7, 11, 15, 2, 6, 10, 14, 1, 5, 9, 13, 0, 4, 8, 12);
  const __m256i gather = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  uint32_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i));
    __m256i t = _mm256_or_si256(_mm256_and_si256(v, lo16), _mm256_and_si256(_mm256_srli_epi32(v, 8), sign));
    t = _mm256_or_si256(t, _mm256_and_si256(v, mant));
    t = _mm256_or_si256(t, _mm256_and_si256(_mm256_slli_epi32(v, 1), expo));
    // Bytes per 128-bit half: [p0 x4][p1 x4][p2 x4][p3 x4]; then join halves plane by plane.
    t = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(t, group), gather);
    alignas(32) uint64_t q[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), t);
    for (int k = 0; k < 4; ++k) std::memcpy(p[k] + i, &q[k], 8);
  }
  uint8_t* rest[4] = {p[0] + i, p[1] + i, p[2] + i, p[3] + i};
  scalar_kernels().split32(src + 4 * i, m - i, rest);
}

void merge32(const uint8_t* const* p, uint32_t m, uint8_t* dst) {
  const __m256i x80 = _mm256_set1_epi32(0x80), x7f = _mm256_set1_epi32(0x7F);
  uint32_t i = 0;
  for (; i + 8 <= m; i += 8) {
    auto ld = [&](int k) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p[k] + i))); };
    const __m256i a = ld(0), b = ld(1), c = ld(2), d = ld(3);
    __m256i v = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(b, x80), 24), _mm256_slli_epi32(a, 23));
    v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(b, x7f), 16));
    v = _mm256_or_si256(v, _mm256_or_si256(_mm256_slli_epi32(c, 8), d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * i), v);
  }
  const uint8_t* rest[4] = {p[0] + i, p[1] + i, p[2] + i, p[3] + i};
  scalar_kernels().merge32(rest, m - i, dst + 4 * i);
}

void histogram(const uint8_t* p, uint32_t m, uint32_t* freq) { scalar_kernels().histogram(p, m, freq); }

void minmax(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi) {
  __m256i a = _mm256_set1_epi8(char(0xFF)), b = _mm256_setzero_si256();
  uint32_t i = 0;
  for (; i + 32 <= m; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    a = _mm256_min_epu8(a, v);
    b = _mm256_max_epu8(b, v);
  }
  alignas(32) uint8_t la[32], lb[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(la), a);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lb), b);
  uint32_t x = 255, y = 0;
  if (i < m) minmax_scalar(p + i, m - i, &x, &y);
  for (int k = 0; k < 32 && i; ++k) x = la[k] < x ? la[k] : x, y = lb[k] > y ? lb[k] : y;
  *lo = x, *hi = y;
}

}  // namespace

// This file's kernels (the lane coders: its own build of huff_lanes.h); the rest the scalar set's.
bool avx2_kernel_set(Kernels* k) {
  *k = scalar_with("avx2", {split16, merge16, split32, merge32, histogram, minmax, lanes_encode_k, lanes_decode_k});
  return true;
}

}  // namespace codec
}  // namespace zipccl

#else  // !__AVX2__

namespace zipccl {
namespace codec {
bool avx2_kernel_set(Kernels*) { return false; }
}  // namespace codec
}  // namespace zipccl

#endif
