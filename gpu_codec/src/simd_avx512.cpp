// AVX-512 kernels (x86-64 with F, BW, VL, DQ, VBMI, VBMI2 and BMI2). Compiled with those flags for
// this file only; nothing here runs before cpuid has confirmed all of them (kernels_for), and the
// AVX2 set is the fallback. Every kernel produces exactly the scalar kernel's bytes;
// tests/codec/test_kernels.cpp compares them.
//
// The Huffman lanes run 16 at a time, one per 32-bit element of a zmm register:
// - decode: each lane's next 16 stream bytes come in with gathers (8 x 64-bit each), byte-swapped
//   into 32-bit words; eight codes, or more while every lane has 44 bits left, are then decoded
//   from that window, four at a time from a (hi, lo) pair of words, with in-register byte permutes
//   of the register tables (huffman.h: a 6-bit prefix table for codes of up to 6 bits and the last
//   64 11-bit windows, one register each; else 7 bits and 128 windows, two registers each), no
//   table gather; codes neither shape holds (fp16's plane 0, mostly) come from one gather of 16
//   entries of DecodeTable::gather per symbol instead. The four symbols of each lane form one 32-bit word; 16
//   such rows are transposed into the lanes' output runs with register shuffles. Two groups of 16 lanes (a
//   block's 32 lanes) are interleaved, each lane being one dependency chain. Lanes the vector loop cannot
//   take (a block's last, shorter lanes, streams ending within 16 bytes of the readable end) are decoded one
//   symbol at a time with the same tables, and every lane is checked as the scalar decoder checks it.
// - encode: codes and lengths of 64 symbols come from byte-table permutes (one vpermb per table for
//   alphabets spanning at most 64 values, four registers per table past that), are joined into
//   groups of 2, 4, 8 and 16 with variable shifts, and a scalar loop appends one group of 16 (or,
//   where a lane's codes are longer, of 8) per step to each lane's bit string, two lanes
//   interleaved; a group over 56 bits is split.
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VBMI__) && defined(__AVX512VBMI2__) && defined(__BMI2__)
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "encoder_policy.h"
#include "huff_groups.h"
#include "huff_lanes.h"

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

// Prefetches (kernels.h Ahead): lines per decoder step (a 16-byte window of 32 lanes, 4-8 quads:
// ~11 steps a block, so 16 lines cover a next block of ~11 KiB; 6 lines: 64 MiB decode 6-9% slower,
// 24: no better), and per 64 symbols a lane coder groups (two read and two write lines: 16 KiB of
// next input and of output over a plane's 8192 symbols). Into L1 (prefetcht0): 3-8% faster than
// into L2 only.
constexpr int kAheadDecodeLines = 16;
constexpr int kAheadEncodeLines = 2;
inline void prefetch_read(Ahead& a) {
  if (a.p < a.end) _mm_prefetch(reinterpret_cast<const char*>(a.p), _MM_HINT_T0), a.p += 64;
}
inline void prefetch_write(Ahead& a) {
  if (a.w < a.wend) __builtin_prefetch(a.w, 1, 3), a.w += 64;  // PREFETCHW (-mprfchw)
}
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline void store512(void* p, __m512i v) { _mm512_storeu_si512(p, v); }

// ---- Planes ----------------------------------------------------------------------------------

// split16 with plane 0's range (Kernels::split16_range): a min and a max per 64 elements.
void split16_range(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1, uint32_t* lo, uint32_t* hi) {
  const __m512i even = _mm512_set_epi8(126, 124, 122, 120, 118, 116, 114, 112, 110, 108, 106, 104, 102, 100, 98, 96,
                                       94, 92, 90, 88, 86, 84, 82, 80, 78, 76, 74, 72, 70, 68, 66, 64,  //
                                       62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32,  //
                                       30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i x80 = _mm512_set1_epi16(0x80);
  __m512i a = _mm512_set1_epi8(char(0xFF)), b = _mm512_setzero_si512();
  uint32_t i = 0;
  for (; i + 64 <= m; i += 64) {
    const __m512i u = load512(src + 2 * i), v = load512(src + 2 * i + 64);
    const __m512i x0 = _mm512_permutex2var_epi8(_mm512_srli_epi16(u, 7), even, _mm512_srli_epi16(v, 7));
    const __m512i u1 = _mm512_ternarylogic_epi32(x80, _mm512_srli_epi16(u, 8), u, 0xCA);
    const __m512i v1 = _mm512_ternarylogic_epi32(x80, _mm512_srli_epi16(v, 8), v, 0xCA);
    store512(p0 + i, x0);
    store512(p1 + i, _mm512_permutex2var_epi8(u1, even, v1));
    a = _mm512_min_epu8(a, x0), b = _mm512_max_epu8(b, x0);
  }
  uint32_t x = 255, y = 0;
  if (i < m) {
    scalar_kernels().split16(src + 2 * i, m - i, p0 + i, p1 + i);
    minmax_scalar(p0 + i, m - i, &x, &y);
  }
  alignas(64) uint8_t la[64], lb[64];
  store512(la, a);
  store512(lb, b);
  for (int k = 0; k < 64; ++k) x = la[k] < x ? la[k] : x, y = lb[k] > y ? lb[k] : y;
  *lo = x, *hi = y;
}

void split16(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1) {
  uint32_t lo, hi;
  split16_range(src, m, p0, p1, &lo, &hi);
}

// 64 elements from 64 bytes of each plane: the low bytes (p0 bit 0 -> bit 7, p1 bits 6..0) and the
// high bytes (p1 bit 7, p0 bits 7..1) in byte form, then interleaved. The qword permute puts
// elements 8j..8j+7 in the low half of 128-bit lane j (qwords 0..3) and 32 + 8j.. in the high half, so
// that the in-lane byte unpacks give elements 0..31 and 32..63 in order. 8 instructions, 4 on port 5
// (two vpmovzxbw a plane per 32 elements before: 15, 6 on port 5).
struct Merge64 {
  __m512i x7f = _mm512_set1_epi8(0x7F), order = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
  inline void operator()(__m512i a, __m512i b, __m512i* lo, __m512i* hi) const {
    const __m512i l = _mm512_ternarylogic_epi32(x7f, b, _mm512_slli_epi16(a, 7), 0xCA);  // x7f ? b : a << 7
    const __m512i h = _mm512_ternarylogic_epi32(x7f, _mm512_srli_epi16(a, 1), b, 0xCA);  // x7f ? a >> 1 : b
    const __m512i lp = _mm512_permutexvar_epi64(order, l), hp = _mm512_permutexvar_epi64(order, h);
    *lo = _mm512_unpacklo_epi8(lp, hp);
    *hi = _mm512_unpackhi_epi8(lp, hp);
  }
};

void merge16(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  const Merge64 mg;
  uint32_t i = 0;
  for (; i + 64 <= m; i += 64) {
    __m512i lo, hi;
    mg(load512(p0 + i), load512(p1 + i), &lo, &hi);
    store512(dst + 2 * i, lo);
    store512(dst + 2 * i + 64, hi);
  }
  if (i < m) scalar_kernels().merge16(p0 + i, p1 + i, m - i, dst + 2 * i);
}

// merge16 with streaming stores from the first 64-byte boundary of dst on (dst must be even for
// there to be one). Not fenced (kernels.h).
void merge16_stream(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) & 63;
  if (mis & 1) return merge16(p0, p1, m, dst);
  uint32_t i = uint32_t(((64 - mis) & 63) / 2);
  if (i >= m) return merge16(p0, p1, m, dst);
  if (i) scalar_kernels().merge16(p0, p1, i, dst);
  const Merge64 mg;
  for (; i + 64 <= m; i += 64) {
    __m512i lo, hi;
    mg(load512(p0 + i), load512(p1 + i), &lo, &hi);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + 2 * i), lo);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + 2 * i + 64), hi);
  }
  if (i < m) scalar_kernels().merge16(p0 + i, p1 + i, m - i, dst + 2 * i);
}

