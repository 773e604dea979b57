// Wire-format constants and the bit-level helpers shared by the CPU and CUDA codecs.
// The layout itself is specified once, in gpu_codec/FORMAT.md; names here follow that document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZIPCCL_HD __host__ __device__ __forceinline__
#else
#define ZIPCCL_HD inline
#endif

namespace zipccl {
namespace codec {
namespace fmt {

constexpr uint32_t kMagic = 0x3143435Au;  // bytes "ZCC1"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 24;

constexpr uint8_t kFrameRaw = 0;
constexpr uint8_t kFrameConst = 1;
constexpr uint8_t kFrameCoded = 2;

constexpr uint8_t kTypeNone = 0;
constexpr uint8_t kTypeBf16 = 1;
constexpr uint8_t kTypeFp16 = 2;
constexpr uint8_t kTypeFp32 = 3;

constexpr int kMinBlockLog2 = 10;
constexpr int kMaxBlockLog2 = 14;
constexpr uint32_t kMaxBlockElems = 1u << kMaxBlockLog2;

constexpr uint8_t kPlaneRaw = 0;
constexpr uint8_t kPlaneConst = 1;
constexpr uint8_t kPlaneHuff = 2;
constexpr uint8_t kPlaneSparse = 3;

// Huffman planes: codes of at most 11 bits, split into up to 64 independent lanes (bit streams),
// each a contiguous run of the block's elements.
constexpr int kMaxCodeLen = 11;
constexpr uint32_t kTableSize = 1u << kMaxCodeLen;
constexpr int kMaxLanesLog2 = 6;
constexpr int kMaxLanes = 1 << kMaxLanesLog2;
constexpr int kDefaultLanesLog2 = 5;
// Longest lane stream: one lane holding a whole block of 11-bit codes.
constexpr size_t kMaxLaneBytes = (size_t(kMaxBlockElems) * kMaxCodeLen + 7) / 8;

// Elements per lane: lane k holds elements [k * L, min(m, (k + 1) * L)).
ZIPCCL_HD uint32_t lane_elems(uint32_t m, int lanes) { return (m + uint32_t(lanes) - 1) / uint32_t(lanes); }

ZIPCCL_HD size_t type_elem_size(uint8_t t) { return t == kTypeFp32 ? 4 : (t == kTypeNone ? 1 : 2); }
ZIPCCL_HD int type_planes(uint8_t t) { return t == kTypeFp32 ? 4 : 2; }
ZIPCCL_HD size_t round_up4(size_t x) { return (x + 3) & ~size_t(3); }

// Bytes of a Huffman plane descriptor for an alphabet [lo, lo + nsym): lo, nsym-1, the length
// nibbles, and a 16-bit byte length per lane.
ZIPCCL_HD size_t huff_desc_bytes(uint32_t nsym, int lanes) { return 2 + (nsym + 1) / 2 + 2 * size_t(lanes); }

// SPARSE planes: a 3-byte descriptor (base byte, u16 exception count k) and 3k data bytes (k u16
// positions, then k values).
constexpr size_t kSparseDescBytes = 3;
ZIPCCL_HD size_t sparse_data_bytes(uint32_t k) { return 3 * size_t(k); }

// Largest encoded size of one block of m elements with `planes` planes (FORMAT.md "Blocks"): every
// plane costs at most its raw size rounded to 4, plus the 4-byte-aligned modes byte.
ZIPCCL_HD size_t block_bound(uint32_t m, int planes) { return 4 + size_t(planes) * round_up4(m); }

// ---- Element <-> plane bytes (FORMAT.md "Planes") --------------------------------------------
// 16-bit types: plane 0 = bits 14..7, plane 1 = bit 15 in bit 7 | bits 6..0.
ZIPCCL_HD uint8_t split16_p0(uint16_t v) { return uint8_t(v >> 7); }
ZIPCCL_HD uint8_t split16_p1(uint16_t v) { return uint8_t(((v >> 8) & 0x80u) | (v & 0x7Fu)); }
ZIPCCL_HD uint16_t merge16(uint8_t p0, uint8_t p1) {
  return uint16_t((uint32_t(p1 & 0x80u) << 8) | (uint32_t(p0) << 7) | (p1 & 0x7Fu));
}
// fp32: plane 0 = bits 30..23, plane 1 = bit 31 in bit 7 | bits 22..16, plane 2 = bits 15..8,
// plane 3 = bits 7..0.
ZIPCCL_HD uint8_t split32_p0(uint32_t v) { return uint8_t(v >> 23); }
ZIPCCL_HD uint8_t split32_p1(uint32_t v) { return uint8_t(((v >> 24) & 0x80u) | ((v >> 16) & 0x7Fu)); }
ZIPCCL_HD uint32_t merge32(uint8_t p0, uint8_t p1, uint8_t p2, uint8_t p3) {
  return (uint32_t(p1 & 0x80u) << 24) | (uint32_t(p0) << 23) | (uint32_t(p1 & 0x7Fu) << 16) |
         (uint32_t(p2) << 8) | p3;
}

// ---- Little-endian field access (unaligned-safe) ---------------------------------------------
ZIPCCL_HD uint16_t load_le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
ZIPCCL_HD uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
ZIPCCL_HD uint64_t load_le64(const uint8_t* p) {
  return uint64_t(load_le32(p)) | (uint64_t(load_le32(p + 4)) << 32);
}
ZIPCCL_HD uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
ZIPCCL_HD void store_le16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
ZIPCCL_HD void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
ZIPCCL_HD void store_le64(uint8_t* p, uint64_t v) {
  store_le32(p, uint32_t(v));
  store_le32(p + 4, uint32_t(v >> 32));
}

// ---- Canonical Huffman code (FORMAT.md "Huffman plane") --------------------------------------
// A code (lengths of symbols lo..lo+nsym-1, 0 = absent) is valid when it is complete: Kraft sum
// exactly 1, at least two symbols, lengths <= kMaxCodeLen.
// build_decode_table checks that and fills the single-symbol table: entry[v] for every 11-bit
// window v = (len << 8) | symbol (the GPU decoder's table). Returns false for an invalid code.
ZIPCCL_HD bool code_is_valid(const uint8_t* lens, uint32_t nsym) {
  uint32_t kraft = 0, used = 0;
  for (uint32_t i = 0; i < nsym; ++i) {
    if (lens[i] > kMaxCodeLen) return false;
    if (lens[i]) kraft += 1u << (kMaxCodeLen - lens[i]), ++used;
  }
  return kraft == kTableSize && used >= 2;
}

ZIPCCL_HD bool build_decode_table(const uint8_t* lens, uint32_t lo, uint32_t nsym, uint16_t* table) {
  if (!code_is_valid(lens, nsym)) return false;
  uint32_t count[kMaxCodeLen + 1] = {0};
  for (uint32_t i = 0; i < nsym; ++i) count[lens[i]]++;
  // Canonical order: by length, then by symbol. Codes of length l occupy consecutive ranges of
  // the MSB-first table, so each symbol fills a contiguous run of 2^(11-l) entries.
  uint32_t start[kMaxCodeLen + 2];
  start[1] = 0;
  for (int l = 1; l <= kMaxCodeLen; ++l) start[l + 1] = start[l] + (count[l] << (kMaxCodeLen - l));
  for (uint32_t i = 0; i < nsym; ++i) {
    const uint32_t l = lens[i];
    if (!l) continue;
    const uint32_t run = 1u << (kMaxCodeLen - l);
    const uint16_t e = uint16_t((l << 8) | (lo + i));
    uint16_t* t = table + start[l];
    for (uint32_t j = 0; j < run; ++j) t[j] = e;
    start[l] += run;
  }
  return true;
}

// Encoder side of the same canonical code: code[i] (MSB-first value of length lens[i]).
// Assumes a code already checked complete.
ZIPCCL_HD void assign_codes(const uint8_t* lens, uint32_t nsym, uint16_t* code) {
  uint32_t count[kMaxCodeLen + 1] = {0};
  for (uint32_t i = 0; i < nsym; ++i) count[lens[i]]++;
  count[0] = 0;
  uint32_t next[kMaxCodeLen + 2];
  uint32_t c = 0;
  for (int l = 1; l <= kMaxCodeLen; ++l) {
    next[l] = c;
    c = (c + count[l]) << 1;
  }
  for (uint32_t i = 0; i < nsym; ++i) {
    if (lens[i]) code[i] = uint16_t(next[lens[i]]++);
  }
}

}  // namespace fmt
}  // namespace codec
}  // namespace zipccl
