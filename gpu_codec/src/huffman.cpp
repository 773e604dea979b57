#include "huffman.h"

#include <algorithm>
#include <cstring>

#include "encoder_policy.h"

namespace zipccl {
namespace codec {

uint64_t build_huffman(const uint32_t* freq, HuffCode* code, uint32_t lo_hint, uint32_t hi_hint) {
  uint64_t key[256];
  int n = 0;
  // Branch-free: whether a count is zero is a coin toss in a plane's tails.
  for (uint32_t s = lo_hint; s <= hi_hint && s < 256; ++s) {
    key[n] = policy::leaf_key(freq[s], s);
    n += freq[s] != 0;
  }
  // Keys are distinct, so every sort gives policy::sort_leaves' order. Exponent planes have a few
  // dozen leaves, where insertion sort takes one mispredicted branch per leaf against the heapsort's
  // one per comparison (an exponent plane: 425 vs 475 ns; with the [lo, hi] scan 165 ns, v1n).
  if (n <= 64) {
    for (int i = 1; i < n; ++i) {
      const uint64_t k = key[i];
      int j = i;
      for (; j > 0 && key[j - 1] > k; --j) key[j] = key[j - 1];
      key[j] = k;
    }
  } else {
    policy::sort_leaves(key, n);
  }
  uint64_t leaf_freq[256];
  uint32_t leaf_sym[256];
  for (int i = 0; i < n; ++i) leaf_freq[i] = key[i] >> 8, leaf_sym[i] = uint32_t(key[i] & 0xFF);
  policy::HuffScratch<uint64_t> scratch;
  uint8_t depth[256];
  policy::huffman_limited_depths(leaf_freq, n, &scratch, depth);

  uint32_t lo = 255, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, leaf_sym[i]);
    hi = std::max(hi, leaf_sym[i]);
  }
  code->lo = lo;
  code->nsym = hi - lo + 1;
  std::fill(code->len, code->len + code->nsym, uint8_t(0));
  std::fill(code->len_of, code->len_of + 256, uint8_t(0));
  uint64_t bits = 0;
  for (int i = 0; i < n; ++i) {
    code->len[leaf_sym[i] - lo] = depth[i];
    bits += leaf_freq[i] * depth[i];
  }
  uint16_t c[256];
  fmt::assign_codes(code->len, code->nsym, c);
  for (uint32_t i = 0; i < code->nsym; ++i) {
    code->len_of[lo + i] = code->len[i];
    code->code_of[lo + i] = code->len[i] ? c[i] : 0;
  }
  return bits;
}

size_t write_huff_desc(const HuffCode& code, uint8_t* out) {
  out[0] = uint8_t(code.lo);
  out[1] = uint8_t(code.nsym - 1);
  uint8_t* nib = out + 2;
  for (uint32_t i = 0; i < code.nsym; i += 2) {
    const uint8_t hi = i + 1 < code.nsym ? code.len[i + 1] : 0;
    nib[i / 2] = uint8_t(code.len[i] | (hi << 4));
  }
  return 2 + (code.nsym + 1) / 2;
}

namespace {

inline void fill(PairEntry* p, uint32_t n, PairEntry v) {
  uint32_t v1;
  std::memcpy(&v1, &v, 4);
  const uint64_t v2 = v1 | (uint64_t(v1) << 32);
  uint32_t i = 0;
  for (; i + 2 <= n; i += 2) std::memcpy(p + i, &v2, 8);
  if (i < n) p[i] = v;
}

// Fills the pair table by runs: the windows starting with first code c1 (length l1) form a run
// whose remaining r = 11 - l1 bits are themselves a canonical window of the same code, so each
// second code c2 with l2 <= r covers a sub-run of 2^(r - l2) entries, and the rest of the run
// (second code longer than r bits) holds c1 alone.
void build_pair_table(const uint8_t* lens, uint32_t lo, uint32_t nsym, PairEntry* pair) {
  constexpr int kL = fmt::kMaxCodeLen;
  uint32_t sym[256], start[256], count[kL + 2] = {0};
  uint8_t len[256];
  uint32_t n = 0;
  for (int l = 1; l <= kL; ++l) {
    for (uint32_t i = 0; i < nsym; ++i) {
      if (lens[i] == l) sym[n] = lo + i, len[n] = uint8_t(l), ++n, ++count[l];
    }
  }
  for (uint32_t i = 0, w = 0; i < n; ++i) {
    start[i] = w;
    w += 1u << (kL - len[i]);
  }
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t l1 = len[i], r = kL - l1;
    PairEntry* run = pair + start[i];
    const PairEntry one = {uint8_t(l1), 1, {uint8_t(sym[i]), 0}};
    uint32_t off = 0;
    for (uint32_t j = 0; j < n && len[j] <= r; ++j) {
      const uint32_t sub = 1u << (r - len[j]);
      const PairEntry two = {uint8_t(l1 + len[j]), 2, {uint8_t(sym[i]), uint8_t(sym[j])}};
      fill(run + off, sub, two);
      off += sub;
    }
    fill(run + off, (1u << r) - off, one);
  }
}