void minmax(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi) {
  __m512i a = _mm512_set1_epi8(char(0xFF)), b = _mm512_setzero_si512();
  uint32_t i = 0;
  for (; i + 64 <= m; i += 64) {
    const __m512i v = load512(p + i);
    a = _mm512_min_epu8(a, v);
    b = _mm512_max_epu8(b, v);
  }
  if (i < m) {  // the tail as one masked load: absent bytes read as 0xFF for min and 0 for max
    const __mmask64 k = _bzhi_u64(~0ull, m - i);
    a = _mm512_min_epu8(a, _mm512_mask_loadu_epi8(_mm512_set1_epi8(char(0xFF)), k, p + i));
    b = _mm512_max_epu8(b, _mm512_maskz_loadu_epi8(k, p + i));
  }
  alignas(64) uint8_t la[64], lb[64];
  store512(la, a);
  store512(lb, b);
  uint32_t x = 255, y = 0;
  for (int k = 0; k < 64; ++k) x = la[k] < x ? la[k] : x, y = lb[k] > y ? lb[k] : y;
  *lo = x, *hi = y;
}

// Counts of every 8th byte. The samples are packed first, 64 at a time. When they span fewer than
// kNarrow values (exponent planes: a few dozen), each value is counted by compares: one vpcmpeqb
// and one masked byte add per 64 samples and value, against ~5 instructions per sample for the
// increments, whose repeats of one counter also wait on each other (an exponent plane: 0.47 vs
// 1.06 ns per sample, v1l). Wider spans (mantissa planes) go to the scalar counter.
void sample_histogram(const uint8_t* p, uint32_t m, uint32_t* freq) {
  static_assert(policy::kScreenStride == 8, "one sample per 64-bit word");
  constexpr uint32_t kNarrow = 64;
  const uint32_t n = (m + 7) / 8;
  if (n > kMaxBlockElems / 8) return sample_histogram_scalar(p, m, freq);
  alignas(64) uint8_t s[kMaxBlockElems / 8 + 64];
  // 64 samples from 512 bytes: four byte permutes of 128 bytes each (16 samples, bytes 0, 8, ..
  // 120, into bytes 16t..16t+15 of the result). 7 instructions; vpmovqb: 16.
  const __m512i pick = _mm512_set4_epi32(0x78706860, 0x58504840, 0x38302820, 0x18100800);
  __m512i lo = _mm512_set1_epi8(char(0xFF)), hi = _mm512_setzero_si512();
  uint32_t j = 0;
  for (; 8 * j + 512 <= m; j += 64) {
    const uint8_t* q = p + 8 * j;
    __m512i x = _mm512_maskz_permutex2var_epi8(0xFFFFull, load512(q), pick, load512(q + 64));
    x = _mm512_or_si512(
        x, _mm512_maskz_permutex2var_epi8(0xFFFFull << 16, load512(q + 128), pick, load512(q + 192)));
    x = _mm512_or_si512(
        x, _mm512_maskz_permutex2var_epi8(0xFFFFull << 32, load512(q + 256), pick, load512(q + 320)));
    x = _mm512_or_si512(
        x, _mm512_maskz_permutex2var_epi8(0xFFFFull << 48, load512(q + 384), pick, load512(q + 448)));
    store512(s + j, x);
    lo = _mm512_min_epu8(lo, x), hi = _mm512_max_epu8(hi, x);
    // Mantissa planes show a wide span in their first samples: count those where they lie.
    if (j == 0 && _mm512_cmpge_epu8_mask(_mm512_sub_epi8(hi, lo), _mm512_set1_epi8(char(kNarrow)))) {
      return sample_histogram_scalar(p, m, freq);
    }
  }
  // The samples past the last 512-byte step come one at a time; their vectors join the span here
  // (whole ones, then the masked tail).
  const uint32_t gathered = j;
  for (; j < n; ++j) s[j] = p[8 * j];
  const uint32_t full = n / 64;
  const __mmask64 tail = _bzhi_u64(~0ull, n % 64);
  for (uint32_t v = gathered / 64; v < full; ++v) {
    const __m512i x = load512(s + 64 * v);
    lo = _mm512_min_epu8(lo, x), hi = _mm512_max_epu8(hi, x);
  }
  if (tail) {
    const __m512i x = _mm512_maskz_loadu_epi8(tail, s + 64 * full);
    lo = _mm512_mask_min_epu8(lo, tail, lo, x), hi = _mm512_max_epu8(hi, x);
  }
  alignas(64) uint8_t la[64], lb[64];
  store512(la, lo);
  store512(lb, hi);
  uint32_t a = 255, b = 0;
  for (int k = 0; k < 64; ++k) a = la[k] < a ? la[k] : a, b = lb[k] > b ? lb[k] : b;
  if (b - a >= kNarrow) {
    uint32_t h[4][256];
    std::memset(h, 0, sizeof(h));
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) h[0][s[i]]++, h[1][s[i + 1]]++, h[2][s[i + 2]]++, h[3][s[i + 3]]++;
    for (; i < n; ++i) h[0][s[i]]++;
    for (int c = 0; c < 256; ++c) freq[c] = h[0][c] + h[1][c] + h[2][c] + h[3][c];
    return;
  }
  std::memset(freq, 0, 256 * sizeof(uint32_t));
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  for (uint32_t c = a; c <= b; ++c) {
    const __m512i vc = _mm512_set1_epi8(char(c));
    // Byte counters: at most kMaxBlockElems / 8 / 64 = 32 per byte.
    __m512i acc = _mm512_setzero_si512();
    for (uint32_t v = 0; v < full; ++v) {
      acc = _mm512_mask_add_epi8(acc, _mm512_cmpeq_epi8_mask(load512(s + 64 * v), vc), acc, one);
    }
    if (tail)
      acc =
          _mm512_mask_add_epi8(acc, _mm512_mask_cmpeq_epi8_mask(tail, load512(s + 64 * full), vc), acc, one);
    freq[c] = uint32_t(_mm512_reduce_add_epi64(_mm512_sad_epu8(acc, zero)));
  }
}

