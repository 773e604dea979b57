// AVX2 kernels (x86-64). Compiled with -mavx2 -mbmi2 -mpopcnt for this file only; nothing here runs
// before cpuid has confirmed those (kernels_for), so the library still runs on CPUs without AVX2. Each kernel produces exactly the scalar kernel's bytes.
#include "kernels.h"

#if defined(__AVX2__)
#include <immintrin.h>

#include "huff_groups.h"
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

// 32 elements from 32 bytes of each plane: the low bytes (p0 bit 0 -> bit 7, p1 bits 6..0) and the
// high bytes (p1 bit 7, p0 bits 7..1) in byte form (16-bit shifts, the bits they move across bytes
// masked off), then interleaved; the qword permute puts elements 0-15 in the low halves of the two
// 128-bit lanes so that the in-lane byte unpacks give elements 0-15 and 16-31 in order.
struct Merge32 {
  __m256i x7f = _mm256_set1_epi8(0x7F), x80 = _mm256_set1_epi8(char(0x80));
  inline void operator()(__m256i a, __m256i b, __m256i* lo, __m256i* hi) const {
    const __m256i l = _mm256_or_si256(_mm256_and_si256(b, x7f), _mm256_and_si256(_mm256_slli_epi16(a, 7), x80));
    const __m256i h = _mm256_or_si256(_mm256_and_si256(b, x80), _mm256_and_si256(_mm256_srli_epi16(a, 1), x7f));
    const __m256i lp = _mm256_permute4x64_epi64(l, 0xD8), hp = _mm256_permute4x64_epi64(h, 0xD8);
    *lo = _mm256_unpacklo_epi8(lp, hp);
    *hi = _mm256_unpackhi_epi8(lp, hp);
  }
};

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

// merge16 (kStream false) and merge16_stream (kStream): streaming stores from the first 32-byte
// boundary of dst on (dst must be even for there to be one). Not fenced (kernels.h).
template <bool kStream>
void merge16_with(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  uint32_t i = 0;
  if (kStream) {
    const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) & 31;
    i = uint32_t(((32 - mis) & 31) / 2);
    if ((mis & 1) || i >= m) return merge16_with<false>(p0, p1, m, dst);
    if (i) scalar_kernels().merge16(p0, p1, i, dst);
  }
  const Merge32 mg;
  for (; i + 32 <= m; i += 32) {
    __m256i v[2];
    mg(load256(p0 + i), load256(p1 + i), &v[0], &v[1]);
    for (int h = 0; h < 2; ++h) {
      __m256i* d = reinterpret_cast<__m256i*>(dst + 2 * i + 32 * h);
      kStream ? _mm256_stream_si256(d, v[h]) : _mm256_storeu_si256(d, v[h]);
    }
  }
  if (i < m) scalar_kernels().merge16(p0 + i, p1 + i, m - i, dst + 2 * i);
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

// ---- Huffman encode --------------------------------------------------------------------------

// Prefetches (kernels.h Ahead): one read and one write line per 32 symbols grouped (as the AVX-512
// set's two per 64). Without -mprfchw the write hint is a plain prefetcht0.
inline void prefetch_read(Ahead& a) {
  if (a.p < a.end) _mm_prefetch(reinterpret_cast<const char*>(a.p), _MM_HINT_T0), a.p += 64;
}
inline void prefetch_write(Ahead& a) {
  if (a.w < a.wend) _mm_prefetch(reinterpret_cast<const char*>(a.w), _MM_HINT_T0), a.w += 64;
}

// The symbols' entries e = code | len << 11 as two byte tables (e's low and high bytes), looked up for
// 32 symbols at a time with vpshufb, which reads 16 entries: alphabets spanning at most 16 * N values
// (N = 1, 2, 4) are indexed by symbol & (16N - 1), each 16-entry table a register, and the tables'
// results are blended on index bits 4 and 5 (moved to bit 7 for vpblendvb). Wider alphabets (an
// exponent plane with zeros in it) take the scalar lane coder.
template <int N>
struct LookupN {
  static constexpr uint32_t kEntries = 16 * N;
  __m256i lo[N], hi[N];
  LookupN(const uint8_t* tl, const uint8_t* th) {
    for (int i = 0; i < N; ++i) {
      lo[i] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tl + 16 * i)));
      hi[i] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(th + 16 * i)));
    }
  }
  static uint32_t index(uint32_t s) { return s & (kEntries - 1); }
  static __m256i pick(const __m256i* t, __m256i i, __m256i b4, __m256i b5) {
    if (N == 1) return _mm256_shuffle_epi8(t[0], i);
    const __m256i a = _mm256_blendv_epi8(_mm256_shuffle_epi8(t[0], i), _mm256_shuffle_epi8(t[1], i), b4);
    if (N == 2) return a;
    const __m256i b = _mm256_blendv_epi8(_mm256_shuffle_epi8(t[2], i), _mm256_shuffle_epi8(t[3], i), b4);
    return _mm256_blendv_epi8(a, b, b5);
  }
  void operator()(__m256i x, __m256i* elo, __m256i* ehi) const {
    const __m256i i = _mm256_and_si256(x, _mm256_set1_epi8(char(kEntries - 1)));
    // Bits 4 and 5 of each byte to its bit 7 (the 16-bit shifts carry nothing into bit 7 from below).
    const __m256i b4 = _mm256_slli_epi16(i, 3), b5 = _mm256_slli_epi16(i, 2);
    *elo = pick(lo, i, b4, b5), *ehi = pick(hi, i, b4, b5);
  }
};

