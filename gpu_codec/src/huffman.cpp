#include "huffman.h"

#include <algorithm>
#include <cstring>

namespace zipccl {
namespace codec {
namespace {

constexpr int kL = fmt::kMaxCodeLen;

struct Leaf {
  uint32_t freq;
  uint32_t sym;
};

// Optimal (unlimited) Huffman lengths for leaves sorted by ascending frequency, by the two-queue
// method: leaves and internal nodes are both consumed in non-decreasing weight order.
void huffman_depths(const Leaf* leaf, int n, uint8_t* depth) {
  if (n < 2) {
    for (int i = 0; i < n; ++i) depth[i] = 1;
    return;
  }
  uint64_t weight[2 * 256];
  int parent[2 * 256];
  int next_leaf = 0, next_node = n, end_node = n;
  auto take = [&]() {
    if (next_leaf < n && (next_node >= end_node || leaf[next_leaf].freq <= weight[next_node])) {
      return next_leaf++;
    }
    return next_node++;
  };
  for (int i = 0; i < n; ++i) weight[i] = leaf[i].freq;
  while (end_node < 2 * n - 1) {
    const int a = take();
    const int b = take();
    weight[end_node] = weight[a] + weight[b];
    parent[a] = parent[b] = end_node;
    ++end_node;
  }
  // Root is the last node; depth of a node = depth of its parent + 1.
  uint8_t d[2 * 256];
  d[end_node - 1] = 0;
  for (int i = end_node - 2; i >= 0; --i) d[i] = uint8_t(std::min(d[parent[i]] + 1, 255));
  for (int i = 0; i < n; ++i) depth[i] = d[i];
}

}  // namespace

uint64_t build_huffman(const uint32_t* freq, HuffCode* code) {
  Leaf leaf[256];
  int n = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    if (freq[s]) leaf[n++] = {freq[s], s};
  }
  std::sort(leaf, leaf + n, [](const Leaf& a, const Leaf& b) {
    return a.freq != b.freq ? a.freq < b.freq : a.sym < b.sym;
  });
  uint8_t depth[256];
  huffman_depths(leaf, n, depth);

  // Length limit: clamp, then lengthen the cheapest codes until the Kraft sum fits, then shorten
  // the most frequent codes while the slack allows, so the code is exactly complete.
  int32_t kraft = 0;
  for (int i = 0; i < n; ++i) {
    depth[i] = uint8_t(std::min<int>(depth[i], kL));
    kraft += 1 << (kL - depth[i]);
  }
  while (kraft > (1 << kL)) {
    // Leaves are sorted by ascending frequency: the first one not yet at the limit is cheapest.
    for (int i = 0; i < n && kraft > (1 << kL); ++i) {
      if (depth[i] < kL) {
        kraft -= 1 << (kL - depth[i] - 1);
        depth[i]++;
      }
    }
  }
  while (kraft < (1 << kL)) {
    for (int i = n - 1; i >= 0; --i) {
      const int gain = 1 << (kL - depth[i]);
      if (depth[i] > 1 && kraft + gain <= (1 << kL)) {
        kraft += gain;
        depth[i]--;
        break;
      }
    }
  }

  uint32_t lo = 255, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, leaf[i].sym);
    hi = std::max(hi, leaf[i].sym);
  }
  code->lo = lo;
  code->nsym = hi - lo + 1;
  std::fill(code->len, code->len + code->nsym, uint8_t(0));
  std::fill(code->len_of, code->len_of + 256, uint8_t(0));
  uint64_t bits = 0;
  for (int i = 0; i < n; ++i) {
    code->len[leaf[i].sym - lo] = depth[i];
    bits += uint64_t(leaf[i].freq) * depth[i];
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

}  // namespace

size_t read_huff_desc(const uint8_t* in, size_t avail, uint32_t* lo, uint32_t* nsym, DecodeTable* table) {
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
  build_pair_table(lens, *lo, *nsym, table->pair);
  std::memset(table->len_of, 0, sizeof(table->len_of));
  for (uint32_t i = 0; i < *nsym; ++i) table->len_of[*lo + i] = lens[i];
  return bytes;
}

}  // namespace codec
}  // namespace zipccl