// The bytes of p's whole 64-byte vectors (the first 64 * floor(m / 64)) whose bits pick(x) sets, in
// order, into found: one vpcompressb per vector that holds any (most hold none where they are rare).
// Returns how many, or stops and returns more than `limit` once they exceed it. found: room for
// limit + 64 bytes.
template <class Pick>
uint32_t compress_picked(const uint8_t* p, uint32_t m, Pick pick, uint8_t* found, uint32_t limit) {
  uint32_t n = 0;
  for (uint32_t i = 0; i + 64 <= m && n <= limit; i += 64) {
    const __m512i x = load512(p + i);
    const __mmask64 k = pick(x);
    if (k) {
      store512(found + n, _mm512_maskz_compress_epi8(k, x));
      n += uint32_t(_mm_popcnt_u64(k));
    }
  }
  return n;
}

// Kernels::histogram. A plane that is one byte value but for a few (fp32 gradients' zero low halves:
// SPARSE planes, whose counts the encoder policy takes exact) is counted 64 bytes at a time against
// its first byte, the others compressed out and counted one by one: the scalar counter's increments
// all wait on one counter there (22% of such an encode, v2p). A plane that shows more than 1 in 16
// other bytes goes to the scalar counter.
void histogram(const uint8_t* p, uint32_t m, uint32_t* freq) {
  alignas(64) uint8_t found[kMaxBlockElems / 16 + 64];
  if (m < 1024 || m > kMaxBlockElems) return scalar_kernels().histogram(p, m, freq);
  const uint8_t b = p[0];
  const __m512i base = _mm512_set1_epi8(char(b));
  const uint32_t n = compress_picked(
      p, m, [&](__m512i x) { return _mm512_cmpneq_epi8_mask(x, base); }, found, m / 16);
  if (n > m / 16) return scalar_kernels().histogram(p, m, freq);
  const uint32_t whole = m & ~63u;
  std::memset(freq, 0, 256 * sizeof(uint32_t));
  for (uint32_t j = 0; j < n; ++j) freq[found[j]]++;
  freq[b] += whole - n;
  for (uint32_t i = whole; i < m; ++i) freq[p[i]]++;
}

// Kernels::count_outside: the bytes outside [clo, chi] compressed out (compress_picked), then counted.
void count_outside(const uint8_t* p, uint32_t m, uint32_t clo, uint32_t chi, uint32_t* freq) {
  alignas(64) uint8_t found[kMaxBlockElems + 64];
  if (m > kMaxBlockElems) return count_outside_scalar(p, m, clo, chi, freq);
  const __m512i a = _mm512_set1_epi8(char(clo)), b = _mm512_set1_epi8(char(chi));
  const uint32_t n = compress_picked(
      p, m, [&](__m512i x) { return _mm512_cmplt_epu8_mask(x, a) | _mm512_cmpgt_epu8_mask(x, b); }, found, m);
  for (uint32_t j = 0; j < n; ++j) freq[found[j]]++;
  const uint32_t whole = m & ~63u;
  count_outside_scalar(p + whole, m - whole, clo, chi, freq);
}

// ---- Huffman decode --------------------------------------------------------------------------

// 16 x 16 transpose of 32-bit words: row r of src (16 words) becomes column r; row k of the result
// (16 words, 64 bytes) is stored at dst + k * stride.
inline void transpose16_store(const uint32_t* src, uint8_t* dst, size_t stride) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = load512(src + 16 * i);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4i + c], 128-bit lane L: column 4L + c of rows 4i..4i+3.
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), w0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD), w1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
    store512(dst + size_t(c) * stride, _mm512_shuffle_i32x4(v0, w0, 0x88));
    store512(dst + size_t(8 + c) * stride, _mm512_shuffle_i32x4(v0, w0, 0xDD));
    store512(dst + size_t(4 + c) * stride, _mm512_shuffle_i32x4(v1, w1, 0x88));
    store512(dst + size_t(12 + c) * stride, _mm512_shuffle_i32x4(v1, w1, 0xDD));
  }
}