// The register tables (huffman.h): canonical windows in order, each code over 2^(11 - l) of them.
bool build_reg_tables(const uint8_t* lens, uint32_t lo, uint32_t nsym, RegTables* t) {
  constexpr uint32_t kL = fmt::kMaxCodeLen;
  uint32_t count[kL + 1] = {0}, first[kL + 2];
  for (uint32_t i = 0; i < nsym; ++i) count[lens[i]]++;
  first[1] = 0;
  for (uint32_t l = 1; l <= kL; ++l) first[l + 1] = first[l] + (count[l] << (kL - l));
  // Codes longer than b bits come last in canonical order, from window first[b + 1] on: the
  // smallest b whose long codes all lie in the last 2^b windows.
  uint32_t b = 6;
  while (b <= 7 && first[b + 1] < fmt::kTableSize - (1u << b)) ++b;
  if (b > 7) return false;
  const uint32_t S = 1u << b, kLong = fmt::kTableSize - S, shift = kL - b;
  // Every entry the decoders use is written below (a complete code covers every window); the short
  // entries of the long prefixes are looked up and discarded, so they are only made defined.
  std::memset(t->len + (kLong >> shift), 0, S - (kLong >> shift));
  std::memset(t->sym + (kLong >> shift), 0, S - (kLong >> shift));
  t->short_bits = b;
  // Runs are 1 to 64 entries: byte loops, not a library call each.
  auto fill = [](uint8_t* p, uint32_t n, uint8_t v) {
    for (uint32_t k = 0; k < n; ++k) p[k] = v;
  };
  for (uint32_t i = 0; i < nsym; ++i) {
    const uint32_t l = lens[i];
    if (!l) continue;
    const uint32_t start = first[l], end = start + (1u << (kL - l));
    first[l] = end;
    const uint8_t s = uint8_t(lo + i);
    if (l <= b) {
      fill(t->len + (start >> shift), (end - start) >> shift, uint8_t(l));
      fill(t->sym + (start >> shift), (end - start) >> shift, s);
    }
    if (end > kLong) {
      const uint32_t a = start > kLong ? start - kLong : 0;
      fill(t->len + S + a, end - kLong - a, uint8_t(l));
      fill(t->sym + S + a, end - kLong - a, s);
    }
  }
  return true;
}

}  // namespace

size_t read_huff_desc(const uint8_t* in, size_t avail, uint32_t* lo, uint32_t* nsym, DecodeTable* table,
                      TableKind kind) {
  if (avail < 2) return 0;
  *lo = in[0];
  *nsym = uint32_t(in[1]) + 1;
  if (*lo + *nsym > 256) return 0;
  const size_t bytes = 2 + (*nsym + 1) / 2;
  if (avail < bytes) return 0;
  uint8_t lens[257];
  for (uint32_t i = 0; i < *nsym; i += 2) {
    lens[i] = in[2 + i / 2] & 0x0F;
    lens[i + 1] = in[2 + i / 2] >> 4;
  }
  // An odd alphabet leaves the last high nibble unused: it must be zero.
  if ((*nsym & 1) && lens[*nsym] != 0) return 0;
  if (!fmt::code_is_valid(lens, *nsym)) return 0;
  table->reg_ok = kind == TableKind::kReg && build_reg_tables(lens, *lo, *nsym, &table->reg);
  if (!table->reg_ok) {
    build_pair_table(lens, *lo, *nsym, table->pair);
    // The pair decoder reads the lengths of the symbols it decoded, all in [lo, lo + nsym).
    for (uint32_t i = 0; i < *nsym; ++i) table->len_of[*lo + i] = lens[i];
  }
  return bytes;
}

}  // namespace codec
}  // namespace zipccl
