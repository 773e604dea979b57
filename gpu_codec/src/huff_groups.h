// The lane coder of the SIMD kernel sets that form code groups in registers (simd_avx2.cpp,
// simd_avx512.cpp): the ISA-neutral part, the append of groups of 8 and 16 codes to the lanes' bit
// strings. Included (like huff_lanes.h, after it) by each such translation unit, inside an
// anonymous namespace, so that each compiles its own copy.
#pragma once

#include <cstdint>
#include <cstring>

#include "huff_lanes.h"

namespace {  // NOLINT: one copy per kernel translation unit, by design

// Appends the len (1..56) low bits of `code` to a lane's bit string at base. acc holds the string's
// last 64 bits (older ones shift out), nbits its length. Each call stores the 8 bytes that end with
// the byte holding the last bit, i.e. from byte ceil(nbits / 8) - 8 on (which may be before base:
// lanes get 8 writable bytes in front), zero-padded: every byte a later call may still complete
// is rewritten whole, because a group of at most 56 bits moves that window by at most 7 bytes (the
// stream bytes equal huff_lanes.h's BitWriter's). Two dependency chains of one and two
// instructions, and no pointer or pending-count updates: ~10 instructions a group instead of ~13.
inline void put_bits(uint64_t& acc, uint64_t& nbits, uint8_t* base, uint64_t code, uint32_t len) {
  acc = (acc << len) | code;
  nbits += len;
  const uint64_t v = __builtin_bswap64(acc << (-nbits & 7));
  std::memcpy(base + ((nbits + 7) >> 3) - 8, &v, 8);
}

inline void put_symbols(uint64_t& acc, uint64_t& nbits, uint8_t* base, const uint8_t* s, uint32_t n,
                        const HuffCode& code) {
  for (uint32_t i = 0; i < n; ++i) put_bits(acc, nbits, base, code.code_of[s[i]], code.len_of[s[i]]);
}

// The lane coder of the SIMD sets that group codes in registers: make_groups(s, n, lookup, code8,
// len8, g16, ahead) forms the groups of n symbols (a multiple of kStep) as the AVX-512 set's
// make_groups documents, and returns their total bits; Lookup (kEntries, index(s), a constructor
// from the low and high byte tables of the entries code | len << 11) is what it looks codes up with.
// The lanes' bit strings are then appended a group at a time (put_bits).
template <class Lookup, uint32_t kStep, class MakeGroups>
size_t encode_grouped(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out, size_t cap,
                      uint16_t* lane_bytes, Ahead* ahead_io, MakeGroups make_groups) {
  alignas(64) uint8_t tl[Lookup::kEntries] = {0}, th[Lookup::kEntries] = {0};
  for (uint32_t s = code.lo; s < code.lo + code.nsym; ++s) {
    const uint32_t e = code.code_of[s] | (code.len_of[s] << 11);
    tl[Lookup::index(s)] = uint8_t(e), th[Lookup::index(s)] = uint8_t(e >> 8);
  }
  const Lookup lookup(tl, th);
  const uint32_t per = fmt::lane_elems(m, lanes);
  // Lane k's bytes from scratch + k * slot + 8 on, the 8 in front writable (put_bits).
  const size_t slot = (size_t(per) * fmt::kMaxCodeLen + 7) / 8 + 8;
  alignas(64) uint8_t scratch[fmt::kMaxLaneBytes + 16 * fmt::kMaxLanes];
  constexpr int kW = 2;  // lanes interleaved (more spill the writers to the stack)
  alignas(64) uint64_t code8[kW][fmt::kMaxBlockElems / 8], len8[kW][fmt::kMaxBlockElems / 8],
      g16[kW][fmt::kMaxBlockElems / 8];
  size_t total = 0;
  Ahead none;
  Ahead& ahead = ahead_io ? *ahead_io : none;
  for (int k0 = 0; k0 < lanes; k0 += kW) {
    const int n = lanes - k0 < kW ? lanes - k0 : kW;
    // Writer state in locals that are never address-taken, so that it stays in registers.
    uint64_t acc[kW] = {0}, nb[kW] = {0};
    uint8_t* o[kW];
    uint32_t cnt[kW], vec[kW];
    uint64_t bits[kW];
    const uint8_t* s[kW];
    for (int j = 0; j < n; ++j) {
      cnt[j] = lane_count(m, per, k0 + j);
      vec[j] = cnt[j] & ~(kStep - 1);
      s[j] = sym + size_t(k0 + j) * per;
      o[j] = scratch + size_t(k0 + j) * slot + 8;
      bits[j] = make_groups(s[j], vec[j], lookup, code8[j], len8[j], g16[j], ahead);
    }
    // An 8-symbol group of more than 56 bits is coded symbol by symbol.
    auto put8 = [&](int j, uint32_t g) {
      if (__builtin_expect(len8[j][g] <= 56, 1)) {
        put_bits(acc[j], nb[j], o[j], code8[j][g], uint32_t(len8[j][g]));
      } else {
        put_symbols(acc[j], nb[j], o[j], s[j] + 8 * g, 8, code);
      }
    };
    // 16-symbol groups when the lanes average at most 52 bits a group (3.25 bits a symbol: the > 56
    // exceptions then stay rare enough for the branch), else 8-symbol groups. At 44 (v1i-v1r) the
    // mixed-scale bucket's exponent planes (~2.9 bits a symbol) mostly took 8-symbol groups: paired,
    // 52 encodes that set 13-18% faster at 64 MiB (48: 9-14%, 56: 14%); Gaussian planes ~2.7 bits.
    const bool by16 = n == kW && vec[0] == vec[kW - 1] && bits[0] <= uint64_t(vec[0]) * 52 / 16 &&
                      bits[kW - 1] <= uint64_t(vec[0]) * 52 / 16;
    if (by16) {
      for (uint32_t i = 0; i < vec[0] / 16; ++i) {
#pragma GCC unroll 2
        for (int j = 0; j < kW; ++j) {
          if (__builtin_expect(g16[j][2 * i + 1] <= 56, 1)) {
            put_bits(acc[j], nb[j], o[j], g16[j][2 * i], uint32_t(g16[j][2 * i + 1]));
          } else {
            put8(j, 2 * i);
            put8(j, 2 * i + 1);
          }
        }
      }
    } else {
      for (int j = 0; j < n; ++j) {
        for (uint32_t g = 0; g < vec[j] / 8; ++g) put8(j, g);
      }
    }
    for (int j = 0; j < n; ++j) {
      put_symbols(acc[j], nb[j], o[j], s[j] + vec[j], cnt[j] - vec[j], code);
      // The last partial byte was stored with the last bits (zero-padded); none if the lane is empty.
      const size_t bytes = size_t(nb[j] + 7) / 8;
      if (total + bytes > cap) return SIZE_MAX;
      std::memcpy(out + total, o[j], bytes);
      lane_bytes[k0 + j] = uint16_t(bytes);
      total += bytes;
    }
  }
  return total;
}

}  // namespace
