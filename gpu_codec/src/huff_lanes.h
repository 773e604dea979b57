// Huffman lane streams (FORMAT.md "Huffman plane"): each lane is an MSB-first bit string of its
// elements' codes, zero-padded to a byte. Lanes are independent, so four are interleaved here to
// hide each one's load -> shift chain, and a GPU gives each lane its own thread.
//
// Included by each kernel translation unit (in an anonymous namespace) so that every instruction
// set variant compiles its own copy: the AVX2 unit gets BMI2's flag-free shifts.
#pragma once

#include <cstring>
#if defined(__BMI2__)
#include <immintrin.h>
#endif

#include "huffman.h"
#include "kernels.h"

namespace {  // NOLINT: one copy per kernel translation unit, by design

using zipccl::codec::Ahead;
using zipccl::codec::DecodeTable;
using zipccl::codec::HuffCode;
namespace fmt = zipccl::codec::fmt;

inline uint64_t lanes_be64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

// Encoder tables: the code left-aligned in 64 bits, and its length.
struct EncodeTable {
  uint64_t left[256];
  uint8_t len[256];
};

// Up to 4 codes of <= 11 bits go in between flushes: 7 + 44 bits fit the 64-bit container.
struct BitWriter {
  uint64_t acc;
  uint32_t nb;
  uint8_t* out;
  inline void put(const EncodeTable& t, uint8_t s) {
    acc |= t.left[s] >> nb;
    nb += t.len[s];
  }
  inline void flush() {  // writes 8 bytes, keeps the partial byte
    const uint64_t v = __builtin_bswap64(acc);
    std::memcpy(out, &v, 8);
    out += nb >> 3;
    acc <<= nb & ~7u;
    nb &= 7;
  }
  inline void finish() {
    const uint64_t v = __builtin_bswap64(acc);
    std::memcpy(out, &v, 8);
    out += (nb + 7) >> 3;
  }
};

// Pair encoder for alphabets spanning at most 32 values (exponent planes almost always do): two
// symbols per lookup, indexed by their low 5 bits, which are unique within such a span.
struct PairEncodeTable {
  uint64_t left[1024];  // both codes, left-aligned
  uint8_t len[1024];
};

inline uint32_t pair_indices(uint32_t s4) {  // -> (s0 | s1 << 5) | (s2 | s3 << 5) << 10
#if defined(__BMI2__)
  return _pext_u32(s4, 0x1F1F1F1Fu);
#else
  return (s4 & 31) | ((s4 >> 3) & (31 << 5)) | ((s4 >> 6) & (31 << 10)) | ((s4 >> 9) & (31 << 15));
#endif
}

template <int N>
void encode_group_pairs(const uint8_t* sym, uint32_t stride, uint32_t count, const PairEncodeTable& t,
                        const EncodeTable& single, BitWriter* w_io) {
  BitWriter w[N];
  for (int k = 0; k < N; ++k) w[k] = w_io[k];
  uint32_t i = 0;
  for (; i + 4 <= count; i += 4) {
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      uint32_t s4;
      std::memcpy(&s4, sym + size_t(k) * stride + i, 4);
      const uint32_t x = pair_indices(s4);
      w[k].acc |= t.left[x & 1023] >> w[k].nb;
      w[k].nb += t.len[x & 1023];
      w[k].acc |= t.left[x >> 10] >> w[k].nb;
      w[k].nb += t.len[x >> 10];
      w[k].flush();
    }
  }
  for (int k = 0; k < N; ++k) {
    for (uint32_t j = i; j < count; ++j) w[k].put(single, sym[size_t(k) * stride + j]);
    w[k].finish();
    w_io[k] = w[k];
  }
}

// Lane state lives in locals that are never address-taken, so the byte stores cannot alias it
// (a char store may alias anything: state behind a pointer would be reloaded after each one).
// Two lanes per loop keep all state in registers; the chains are short (one add per code), so
// out-of-order execution overlaps the rest.
template <int N>
void encode_group(const uint8_t* sym, uint32_t stride, uint32_t count, const EncodeTable& t, BitWriter* w_io) {
  BitWriter w[N];
  for (int k = 0; k < N; ++k) w[k] = w_io[k];
  uint32_t i = 0;
  for (; i + 4 <= count; i += 4) {
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      uint32_t s4;
      std::memcpy(&s4, sym + size_t(k) * stride + i, 4);
      w[k].put(t, uint8_t(s4));
      w[k].put(t, uint8_t(s4 >> 8));
      w[k].put(t, uint8_t(s4 >> 16));
      w[k].put(t, uint8_t(s4 >> 24));
      w[k].flush();
    }
  }
  for (int k = 0; k < N; ++k) {
    for (uint32_t j = i; j < count; ++j) w[k].put(t, sym[size_t(k) * stride + j]);
    w[k].finish();
    w_io[k] = w[k];
  }
}