// Groups of one lane's symbols, n of them (a multiple of 32), as the AVX-512 set's make_groups forms
// them (code8, len8, g16: the same values), 32 symbols a step. The in-lane byte unpacks give the
// entries of symbols 0-7 and 16-23 (first) and 8-15 and 24-31 (second) as words; each 128-bit lane
// then joins its pairs, quads and octet, and one in-lane qword unpack puts the four octets in order.
template <class Lookup>
inline uint64_t make_groups(const uint8_t* s, uint32_t n, const Lookup& lookup, uint64_t* code8,
                            uint64_t* len8, uint64_t* g16, Ahead& ahead) {
  const __m256i m11 = _mm256_set1_epi32(0x7FF), m4 = _mm256_set1_epi32(0xF),
                lo32 = _mm256_set1_epi64x(0xFFFFFFFF);
  __m256i total = _mm256_setzero_si256();
  for (uint32_t i = 0; i < n; i += 32) {
    prefetch_read(ahead), prefetch_write(ahead);
    __m256i oc[2], ol[2];
    __m256i elo, ehi;
    lookup(load256(s + i), &elo, &ehi);
    for (int h = 0; h < 2; ++h) {
      // Per 32-bit word: e_even | e_odd << 16.
      const __m256i e = h ? _mm256_unpackhi_epi8(elo, ehi) : _mm256_unpacklo_epi8(elo, ehi);
      // Pairs: (c_even << l_odd) | c_odd, l_even + l_odd (at most 22 bits).
      const __m256i lodd = _mm256_srli_epi32(e, 27);
      const __m256i pc = _mm256_or_si256(_mm256_sllv_epi32(_mm256_and_si256(e, m11), lodd),
                                         _mm256_and_si256(_mm256_srli_epi32(e, 16), m11));
      const __m256i pl = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 11), m4), lodd);
      // Quads, per 64-bit word (at most 44 bits).
      const __m256i qlo = _mm256_srli_epi64(pl, 32);
      const __m256i qc =
          _mm256_or_si256(_mm256_sllv_epi64(_mm256_and_si256(pc, lo32), qlo), _mm256_srli_epi64(pc, 32));
      const __m256i ql = _mm256_add_epi64(_mm256_and_si256(pl, lo32), qlo);
      // Octets in the even 64-bit words.
      const __m256i qch = _mm256_bsrli_epi128(qc, 8), qlh = _mm256_bsrli_epi128(ql, 8);
      oc[h] = _mm256_or_si256(_mm256_sllv_epi64(qc, qlh), qch);
      ol[h] = _mm256_add_epi64(ql, qlh);
    }
    const __m256i c = _mm256_unpacklo_epi64(oc[0], oc[1]), l = _mm256_unpacklo_epi64(ol[0], ol[1]);
    store256(code8 + i / 8, c);
    store256(len8 + i / 8, l);
    total = _mm256_add_epi64(total, l);
    // 16-symbol groups in the even words, their lengths in the odd ones.
    const __m256i ch = _mm256_bsrli_epi128(c, 8), lh = _mm256_bsrli_epi128(l, 8);
    store256(g16 + i / 8, _mm256_blend_epi32(_mm256_or_si256(_mm256_sllv_epi64(c, lh), ch),
                                             _mm256_bslli_epi128(_mm256_add_epi64(l, lh), 8), 0xCC));
  }
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), total);
  return t[0] + t[1] + t[2] + t[3];
}

template <class Lookup>
size_t huff_encode_with(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out,
                        size_t cap, uint16_t* lane_bytes, Ahead* ahead) {
  auto groups = [](const uint8_t* s, uint32_t n, const Lookup& lk, uint64_t* c8, uint64_t* l8, uint64_t* g16,
                   Ahead& a) { return make_groups(s, n, lk, c8, l8, g16, a); };
  return encode_grouped<Lookup, 32>(sym, m, code, lanes, out, cap, lane_bytes, ahead, groups);
}

size_t huff_encode(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out, size_t cap,
                   uint16_t* lane_bytes, Ahead* ahead) {
  if (code.nsym <= 16) return huff_encode_with<LookupN<1>>(sym, m, code, lanes, out, cap, lane_bytes, ahead);
  if (code.nsym <= 32) return huff_encode_with<LookupN<2>>(sym, m, code, lanes, out, cap, lane_bytes, ahead);
  if (code.nsym <= 64) return huff_encode_with<LookupN<4>>(sym, m, code, lanes, out, cap, lane_bytes, ahead);
  return lanes_encode(sym, m, code, lanes, out, cap, lane_bytes);
}

// ---- Huffman decode --------------------------------------------------------------------------

// A lane being decoded: its bit position from the quartet's first byte, its next output byte.
struct Lane {
  uint64_t pos;
  uint8_t* o;
};