// The 11-bit window at bit `pos` of `base`; loads start at most at `limit`.
inline uint32_t window_at(const uint8_t* base, uint64_t pos, const uint8_t* limit) {
  const size_t off = size_t(pos >> 3);
  const uint8_t* a = off <= size_t(limit - base) ? base + off : limit;
  return uint32_t((lanes_be64(a) << (pos & 7)) >> (64 - kMaxCodeLen));
}
// A window's register-table entry (huffman.h).
inline uint32_t reg_entry(uint32_t v, uint32_t short_bits) {
  const uint32_t S = 1u << short_bits;
  return v >= kTableSize - S ? S + (v & (S - 1)) : v >> (kMaxCodeLen - short_bits);
}

// Decodes n symbols of a lane (bytes at `lane`) from bit `pos`; returns the end position. Loads
// stay below readable_end: a lane ending within 8 bytes of it is decoded from a padded copy.
// t: register tables (reg_ok) or the gather table.
uint64_t lane_tail(const uint8_t* lane, uint32_t bytes, uint64_t pos, uint32_t n, const DecodeTable& t,
                   uint8_t* o, const uint8_t* readable_end) {
  if (n == 0) return pos;
  alignas(64) uint8_t pad[kMaxLaneBytes + 16];
  const uint8_t* base = lane;
  const uint8_t* limit = readable_end - 8;
  if (size_t(readable_end - lane) < size_t(bytes) + 8) {
    std::memcpy(pad, lane, bytes);
    std::memset(pad + bytes, 0, 16);
    base = pad, limit = pad + bytes + 8;
  }
  if (!t.reg_ok) {
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t e = t.gather[window_at(base, pos, limit)];
      o[i] = uint8_t(e >> 24);
      pos += e & 0xFF;
    }
    return pos;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t e = reg_entry(window_at(base, pos, limit), t.reg.short_bits);
    o[i] = t.reg.sym[e];
    pos += t.reg.len[e];
  }
  return pos;
}

// The register tables in zmm registers. lookup(hi, &len, &e): the length of the code at the top of
// each lane's window hi and its table index (byte 0; bytes 1-3 zero); push(idx, e): idx with e's
// index appended as its low byte; symbols(idx): the symbols of four such indices, one per byte;
// bits(used): the bits a quad used, from the sum of its lengths.
//
// 7-bit tables (short_bits 7): entry i < 128 is found with index byte i, entry 128 + j with 128 + j
// (bit 7 picks the table pair), each table two registers (vpermt2b).
struct RegDecoder7 {
  __m512i ls0, ls1, ll0, ll1, ss0, ss1, sl0, sl1, c120;
  explicit RegDecoder7(const DecodeTable& d) : RegDecoder7(d.reg) {}
  explicit RegDecoder7(const RegTables& t)
      : ls0(load512(t.len)),
        ls1(load512(t.len + 64)),
        ll0(load512(t.len + 128)),
        ll1(load512(t.len + 192)),
        ss0(load512(t.sym)),
        ss1(load512(t.sym + 64)),
        sl0(load512(t.sym + 128)),
        sl1(load512(t.sym + 192)),
        c120(_mm512_set1_epi8(120)) {}
  inline void lookup(__m512i hi, __m512i* len, __m512i* e) const {
    const __mmask64 byte0 = 0x1111111111111111ull;
    const __m512i is = _mm512_srli_epi32(hi, 25), il = _mm512_srli_epi32(hi, 21);
    const __mmask64 kl = _mm512_cmpge_epu8_mask(is, c120);
    // Both lookups under the constant mask, then one blend (the compare runs alongside).
    *len = _mm512_mask_blend_epi8(kl, _mm512_maskz_permutex2var_epi8(byte0, ls0, is, ls1),
                                  _mm512_maskz_permutex2var_epi8(byte0, ll0, il, ll1));
    // The index is `is`, or `il`, whose bit 7 is set exactly when kl.
    *e = _mm512_mask_blend_epi8(kl, is, il);
  }
  inline __m512i symbols(__m512i idx) const {
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), _mm512_permutex2var_epi8(ss0, idx, ss1),
                                  _mm512_permutex2var_epi8(sl0, idx, sl1));
  }
  static __m512i push(__m512i idx, __m512i e) { return _mm512_or_si512(_mm512_slli_epi32(idx, 8), e); }
  static __m512i bits(__m512i used) { return used; }
};

// 6-bit tables (short_bits 6): the 64 short and the 64 long lengths one register each, so a length
// is one vpermb on the 6-bit prefix and one on the window's low 6 bits (vpermb reads an index
// byte's low 6 bits), and a blend: 6 cycles from window to window instead of 10 (maskz vpermt2b
// takes 7 here), 12 uops a step instead of 14. The symbol tables (64 + 64) are one vpermt2b pair:
// index bit 6 is set exactly for the long windows (>= 1984). The length's bytes 1-3 hold len[0]
// (the prefix's zero bytes looked up): the shifts take their count mod 32 (vpshldvd, also for lo),
// where that is 0, and `used` is masked to its low byte.
struct RegDecoder6 {
  __m512i ls, ll, s0, s1, c62, low8;
  explicit RegDecoder6(const DecodeTable& d) : RegDecoder6(d.reg) {}
  explicit RegDecoder6(const RegTables& t)
      : ls(load512(t.len)),
        ll(load512(t.len + 64)),
        s0(load512(t.sym)),
        s1(load512(t.sym + 64)),
        c62(_mm512_set1_epi8(62)),
        low8(_mm512_set1_epi32(0xFF)) {}
  inline void lookup(__m512i hi, __m512i* len, __m512i* e) const {
    const __m512i is = _mm512_srli_epi32(hi, 26), il = _mm512_srli_epi32(hi, 21);
    const __mmask64 kl = _mm512_cmpge_epu8_mask(is, c62);
    *len = _mm512_mask_blend_epi8(kl, _mm512_permutexvar_epi8(is, ls), _mm512_permutexvar_epi8(il, ll));
    *e = _mm512_mask_blend_epi8(kl, is, il);
  }
  static __m512i push(__m512i idx, __m512i e) { return _mm512_or_si512(_mm512_slli_epi32(idx, 8), e); }
  inline __m512i symbols(__m512i idx) const { return _mm512_permutex2var_epi8(s0, idx, s1); }
  inline __m512i bits(__m512i used) const { return _mm512_and_si512(used, low8); }
};

