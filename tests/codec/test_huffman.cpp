#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "encoder_policy.h"
#include "huffman.h"

namespace zipccl {
namespace codec {
namespace {

uint32_t kraft_units(const HuffCode& c) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < c.nsym; ++i) {
    if (c.len[i]) k += 1u << (fmt::kMaxCodeLen - c.len[i]);
  }
  return k;
}

TEST(Huffman, CompleteAndLimitedOnRandomHistograms) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    uint32_t freq[256] = {0};
    const int nsym = 2 + int(rng() % 255);
    const int shape = trial % 3;
    for (int i = 0; i < nsym; ++i) {
      const uint32_t s = rng() % 256;
      freq[s] += shape == 0 ? 1 + rng() % 1000 : shape == 1 ? (1u << (rng() % 24)) : 1 + (rng() % 3);
    }
    int present = 0;
    for (uint32_t f : freq) present += f != 0;
    if (present < 2) continue;
    HuffCode c;
    const uint64_t bits = build_huffman(freq, &c);
    EXPECT_EQ(kraft_units(c), fmt::kTableSize) << "trial " << trial;
    uint64_t check = 0;
    for (int s = 0; s < 256; ++s) {
      if (freq[s]) {
        ASSERT_GE(c.len_of[s], 1);
        ASSERT_LE(c.len_of[s], fmt::kMaxCodeLen);
      } else {
        ASSERT_EQ(c.len_of[s], 0);
      }
      check += uint64_t(freq[s]) * c.len_of[s];
    }
    EXPECT_EQ(bits, check);
    // The decode table built from the descriptor maps every code back to its symbol.
    uint8_t desc[256];
    const size_t dbytes = write_huff_desc(c, desc);
    DecodeTable table;
    uint32_t lo, nsym2;
    ASSERT_EQ(read_huff_desc(desc, dbytes, &lo, &nsym2, &table), dbytes);
    for (int s = 0; s < 256; ++s) {
      if (!freq[s]) continue;
      const uint32_t window = uint32_t(c.code_of[s]) << (fmt::kMaxCodeLen - c.len_of[s]);
      ASSERT_EQ(table.pair[window].sym[0], s);
      ASSERT_EQ(table.len_of[s], c.len_of[s]);
      // Where a second code fits in the window, the entry holds it too.
      const PairEntry& e = table.pair[window];
      ASSERT_TRUE(e.count == 1 ? e.bits == c.len_of[s] : e.bits == c.len_of[s] + c.len_of[e.sym[1]]);
      // The single-symbol table (GPU decoder) agrees.
      uint16_t single[fmt::kTableSize];
      ASSERT_TRUE(fmt::build_decode_table(c.len, c.lo, c.nsym, single));
      ASSERT_EQ(single[window], uint16_t((c.len_of[s] << 8) | s));
    }
    // The tables a register-table kernel set asks for: the register tables, or else the gather table,
    // which holds the single-symbol table's entries as len | symbol << 24 in every window.
    DecodeTable rg;
    ASSERT_EQ(read_huff_desc(desc, dbytes, &lo, &nsym2, &rg, TableKind::kRegGather), dbytes);
    ASSERT_NE(rg.reg_ok, rg.gather_ok) << "trial " << trial;
    if (rg.gather_ok) {
      uint16_t single[fmt::kTableSize];
      ASSERT_TRUE(fmt::build_decode_table(c.len, c.lo, c.nsym, single));
      for (uint32_t w = 0; w < fmt::kTableSize; ++w) {
        ASSERT_EQ(rg.gather[w], uint32_t(single[w] >> 8) | (uint32_t(single[w] & 0xFF) << 24))
            << "window " << w;
      }
    } else {
      // The register tables decode every window as the single-symbol table does (huffman.h).
      uint16_t single[fmt::kTableSize];
      ASSERT_TRUE(fmt::build_decode_table(c.len, c.lo, c.nsym, single));
      const uint32_t b = rg.reg.short_bits, S = 1u << b;
      ASSERT_TRUE(b == 6 || b == 7);
      for (uint32_t w = 0; w < fmt::kTableSize; ++w) {
        const uint32_t e = w >= fmt::kTableSize - S ? S + (w & (S - 1)) : w >> (fmt::kMaxCodeLen - b);
        ASSERT_EQ(rg.reg.len[e], single[w] >> 8) << "window " << w;
        ASSERT_EQ(rg.reg.sym[e], single[w] & 0xFF) << "window " << w;
      }
    }
  }
}

TEST(Huffman, WithinOnePercentOfEntropyOnGaussianExponents) {
  // Exponent histogram of N(0,1) in bf16: P(exponent e) ~ mass of |x| in [2^(e-127), 2^(e-126)).
  uint32_t freq[256] = {0};
  double h = 0, total = 0;
  for (int e = 60; e < 130; ++e) {
    const double a = std::ldexp(1.0, e - 127), b = 2 * a;
    const double p = std::erf(b / std::sqrt(2.0)) - std::erf(a / std::sqrt(2.0));
    freq[e] = uint32_t(p * 1e6 + 1);
    total += freq[e];
  }
  for (int e = 0; e < 256; ++e) {
    if (freq[e]) h -= freq[e] / total * std::log2(freq[e] / total);
  }
  HuffCode c;
  const double avg = double(build_huffman(freq, &c)) / total;
  EXPECT_NEAR(h, 2.55, 0.1);
  EXPECT_LT(avg, h + 0.1);  // Huffman's redundancy here: < 0.1 bit of ~10.6 bits per element
}