// A lane being decoded: next byte, bit offset in it, output position.
struct LaneReader {
  const uint8_t* p;
  uint32_t bit;
  uint8_t* o;
};

// L pair-table lookups from one 8-byte load: L to 2L symbols. 7 + L * 11 bits must fit the 64-bit
// window: L <= 5 (57 bits hold four 11-bit codes, 62 five).
template <int L>
inline void decode_run(LaneReader& r, const DecodeTable& t, const uint8_t* limit) {
  static_assert(L >= 1 && 7 + 11 * L <= 64, "the window holds L codes");
  const uint8_t* a = r.p < limit ? r.p : limit;
  uint64_t buf = lanes_be64(a) << r.bit;
  uint32_t used = r.bit;
  uint8_t* o = r.o;
#pragma GCC unroll 5
  for (int j = 0; j < L; ++j) {
    const zipccl::codec::PairEntry& e = t.pair[buf >> (64 - fmt::kMaxCodeLen)];
    std::memcpy(o, e.sym, 2);
    o += e.count;
    buf <<= e.bits;
    used += e.bits;
  }
  r.o = o;
  r.p += used >> 3;
  r.bit = used & 7;
}

// Ends lane r (base: its first byte) at `end`: runs while 2L symbols fit, then the last symbols one at
// a time, so that exactly up to `end` is written. Returns the lane's consumed bits.
template <int L>
inline uint64_t finish_lane(LaneReader r, const uint8_t* base, const DecodeTable& t, uint8_t* end,
                            const uint8_t* limit) {
  while (r.o + 2 * L <= end) decode_run<L>(r, t, limit);
  uint64_t pos = uint64_t(r.p - base) * 8 + r.bit;
  for (uint8_t* o = r.o; o < end; ++o) {
    const uint8_t* a = base + (pos >> 3);
    a = a < limit ? a : limit;
    const uint8_t s = t.pair[(lanes_be64(a) << (pos & 7)) >> (64 - fmt::kMaxCodeLen)].sym[0];
    *o = s;
    pos += t.len_of[s];
  }
  return pos;
}

// Decodes lanes [0, N) of `count` symbols each into out + k * count; returns each lane's consumed
// bits in pos_out. Load addresses are clamped to `limit` (the last address an 8-byte load may
// start at): only a malformed lane gets there, and its bit count then fails the caller's check.
// (The Quartet signature of lanes_decode; ahead unused.)
template <int N>
void decode_group(const uint8_t* const* base, uint32_t count, const DecodeTable& t, uint8_t* out,
                  const uint8_t* limit, uint64_t* pos_out, Ahead* = nullptr) {
  LaneReader r[N];
  for (int k = 0; k < N; ++k) r[k] = {base[k], 0, out + size_t(k) * count};
  // Each quad yields at most 8 symbols, so count / 8 - 1 rounds cannot overrun any lane.
  const int rounds = int(count / 8) - 1;
  for (int q = 0; q < rounds; ++q) {
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) decode_run<4>(r[k], t, limit);
  }
  for (int k = 0; k < N; ++k) pos_out[k] = finish_lane<4>(r[k], base[k], t, out + size_t(k) * count + count, limit);
}

// A lane is valid when it used exactly its bytes and its padding bits are zero.
inline bool lane_ok(const uint8_t* base, uint32_t bytes, uint64_t pos) {
  if ((pos + 7) / 8 != bytes) return false;
  return (pos & 7) == 0 || (base[bytes - 1] & (0xFFu >> (pos & 7))) == 0;
}

inline uint32_t lane_count(uint32_t m, uint32_t per, int k) {
  const uint32_t first = uint32_t(k) * per;
  return first < m ? (m - first < per ? m - first : per) : 0;
}