// Codes the register tables cannot hold (fp16's plane 0: ~100 values, codes of up to 11 bits): one
// gather of 16 entries len | symbol << 24 (DecodeTable::gather) per symbol. The entry is both the
// length (the window shifts take their count mod 32, `used` is masked to its low byte) and the
// symbol, which vpshldd moves into idx's low byte; idx holds the symbols themselves. Gaussian fp16
// decode 2.7x (64 MiB, 0.84 -> 2.27 GB/s) against the scalar pair-table decoder it replaces (v2n).
struct GatherDecoder {
  const uint32_t* tab;
  __m512i low8;
  explicit GatherDecoder(const DecodeTable& d) : tab(d.gather), low8(_mm512_set1_epi32(0xFF)) {}
  inline void lookup(__m512i hi, __m512i* len, __m512i* e) const {
    *len = *e = _mm512_i32gather_epi32(_mm512_srli_epi32(hi, 21), tab, 4);
  }
  static __m512i push(__m512i idx, __m512i e) { return _mm512_shldi_epi32(idx, e, 8); }
  static __m512i symbols(__m512i idx) { return idx; }
  inline __m512i bits(__m512i used) const { return _mm512_and_si512(used, low8); }
};

// One quad (four symbols per lane) in each of G groups of 16 lanes, from left-aligned windows
// (hi[g], lo[g]) of at least 51 valid bits. acc[g]: the four symbols, first in the top byte;
// used[g]: the bits used. Each symbol's length is on its group's critical path (window -> length ->
// shifted window), so the groups' steps are interleaved (one chain each; 1-3% faster than a quad
// per group in turn, paired: small, but it never lost); a symbol waits: its table index joins those
// of the other three, and one lookup serves the four. The window shifts take their count mod 32
// (vpshldvd, lo shifted in from zero), which RegDecoder6's lengths need.
template <int G, class Decoder>
inline void decode_quads(const Decoder& dec, __m512i* hi, __m512i* lo, __m512i* acc, __m512i* used) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i idx[G];
  for (int g = 0; g < G; ++g) idx[g] = used[g] = zero;
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      __m512i len, e;
      dec.lookup(hi[g], &len, &e);
      idx[g] = dec.push(idx[g], e);
      used[g] = _mm512_add_epi32(used[g], len);
      if (j < 3) {
        hi[g] = _mm512_shldv_epi32(hi[g], lo[g], len);
        lo[g] = _mm512_shldv_epi32(lo[g], zero, len);
      }
    }
  }
  for (int g = 0; g < G; ++g) acc[g] = dec.symbols(idx[g]), used[g] = dec.bits(used[g]);
}