// Five pair-table lookups from one 8-byte load (huff_lanes.h decode_run<5>) for a lane at bit `pos`
// of `in`, counting the bits used with a marker instead of a sum: bit 0 of the loaded word is set,
// so after the shifts it sits at bit (pos & 7) + (bits used), which a trailing-zero count reads
// back. No lookup reads it: the last one starts at most 7 + 44 bits in and reads 11, down to bit 2.
// kClamp: loads start at `limit` at most (else the caller has checked that none goes past it).
// top: 64 - kMaxCodeLen in a register the compiler cannot see through, so that each window is one
// shrx (BMI2) instead of a copy and a shift.
template <bool kClamp>
inline Lane decode_five(const uint8_t* in, Lane l, const DecodeTable& t, const uint8_t* limit, uint64_t top) {
  const uint8_t* a = in + (l.pos >> 3);
  if (kClamp) a = a < limit ? a : limit;
  uint64_t buf = (lanes_be64(a) | 1) << (l.pos & 7);
  uint8_t* o = l.o;
#pragma GCC unroll 5
  for (int j = 0; j < 5; ++j) {
    // The entry as one word for the count (a byte extract) and the shift (shlx takes its count mod
    // 64: the bits field): two loads and a store a lookup instead of three and one (+1-2%).
    const zipccl::codec::PairEntry& pe = t.pair[buf >> top];
    uint32_t e;
    std::memcpy(&e, &pe, 4);
    std::memcpy(o, pe.sym, 2);
    o += (e >> 8) & 0xFF;
    buf <<= (e & 63);
  }
  return {(l.pos & ~uint64_t(7)) + uint64_t(__builtin_ctzll(buf)), o};  // buf != 0: the marker
}

// huff_lanes.h decode_group<4> with decode_five and the next block's prefetches: a line a round,
// ~400 over a block's 8 quartets of ~50 rounds, so the whole next block (~22 KiB for 16384 bf16
// elements, the raw mantissa plane included) is asked for while this one is decoded (64 MiB: +2-4%
// against a line every fourth round, within noise). The lanes' state is in named locals, never
// address-taken, so that the symbol stores (which may alias anything in memory) do not force it out
// of registers (in arrays: 15% more instructions, spills).
template <bool kClamp>
void decode_four_with(const uint8_t* const* base, uint32_t count, const DecodeTable& t, uint8_t* out,
                      const uint8_t* limit, uint64_t* pos_out, Ahead* ahead) {
  const uint8_t* in = base[0];
  Lane l0 = {0, out}, l1 = {uint64_t(base[1] - in) * 8, out + count},
       l2 = {uint64_t(base[2] - in) * 8, out + 2 * size_t(count)},
       l3 = {uint64_t(base[3] - in) * 8, out + 3 * size_t(count)};
  uint64_t top = 64 - kMaxCodeLen;
  asm("" : "+r"(top));
  // Each run yields at most 10 symbols, so count / 10 - 1 runs cannot overrun any lane.
  const int rounds = int(count / 10) - 1;
  for (int q = 0; q < rounds; ++q) {
    if (ahead && ahead->p < ahead->end) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead->p), _MM_HINT_T0), ahead->p += 64;
    }
    l0 = decode_five<kClamp>(in, l0, t, limit, top);
    l1 = decode_five<kClamp>(in, l1, t, limit, top);
    l2 = decode_five<kClamp>(in, l2, t, limit, top);
    l3 = decode_five<kClamp>(in, l3, t, limit, top);
  }
  const Lane l[4] = {l0, l1, l2, l3};
  for (int k = 0; k < 4; ++k) {
    const LaneReader r = {in + (l[k].pos >> 3), uint32_t(l[k].pos & 7), l[k].o};
    pos_out[k] = finish_lane<5>(r, base[k], t, out + size_t(k) * count + count, limit);
  }
}

// Loads need no clamp when even 11 bits a symbol (the most a lane can use) from the last lane's start
// stay below the limit: every quartet but one at the frame's end.
void decode_four(const uint8_t* const* base, uint32_t count, const DecodeTable& t, uint8_t* out,
                 const uint8_t* limit, uint64_t* pos_out, Ahead* ahead) {
  if (size_t(limit - base[3]) >= (size_t(count) * kMaxCodeLen + 7) / 8) {
    decode_four_with<false>(base, count, t, out, limit, pos_out, ahead);
  } else {
    decode_four_with<true>(base, count, t, out, limit, pos_out, ahead);
  }
}

bool huff_decode(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& t, uint32_t m,
                 uint8_t* out, const uint8_t* readable_end, Ahead* ahead) {
  return lanes_decode(in, lane_bytes, lanes, t, m, out, readable_end, decode_four, ahead);
}

}  // namespace

// This file's kernels (the lane coders: its own build of huff_lanes.h); the rest the scalar set's.
bool avx2_kernel_set(Kernels* k) {
  *k = scalar_with("avx2", {split16, merge16_with<false>, split32, merge32, histogram, minmax, huff_encode, huff_decode});
  k->merge16_stream = merge16_with<true>;
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
