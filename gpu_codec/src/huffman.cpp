#include "huffman.h"

#include <algorithm>
#include <cstring>

#include "encoder_policy.h"

namespace zipccl {
namespace codec {

namespace {

// Sorts n keys policy::leaf_key(f, s) given in ascending symbol order: a stable radix sort on f
// (the fewest passes of at most 8 bits that cover its largest value, digits of equal width), which
// leaves equal counts in symbol order, i.e. ascending keys. For the wide alphabets (fp16's plane 0:
// ~120 leaves) where the heapsort took a mispredicted branch per comparison (46% of an fp16 encode):
// Gaussian fp16 encode 1.46-1.50x (v2o).
void sort_keys_by_count(uint64_t* key, int n) {
  uint64_t tmp[256];
  uint64_t any = 0;
  for (int i = 0; i < n; ++i) any |= key[i] >> 8;
  int bits = 0;
  while (bits < 56 && (any >> bits)) ++bits;
  const int passes = (bits + 7) / 8, width = passes ? (bits + passes - 1) / passes : 0;
  const uint32_t mask = (1u << width) - 1;
  uint64_t *a = key, *b = tmp;
  for (int p = 0; p < passes; ++p) {
    const int shift = 8 + p * width;
    uint32_t at[257];
    std::fill(at, at + mask + 2, 0u);
    for (int i = 0; i < n; ++i) at[((a[i] >> shift) & mask) + 1]++;
    for (uint32_t d = 0; d <= mask; ++d) at[d + 1] += at[d];
    for (int i = 0; i < n; ++i) b[at[(a[i] >> shift) & mask]++] = a[i];
    std::swap(a, b);
  }
  if (a != key) std::copy(a, a + n, key);
}

}  // namespace

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
    sort_keys_by_count(key, n);
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

// count[l]: the symbols of length l (l <= 11, a valid code's), in four interleaved arrays: an fp16
// plane's ~100 symbols, mostly of a few lengths, would otherwise wait on one counter's store each.
void length_counts(const uint8_t* lens, uint32_t nsym, uint32_t* count) {
  constexpr uint32_t kL = fmt::kMaxCodeLen;
  uint32_t c[4][kL + 1] = {{0}};
  uint32_t i = 0;
  for (; i + 4 <= nsym; i += 4)
    c[0][lens[i]]++, c[1][lens[i + 1]]++, c[2][lens[i + 2]]++, c[3][lens[i + 3]]++;
  for (; i < nsym; ++i) c[0][lens[i]]++;
  for (uint32_t l = 0; l <= kL; ++l) count[l] = c[0][l] + c[1][l] + c[2][l] + c[3][l];
}

// The register tables (huffman.h): canonical windows in order, each code over 2^(11 - l) of them.
// count: length_counts.
bool build_reg_tables(const uint8_t* lens, const uint32_t* count, uint32_t lo, uint32_t nsym, RegTables* t) {
  constexpr uint32_t kL = fmt::kMaxCodeLen;
  uint32_t first[kL + 2];
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

// The gather table (huffman.h) of a valid code, in canonical order (by length, then symbol: each
// symbol's run of 2^(11 - l) entries follows the previous one). Runs of up to 16 entries are written
// as 16 (into the next runs, which are written after, or into the table's padding): fp16's ~100
// symbols with runs of 1-8 entries cost a mispredicted loop exit each when filled exactly (the fill
// was 21% of an fp16 decode).
void build_gather_table(const uint8_t* lens, const uint32_t* count, uint32_t lo, uint32_t nsym,
                        uint32_t* table) {
  constexpr uint32_t kL = fmt::kMaxCodeLen;
  uint32_t at[kL + 2];
  at[1] = 0;
  for (uint32_t l = 1; l <= kL; ++l) at[l + 1] = at[l] + count[l];
  uint16_t order[256];  // symbol indices in canonical order
  for (uint32_t i = 0; i < nsym; ++i) {
    if (lens[i]) order[at[lens[i]]++] = uint16_t(i);
  }
  const uint32_t n = at[kL + 1];  // symbols present (the placement above moved at[1..kL] only)
  uint32_t w = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t i = order[j], l = lens[i], run = 1u << (kL - l);
    const uint32_t e = l | ((lo + i) << 24);
    uint32_t* t = table + w;
    for (uint32_t k = 0; k < 16; ++k) t[k] = e;
    for (uint32_t k = 16; k < run; ++k) t[k] = e;
    w += run;
  }
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
  uint32_t count[fmt::kMaxCodeLen + 1];
  if (kind != TableKind::kPair) length_counts(lens, *nsym, count);
  table->reg_ok = kind != TableKind::kPair && build_reg_tables(lens, count, *lo, *nsym, &table->reg);
  table->gather_ok = !table->reg_ok && kind == TableKind::kRegGather;
  if (table->gather_ok) build_gather_table(lens, count, *lo, *nsym, table->gather);
  if (!table->reg_ok && !table->gather_ok) {
    build_pair_table(lens, *lo, *nsym, table->pair);
    // The pair decoder reads the lengths of the symbols it decoded, all in [lo, lo + nsym).
    for (uint32_t i = 0; i < *nsym; ++i) table->len_of[*lo + i] = lens[i];
  }
  return bytes;
}

}  // namespace codec
}  // namespace zipccl