// G groups of 16 lanes (lane k of group g starts at byte start[16g + k] of `in`), `quads` x 4
// symbols each, written to out + (16g + k) * per. Each pair of quads decodes from one 16-byte
// window per lane (two gathers of 8 x 8 bytes), so only every eighth symbol waits for a gather.
// Window loads are clamped to start at byte `lim` at most (only a lane that already ran past its
// end gets there). pos_out: each lane's end bit, from `in`.
template <int G, class Decoder>
void decode_groups(const uint8_t* in, const uint32_t* start, uint32_t quads, const DecodeTable& t,
                   uint8_t* out, uint32_t per, uint32_t lim, uint32_t* pos_out, Ahead& ahead) {
  const Decoder dec(t);
  const __m512i seven = _mm512_set1_epi32(7), c31 = _mm512_set1_epi32(31), vlim = _mm512_set1_epi32(int(lim));
  const __m512i bswap64 = _mm512_set4_epi32(0x08090A0B, 0x0C0D0E0F, 0x00010203, 0x04050607);
  const __m512i bswap32 = _mm512_set4_epi32(0x0C0D0E0F, 0x08090A0B, 0x04050607, 0x00010203);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  // The 8 bytes at each lane's offset (+ add), big-endian, as (high, low) 32-bit words.
  auto window8 = [&](__m512i off, int add, __m512i* hi, __m512i* lo) {
    __m512i qa = _mm512_i32gather_epi64(_mm512_castsi512_si256(off), in + add, 1);
    __m512i qb = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(off, 1), in + add, 1);
    qa = _mm512_shuffle_epi8(qa, bswap64);
    qb = _mm512_shuffle_epi8(qb, bswap64);
    *hi = _mm512_permutex2var_epi32(qa, odd, qb);
    *lo = _mm512_permutex2var_epi32(qa, even, qb);
  };
  __m512i pos[G];
  for (int g = 0; g < G; ++g) pos[g] = _mm512_slli_epi32(load512(start + 16 * g), 3);
  // Rows of quads, 32 per group: a window adds at most kMaxQuads rows before the flush, which
  // leaves the previous 16 untouched until they are transposed out.
  alignas(64) uint32_t rows[G][32 * 16];
  uint32_t flushed = 0;                      // rows [0, flushed) are in out
  auto flush_rows = [&](uint32_t written) {  // rows [0, written) are decoded
    for (; flushed + 16 <= written; flushed += 16) {
      for (int g = 0; g < G; ++g) {
        transpose16_store(rows[g] + 16 * (flushed & 31), out + size_t(16 * g) * per + 4 * flushed, per);
      }
    }
  };
  auto row = [&](int g, uint32_t r) { return rows[g] + 16 * (r & 31); };
  // Each window is 16 bytes a lane. Two quads always fit (at most 7 + 2 * 44 bits); more follow
  // from the same window while every lane of the groups has a whole quad (44 bits) left in it,
  // p <= 84: exponent codes (~2.7 bits a symbol) give several quads a window, and each gather
  // serves that many more symbols (v1m: a block in cache decoded in 1.45 instead of 1.7 cycles an
  // element). At most kMaxQuads, which bounds the rows written between flushes.
  constexpr uint32_t kMaxQuads = 8;  // 6, 12, 16: the same speed within noise
  const __m512i c63 = _mm512_set1_epi32(63), c84 = _mm512_set1_epi32(84);
  uint32_t q = 0;
  __m512i hi[G], lo[G], acc[G], used[G];
  auto run_quads = [&](uint32_t r) {  // decodes from (hi, lo) into row r; p += used
    decode_quads<G>(dec, hi, lo, acc, used);
    for (int g = 0; g < G; ++g) store512(row(g, r), _mm512_shuffle_epi8(acc[g], bswap32));
  };
  while (q + 2 <= quads) {
    for (int j = 0; j < kAheadDecodeLines; ++j) prefetch_read(ahead);
    __m512i d[G][4], p[G];
    for (int g = 0; g < G; ++g) {
      const __m512i off = _mm512_min_epu32(_mm512_srli_epi32(pos[g], 3), vlim);
      window8(off, 0, &d[g][0], &d[g][1]);
      window8(off, 8, &d[g][2], &d[g][3]);
      p[g] = _mm512_and_si512(pos[g], seven);
      // First quad: bits from sh (< 8); second: from p = sh + used (<= 51), i.e. word p / 32.
      hi[g] = _mm512_shldv_epi32(d[g][0], d[g][1], p[g]);
      lo[g] = _mm512_shldv_epi32(d[g][1], d[g][2], p[g]);
    }
    run_quads(q);
    for (int g = 0; g < G; ++g) {
      p[g] = _mm512_add_epi32(p[g], used[g]);
      const __mmask16 k32 = _mm512_cmpgt_epu32_mask(p[g], c31);
      const __m512i e0 = _mm512_mask_blend_epi32(k32, d[g][0], d[g][1]),
                    e1 = _mm512_mask_blend_epi32(k32, d[g][1], d[g][2]),
                    e2 = _mm512_mask_blend_epi32(k32, d[g][2], d[g][3]);
      hi[g] = _mm512_shldv_epi32(e0, e1, p[g]);
      lo[g] = _mm512_shldv_epi32(e1, e2, p[g]);
    }
    run_quads(q + 1);
    for (int g = 0; g < G; ++g) p[g] = _mm512_add_epi32(p[g], used[g]);
    q += 2;
    for (uint32_t n = 2; n < kMaxQuads && q < quads; ++n, ++q) {
      __mmask16 far = 0;
      for (int g = 0; g < G; ++g) far |= _mm512_cmpgt_epu32_mask(p[g], c84);
      if (far) break;
      for (int g = 0; g < G; ++g) {
        // Words p / 32 (0..2) and the next two; past the window (p >= 64) the last word stands in
        // for bits beyond 128, which a quad from p <= 84 never uses.
        const __mmask16 k32 = _mm512_cmpgt_epu32_mask(p[g], c31), k64 = _mm512_cmpgt_epu32_mask(p[g], c63);
        const __m512i e0 =
            _mm512_mask_blend_epi32(k64, _mm512_mask_blend_epi32(k32, d[g][0], d[g][1]), d[g][2]);
        const __m512i e1 =
            _mm512_mask_blend_epi32(k64, _mm512_mask_blend_epi32(k32, d[g][1], d[g][2]), d[g][3]);
        const __m512i e2 = _mm512_mask_blend_epi32(k32, d[g][2], d[g][3]);
        hi[g] = _mm512_shldv_epi32(e0, e1, p[g]);
        lo[g] = _mm512_shldv_epi32(e1, e2, p[g]);
      }
      run_quads(q);
      for (int g = 0; g < G; ++g) p[g] = _mm512_add_epi32(p[g], used[g]);
    }
    for (int g = 0; g < G; ++g) pos[g] = _mm512_add_epi32(_mm512_andnot_si512(seven, pos[g]), p[g]);
    flush_rows(q);
  }
  if (q < quads) {  // an odd last quad: one 8-byte window
    __m512i sh[G];
    for (int g = 0; g < G; ++g) {
      const __m512i off = _mm512_min_epu32(_mm512_srli_epi32(pos[g], 3), vlim);
      __m512i d0, d1;
      window8(off, 0, &d0, &d1);
      sh[g] = _mm512_and_si512(pos[g], seven);
      hi[g] = _mm512_shldv_epi32(d0, d1, sh[g]);
      lo[g] = _mm512_sllv_epi32(d1, sh[g]);
    }
    run_quads(q);
    for (int g = 0; g < G; ++g) {
      pos[g] = _mm512_add_epi32(_mm512_andnot_si512(seven, pos[g]), _mm512_add_epi32(sh[g], used[g]));
    }
    ++q;
    flush_rows(q);
  }
  for (int g = 0; g < G; ++g) {
    for (uint32_t r = flushed; r < quads; ++r) {
      for (int k = 0; k < 16; ++k) std::memcpy(out + size_t(16 * g + k) * per + 4 * r, row(g, r) + k, 4);
    }
    store512(pos_out + 16 * g, pos[g]);
  }
}