size_t lanes_encode(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out, size_t cap,
                    uint16_t* lane_bytes) {
  EncodeTable t;
  for (int s = 0; s < 256; ++s) {
    t.len[s] = code.len_of[s];
    t.left[s] = code.len_of[s] ? uint64_t(code.code_of[s]) << (64 - code.len_of[s]) : 0;
  }
  // 32 values or fewer: pair table (1024 entries, built only over the symbols present).
  const bool pairs = code.nsym <= 32;
  PairEncodeTable pt;
  if (pairs) {
    for (uint32_t a = code.lo; a < code.lo + code.nsym; ++a) {
      if (!t.len[a]) continue;
      for (uint32_t b = code.lo; b < code.lo + code.nsym; ++b) {
        if (!t.len[b]) continue;
        const uint32_t x = (a & 31) | ((b & 31) << 5);
        pt.left[x] = t.left[a] | (t.left[b] >> t.len[a]);
        pt.len[x] = uint8_t(t.len[a] + t.len[b]);
      }
    }
  }
  const uint32_t per = fmt::lane_elems(m, lanes);
  // Each lane is written to its own scratch slot (lengths are known only afterwards), then packed.
  const size_t slot = (size_t(per) * fmt::kMaxCodeLen + 7) / 8 + 16;
  alignas(64) uint8_t scratch[fmt::kMaxLaneBytes + 32 * fmt::kMaxLanes];
  size_t total = 0;
  for (int k0 = 0; k0 < lanes; k0 += 4) {
    const int n = lanes - k0 < 4 ? lanes - k0 : 4;
    BitWriter w[4];
    uint32_t cnt[4];
    for (int j = 0; j < n; ++j) {
      cnt[j] = lane_count(m, per, k0 + j);
      w[j] = {0, 0, scratch + size_t(k0 + j) * slot};
    }
    for (int j = 0; j < n; j += 2) {
      if (j + 1 < n && cnt[j + 1] == cnt[j]) {
        if (pairs) {
          encode_group_pairs<2>(sym + size_t(k0 + j) * per, per, cnt[j], pt, t, &w[j]);
        } else {
          encode_group<2>(sym + size_t(k0 + j) * per, per, cnt[j], t, &w[j]);
        }
      } else {
        for (int i = j; i < n && i < j + 2; ++i) {
          if (cnt[i]) encode_group<1>(sym + size_t(k0 + i) * per, per, cnt[i], t, &w[i]);
        }
      }
    }
    for (int j = 0; j < n; ++j) {
      const size_t bytes = size_t(w[j].out - (scratch + size_t(k0 + j) * slot));
      if (total + bytes > cap) return SIZE_MAX;
      std::memcpy(out + total, scratch + size_t(k0 + j) * slot, bytes);
      lane_bytes[k0 + j] = uint16_t(bytes);
      total += bytes;
    }
  }
  return total;
}

// quartet: decodes four full lanes as decode_group<4> does (a kernel set's own; ahead: kernels.h).
template <class Quartet = decltype(&decode_group<4>)>
bool lanes_decode(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& t, uint32_t m,
                  uint8_t* out, const uint8_t* readable_end, Quartet quartet = &decode_group<4>,
                  Ahead* ahead = nullptr) {
  const uint32_t per = fmt::lane_elems(m, lanes);
  const uint8_t* limit = readable_end - 8;
  const uint8_t* base[fmt::kMaxLanes];
  const uint8_t* p = in;
  for (int k = 0; k < lanes; ++k) {
    // A lane never holds more than 11 bits per element: bounds every read below.
    if (lane_bytes[k] > (uint64_t(lane_count(m, per, k)) * fmt::kMaxCodeLen + 7) / 8) return false;
    base[k] = p, p += lane_bytes[k];
  }
  for (int k0 = 0; k0 < lanes; k0 += 4) {
    const int n = lanes - k0 < 4 ? lanes - k0 : 4;
    uint64_t pos[4];
    if (n == 4 && lane_count(m, per, k0 + 3) == per && base[k0 + 3] + lane_bytes[k0 + 3] <= limit) {
      quartet(base + k0, per, t, out + size_t(k0) * per, limit, pos, ahead);
    } else {
      for (int j = 0; j < n; ++j) {
        const int k = k0 + j;
        const uint32_t cnt = lane_count(m, per, k);
        uint8_t* o = out + (cnt ? size_t(k) * per : 0);
        if (base[k] + lane_bytes[k] > limit) {
          // The frame's last bytes: decode from a zero-padded copy so 8-byte loads stay inside.
          alignas(64) uint8_t pad[fmt::kMaxLaneBytes + 16];
          std::memcpy(pad, base[k], lane_bytes[k]);
          std::memset(pad + lane_bytes[k], 0, 16);
          const uint8_t* b = pad;
          decode_group<1>(&b, cnt, t, o, pad + lane_bytes[k] + 8, &pos[j]);
        } else {
          decode_group<1>(&base[k], cnt, t, o, limit, &pos[j]);
        }
      }
    }
    for (int j = 0; j < n; ++j) {
      if (!lane_ok(base[k0 + j], lane_bytes[k0 + j], pos[j])) return false;
    }
  }
  return true;
}

// The lane coders in the Kernels signatures: the pair-table sets take no prefetch hints (Ahead).
[[maybe_unused]] size_t lanes_encode_k(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes,
                                       uint8_t* out, size_t cap, uint16_t* lane_bytes, Ahead*) {
  return lanes_encode(sym, m, code, lanes, out, cap, lane_bytes);
}
[[maybe_unused]] bool lanes_decode_k(const uint8_t* in, const uint16_t* lane_bytes, int lanes,
                                     const DecodeTable& t, uint32_t m, uint8_t* out,
                                     const uint8_t* readable_end, Ahead*) {
  return lanes_decode(in, lane_bytes, lanes, t, m, out, readable_end);
}

}  // namespace