// The [lo, hi] range hint (counts outside it zero) and the insertion sort of up to 64 leaves give
// the code of the full scan and the policy heapsort, leaf count by leaf count on both sides of 64.
TEST(Huffman, RangeHintAndSmallSortGiveTheSameCode) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 600; ++trial) {
    const uint32_t nsym = 2 + rng() % 255, lo = rng() % (257 - nsym), hi = lo + nsym - 1;
    const int present = trial < 300 ? int(2 + rng() % 100) : int(nsym);
    uint32_t freq[256] = {0};
    freq[lo] = 1 + rng() % 50, freq[hi] = 1 + rng() % 50;
    for (int i = 0; i < present; ++i) freq[lo + rng() % nsym] += 1 + (rng() % 4 ? rng() % 20 : rng() % 5000);
    HuffCode a, b;
    ASSERT_EQ(build_huffman(freq, &a), build_huffman(freq, &b, lo, hi));
    ASSERT_EQ(a.lo, b.lo);
    ASSERT_EQ(a.nsym, b.nsym);
    ASSERT_TRUE(std::equal(a.len, a.len + a.nsym, b.len));
    ASSERT_TRUE(std::equal(a.code_of + a.lo, a.code_of + a.lo + a.nsym, b.code_of + b.lo));
    ASSERT_TRUE(std::equal(a.len_of, a.len_of + 256, b.len_of));
    // Against the policy's sort (as the CUDA encoder orders leaves): the lengths by key order.
    uint64_t key[256];
    int n = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      if (freq[s]) key[n++] = policy::leaf_key(freq[s], s);
    }
    policy::sort_leaves(key, n);
    uint64_t lf[256];
    for (int i = 0; i < n; ++i) lf[i] = key[i] >> 8;
    policy::HuffScratch<uint64_t> scratch;
    uint8_t depth[256];
    policy::huffman_limited_depths(lf, n, &scratch, depth);
    for (int i = 0; i < n; ++i) ASSERT_EQ(a.len_of[key[i] & 0xFF], depth[i]) << "leaf " << i << " of " << n;
  }
}

TEST(Huffman, RejectsInvalidDescriptors) {
  DecodeTable table;
  uint32_t lo, nsym;
  // lo + nsym > 256
  const uint8_t over[] = {200, 99, 0x11, 0x11};
  EXPECT_EQ(read_huff_desc(over, sizeof(over), &lo, &nsym, &table), 0u);
  // Incomplete code (one symbol of length 1).
  const uint8_t incomplete[] = {10, 1, 0x01};
  EXPECT_EQ(read_huff_desc(incomplete, sizeof(incomplete), &lo, &nsym, &table), 0u);
  // Oversubscribed (three codes of length 1).
  const uint8_t over_sub[] = {10, 2, 0x11, 0x01};
  EXPECT_EQ(read_huff_desc(over_sub, sizeof(over_sub), &lo, &nsym, &table), 0u);
  // Length 12 > limit.
  const uint8_t too_long[] = {0, 1, 0xC1};
  EXPECT_EQ(read_huff_desc(too_long, sizeof(too_long), &lo, &nsym, &table), 0u);
  // Odd alphabet with a non-zero unused nibble.
  const uint8_t junk_nibble[] = {0, 2, 0x11, 0x10};
  EXPECT_EQ(read_huff_desc(junk_nibble, sizeof(junk_nibble), &lo, &nsym, &table), 0u);
  // Valid: two symbols of length 1.
  const uint8_t ok[] = {5, 1, 0x11};
  EXPECT_EQ(read_huff_desc(ok, sizeof(ok), &lo, &nsym, &table), 3u);
  EXPECT_EQ(read_huff_desc(ok, 2, &lo, &nsym, &table), 0u);  // truncated
}

}  // namespace
}  // namespace codec
}  // namespace zipccl

namespace zipccl {
namespace codec {
namespace {

// A plane coded from its sample (encoder_policy.h) must still give every byte that occurs a code,
// and cost almost nothing against the exact histogram on exponent-like planes.
TEST(Huffman, SampledCountsCodeEveryByteThatOccurs) {
  std::mt19937 rng(3);
  int sampled = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const uint32_t m = 64 + rng() % 16321;
    const double sigma = 0.5 + (rng() % 100) / 10.0;
    const int center = 40 + int(rng() % 170);
    std::normal_distribution<double> d(center, sigma);
    std::vector<uint8_t> plane(m);
    for (auto& b : plane) b = uint8_t(std::min(255.0, std::max(0.0, std::round(d(rng)))));
    uint32_t sample[256] = {0}, exact[256] = {0}, lo = 255, hi = 0;
    for (uint32_t i = 0; i < m; i += policy::kScreenStride) sample[plane[i]]++;
    for (uint8_t b : plane) exact[b]++, lo = std::min<uint32_t>(lo, b), hi = std::max<uint32_t>(hi, b);
    if (!policy::sample_suffices(sample, policy::screen_samples(m), lo, hi)) continue;
    ++sampled;
    policy::sampled_counts(sample, lo, hi);
    HuffCode approx, best;
    build_huffman(sample, &approx);
    const uint64_t opt = build_huffman(exact, &best);
    uint64_t cost = 0;
    for (int s = 0; s < 256; ++s) {
      if (!exact[s]) continue;
      ASSERT_GE(approx.len_of[s], 1) << "byte " << s << " occurs but has no code (trial " << trial << ")";
      cost += uint64_t(exact[s]) * approx.len_of[s];
    }
    if (m >= 8192) {
      EXPECT_LE(double(cost), 1.02 * double(opt)) << "trial " << trial;
    }
  }
  EXPECT_GT(sampled, 300);
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