bool huff_decode(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& t, uint32_t m,
                 uint8_t* out, const uint8_t* readable_end, Ahead* ahead_io) {
  if (!t.reg_ok && !t.gather_ok) return lanes_decode(in, lane_bytes, lanes, t, m, out, readable_end);
  Ahead none;
  Ahead& ahead = ahead_io ? *ahead_io : none;
  const uint32_t per = lane_elems(m, lanes);
  alignas(64) uint32_t start[kMaxLanes + 1];
  uint32_t p = 0;
  for (int k = 0; k < lanes; ++k) {
    // A lane never holds more than 11 bits per element: bounds every read below.
    if (lane_bytes[k] > (uint64_t(lane_count(m, per, k)) * kMaxCodeLen + 7) / 8) return false;
    start[k] = p, p += lane_bytes[k];
  }
  start[lanes] = p;
  // The gathers touch all the streams' lines at once, 32 lanes apart: ask for them up front.
  for (uint32_t off = 0; off < p; off += 64) _mm_prefetch(reinterpret_cast<const char*>(in + off), _MM_HINT_T0);
  const size_t avail = size_t(readable_end - in);  // >= p
  const uint32_t quads = per / 4;
  alignas(64) uint32_t pos[kMaxLanes];  // end bit of each lane's vector part, from `in`
  int vec = 0;                          // lanes [0, vec) went through the vector loop
  // A group qualifies when its lanes are all full and every 16-byte window of a valid lane (which
  // starts before the lane's end) lies inside the readable range.
  auto group_ok = [&](int k0, int n) {
    return quads && lane_count(m, per, k0 + n - 1) == per && size_t(start[k0 + n]) + 16 <= avail;
  };
  auto run = [&](auto g1, auto g2) {
    for (; vec + 32 <= lanes && group_ok(vec, 32); vec += 32) {
      g2(in, start + vec, quads, t, out + size_t(vec) * per, per, uint32_t(avail - 16), pos + vec, ahead);
    }
    for (; vec + 16 <= lanes && group_ok(vec, 16); vec += 16) {
      g1(in, start + vec, quads, t, out + size_t(vec) * per, per, uint32_t(avail - 16), pos + vec, ahead);
    }
  };
  if (!t.reg_ok) {
    run(decode_groups<1, GatherDecoder>, decode_groups<2, GatherDecoder>);
  } else if (t.reg.short_bits == 6) {
    run(decode_groups<1, RegDecoder6>, decode_groups<2, RegDecoder6>);
  } else {
    run(decode_groups<1, RegDecoder7>, decode_groups<2, RegDecoder7>);
  }
  // Lanes the vector loop finished (a multiple of 4 symbols each: no tail) are checked as lane_ok
  // checks them, 16 at a time from the vector end bits: the end byte is the next lane's start, and
  // the last byte's bits past the end are zero (its 4-byte gather stays inside the readable range,
  // as the windows did). Reading each end bit back as a scalar (a 4-byte load of a 64-byte vector
  // store that has not left the store buffer) cost ~6% of a decode.
  int checked = 0;
  if (per % 4 == 0) {
    const __m512i seven = _mm512_set1_epi32(7), ff = _mm512_set1_epi32(0xFF);
    for (; checked < vec; checked += 16) {
      const __m512i p = load512(pos + checked);
      const __m512i end = _mm512_srli_epi32(_mm512_add_epi32(p, seven), 3);
      if (_mm512_cmpneq_epu32_mask(end, _mm512_loadu_si512(start + checked + 1))) return false;
      const __m512i sh = _mm512_and_si512(p, seven);
      const __mmask16 part = _mm512_test_epi32_mask(sh, sh);
      const __m512i last =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), part, _mm512_srli_epi32(p, 3), in, 1);
      if (_mm512_mask_test_epi32_mask(part, last, _mm512_srlv_epi32(ff, sh))) return false;
    }
  }
  for (int k = checked; k < lanes; ++k) {
    const uint32_t cnt = lane_count(m, per, k);
    const uint32_t from = k < vec ? 4 * quads : 0;
    uint64_t bit = k < vec ? pos[k] - uint64_t(start[k]) * 8 : 0;
    if (cnt > from) {  // none in full blocks; calling anyway: decode 2% slower at 64 MiB, 6% in cache
      bit = lane_tail(in + start[k], lane_bytes[k], bit, cnt - from, t, out + size_t(k) * per + from,
                      readable_end);
    }
    if (!lane_ok(in + start[k], lane_bytes[k], bit)) return false;
  }
  return true;
}

// ---- Huffman encode --------------------------------------------------------------------------

// The symbols' entries e = code | len << 11 as two byte tables (e's low and high bytes), looked up for
// 64 symbols at a time. Alphabets spanning at most 64 values (exponent planes): one register each,
// indexed by symbol & 63, one vpermb. Any other (an exponent plane with a zero or a denormal in
// it spans 0x00 to ~0x80): four registers each, indexed by the symbol, two vpermi2b (bit 6 picks the
// register of a pair) and a blend on bit 7 (~10 more uops per 64 symbols; with the scalar lane coder
// in their place, Gaussian bf16 with 0.1% zeros encoded at 0.66 instead of 1.07 GB/s).
struct Lookup64 {
  static constexpr uint32_t kEntries = 64;
  __m512i lo, hi;
  Lookup64(const uint8_t* tl, const uint8_t* th) : lo(load512(tl)), hi(load512(th)) {}
  static uint32_t index(uint32_t s) { return s & 63; }
  void operator()(__m512i x, __m512i* elo, __m512i* ehi) const {
    *elo = _mm512_permutexvar_epi8(x, lo), *ehi = _mm512_permutexvar_epi8(x, hi);
  }
};
struct Lookup256 {
  static constexpr uint32_t kEntries = 256;
  __m512i lo[4], hi[4];
  Lookup256(const uint8_t* tl, const uint8_t* th) {
    for (int i = 0; i < 4; ++i) lo[i] = load512(tl + 64 * i), hi[i] = load512(th + 64 * i);
  }
  static uint32_t index(uint32_t s) { return s; }
  void operator()(__m512i x, __m512i* elo, __m512i* ehi) const {
    const __mmask64 top = _mm512_movepi8_mask(x);
    *elo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo[0], x, lo[1]),
                                  _mm512_permutex2var_epi8(lo[2], x, lo[3]));
    *ehi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi[0], x, hi[1]),
                                  _mm512_permutex2var_epi8(hi[2], x, hi[3]));
  }
};

// Groups of one lane's symbols, n of them (a multiple of 64). The entries of 64 symbols (Lookup*)
// are interleaved into words by the in-lane byte unpacks (so the first register holds symbols
// 16j..16j+7 in 128-bit lane j, the second 16j+8..; the octets are put back in order when the two
// registers are joined). One word permute per 32 symbols from zero-extended bytes (v1y) took ~12%
// longer.
// code8[i] = the codes of symbols 8i..8i+7 (right-aligned) and len8[i] their total length, exact
// when that is at most 64 bits (coded as one piece when at most 56: nearly always, as that is 7 bits
// a symbol); g16[2i] and g16[2i + 1] the code and the length of symbols 16i..16i+15 (one piece when
// at most 56 bits, which exponent planes' ~2.5 bits a symbol nearly always give), side by side so
// that the writer reads a group from one base. The lengths stay 64-bit and the 16-groups where the
// tree leaves them (the even words, the lengths moved up one): narrowing them to bytes and packing
// the groups (two vpmovqb, two vpcompressq: 8 port-5 uops of ~22 per 64 symbols) cost more than
// the larger stores. Returns the n symbols' total bits.
template <class Lookup>
inline uint64_t make_groups(const uint8_t* s, uint32_t n, const Lookup& lookup, uint64_t* code8,
                            uint64_t* len8, uint64_t* g16, Ahead& ahead) {
  const __m512i m11 = _mm512_set1_epi32(0x7FF), m4 = _mm512_set1_epi32(0xF), lo32 = _mm512_set1_epi64(0xFFFFFFFF);
  const __m512i evens =
      _mm512_set_epi64(14, 6, 12, 4, 10, 2, 8, 0);  // octets 2j from the first, 2j+1 the second
  __m512i total = _mm512_setzero_si512();
  for (uint32_t i = 0; i < n; i += 64) {
    for (int r = 0; r < kAheadEncodeLines; ++r) prefetch_read(ahead), prefetch_write(ahead);
    __m512i oc[2], ol[2];
    const __m512i x = load512(s + i);
    __m512i elo, ehi;
    lookup(x, &elo, &ehi);
    for (int h = 0; h < 2; ++h) {
      // Per 32-bit word: e_even | e_odd << 16.
      const __m512i e = h ? _mm512_unpackhi_epi8(elo, ehi) : _mm512_unpacklo_epi8(elo, ehi);
      // Pairs: (c_even << l_odd) | c_odd, l_even + l_odd (at most 22 bits).
      const __m512i lodd = _mm512_srli_epi32(e, 27);
      const __m512i pc = _mm512_ternarylogic_epi32(_mm512_sllv_epi32(_mm512_and_si512(e, m11), lodd),
                                                   _mm512_srli_epi32(e, 16), m11, 0xF8);  // A | (B & C)
      const __m512i pl = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 11), m4), lodd);
      // Quads, per 64-bit word (at most 44 bits).
      const __m512i qlo = _mm512_srli_epi64(pl, 32);
      const __m512i qc =
          _mm512_or_si512(_mm512_sllv_epi64(_mm512_and_si512(pc, lo32), qlo), _mm512_srli_epi64(pc, 32));
      const __m512i ql = _mm512_add_epi64(_mm512_and_si512(pl, lo32), qlo);
      // Octets in the even 64-bit words.
      const __m512i qch = _mm512_bsrli_epi128(qc, 8), qlh = _mm512_bsrli_epi128(ql, 8);
      oc[h] = _mm512_or_si512(_mm512_sllv_epi64(qc, qlh), qch);
      ol[h] = _mm512_add_epi64(ql, qlh);
    }
    const __m512i c = _mm512_permutex2var_epi64(oc[0], evens, oc[1]);
    const __m512i l = _mm512_permutex2var_epi64(ol[0], evens, ol[1]);
    store512(code8 + i / 8, c);
    store512(len8 + i / 8, l);
    total = _mm512_add_epi64(total, l);
    // 16-symbol groups in the even words.
    const __m512i ch = _mm512_bsrli_epi128(c, 8), lh = _mm512_bsrli_epi128(l, 8);
    store512(g16 + i / 8, _mm512_mask_blend_epi64(0xAA, _mm512_or_si512(_mm512_sllv_epi64(c, lh), ch),
                                                  _mm512_bslli_epi128(_mm512_add_epi64(l, lh), 8)));
  }
  return uint64_t(_mm512_reduce_add_epi64(total));
}

template <class Lookup>
size_t huff_encode_with(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out,
                        size_t cap, uint16_t* lane_bytes, Ahead* ahead) {
  auto groups = [](const uint8_t* s, uint32_t n, const Lookup& lk, uint64_t* c8, uint64_t* l8, uint64_t* g16,
                   Ahead& a) { return make_groups(s, n, lk, c8, l8, g16, a); };
  return encode_grouped<Lookup, 64>(sym, m, code, lanes, out, cap, lane_bytes, ahead, groups);
}

size_t huff_encode(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out, size_t cap,
                   uint16_t* lane_bytes, Ahead* ahead) {
  return code.nsym <= 64 ? huff_encode_with<Lookup64>(sym, m, code, lanes, out, cap, lane_bytes, ahead)
                         : huff_encode_with<Lookup256>(sym, m, code, lanes, out, cap, lane_bytes, ahead);
}

}  // namespace

bool avx512_kernel_set(const Kernels& avx2, Kernels* k) {
  *k = avx2;  // fp32 planes: the AVX2 kernels
  k->name = "avx512";
  k->split16 = split16;
  k->split16_range = split16_range;
  k->merge16 = merge16;
  k->merge16_stream = merge16_stream;
  k->minmax = minmax;
  k->sample_histogram = sample_histogram;
  k->count_outside = count_outside;
  k->histogram = histogram;
  k->huff_encode = huff_encode;
  k->huff_decode = huff_decode;
  k->table_kind = TableKind::kRegGather;
  return true;
}

}  // namespace codec
}  // namespace zipccl

#else  // no AVX-512 in this build (another architecture, or a compiler without the flags)

namespace zipccl {
namespace codec {
bool avx512_kernel_set(const Kernels&, Kernels*) { return false; }
}  // namespace codec
}  // namespace zipccl

#endif
