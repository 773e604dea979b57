// SIMD kernels against the scalar reference, kernel by kernel.
#include <gtest/gtest.h>

#include <random>

#include "kernels.h"
#include "zipccl/codec.h"
#include "test_data.h"

namespace zipccl {
namespace codec {
namespace {

const Kernels* simd_or_skip() { return simd_kernels(); }

TEST(Kernels, SimdPathMatchesThePlatform) {
#if defined(__aarch64__)
  EXPECT_STREQ(simd_path(), "neon");
#elif defined(__x86_64__)
  EXPECT_STREQ(simd_path(), __builtin_cpu_supports("avx2") ? "avx2" : "scalar");
#endif
  EXPECT_STREQ(select_kernels(true).name, "scalar");
}

TEST(Kernels, SplitMergeMatchScalar) {
  const Kernels* v = simd_or_skip();
  if (!v) GTEST_SKIP() << "no SIMD kernels on this CPU/build";
  const Kernels& s = scalar_kernels();
  auto in = testing::random_bytes(4 * 16384, 1);
  for (uint32_t m : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 1000u, 4096u, 16384u}) {
    std::vector<uint8_t> a[4], b[4];
    for (int p = 0; p < 4; ++p) a[p].assign(m, 0), b[p].assign(m, 1);
    s.split16(in.data(), m, a[0].data(), a[1].data());
    v->split16(in.data(), m, b[0].data(), b[1].data());
    ASSERT_EQ(a[0], b[0]);
    ASSERT_EQ(a[1], b[1]);
    std::vector<uint8_t> o1(2 * m), o2(2 * m);
    s.merge16(a[0].data(), a[1].data(), m, o1.data());
    v->merge16(a[0].data(), a[1].data(), m, o2.data());
    ASSERT_EQ(o1, o2);
    ASSERT_TRUE(std::equal(o1.begin(), o1.end(), in.begin()));
    uint8_t* pa[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    uint8_t* pb[4] = {b[0].data(), b[1].data(), b[2].data(), b[3].data()};
    s.split32(in.data(), m, pa);
    v->split32(in.data(), m, pb);
    for (int p = 0; p < 4; ++p) ASSERT_EQ(a[p], b[p]);
    std::vector<uint8_t> q1(4 * m), q2(4 * m);
    const uint8_t* ca[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    s.merge32(ca, m, q1.data());
    v->merge32(ca, m, q2.data());
    ASSERT_EQ(q1, q2);
    ASSERT_TRUE(std::equal(q1.begin(), q1.end(), in.begin()));
    uint32_t h1[256], h2[256];
    s.histogram(in.data(), m, h1);
    v->histogram(in.data(), m, h2);
    ASSERT_TRUE(std::equal(h1, h1 + 256, h2));
    for (uint32_t off : {0u, 7u}) {  // narrow ranges too: the random bytes, squeezed into [64, 64 + 15]
      std::vector<uint8_t> narrow(in.begin() + off, in.begin() + off + m);
      for (auto& x : narrow) x = uint8_t(64 + (x & 15));
      for (const auto* bytes : {&in, &narrow}) {
        uint32_t lo1, hi1, lo2, hi2;
        s.minmax(bytes->data() + (bytes == &in ? off : 0), m, &lo1, &hi1);
        v->minmax(bytes->data() + (bytes == &in ? off : 0), m, &lo2, &hi2);
        ASSERT_EQ(lo1, lo2);
        ASSERT_EQ(hi1, hi2);
      }
    }
  }
}

TEST(Kernels, HuffmanLanesRoundTripAndRejectBadLengths) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t m = 1 + rng() % 16384;
    const int lanes = 1 << (rng() % 7);
    std::vector<uint8_t> sym(m);
    const int spread = 1 + int(rng() % 200);
    for (auto& x : sym) x = uint8_t(100 + (rng() % spread) * (rng() % 2 ? 1 : -1) / (1 + rng() % 4));
    sym[0] = 0, sym[m - 1] = 255;  // at least two symbols
    uint32_t freq[256];
    scalar_kernels().histogram(sym.data(), m, freq);
    HuffCode code;
    const uint64_t bits = build_huffman(freq, &code);
    std::vector<uint8_t> stream(2 * m + 64);
    uint16_t lane_bytes[fmt::kMaxLanes];
    const size_t total = huff_encode_lanes(sym.data(), m, code, lanes, stream.data(), stream.size(), lane_bytes);
    ASSERT_NE(total, SIZE_MAX);
    ASSERT_LE(total, (bits + 7) / 8 + lanes);
    uint8_t desc[300];
    const size_t d = write_huff_desc(code, desc);
    DecodeTable table;
    uint32_t lo, nsym;
    ASSERT_EQ(read_huff_desc(desc, d, &lo, &nsym, &table), d);
    // Decode with the stream at the very end of the readable range (the padded-copy path) and
    // with slack after it (the fast path).
    for (size_t slack : {size_t(0), size_t(64)}) {
      std::vector<uint8_t> buf(stream.begin(), stream.begin() + total);
      buf.resize(total + slack);
      std::vector<uint8_t> back(m);
      ASSERT_TRUE(huff_decode_lanes(buf.data(), lane_bytes, lanes, table, m, back.data(), buf.data() + buf.size()))
          << "trial " << trial << " lanes " << lanes;
      ASSERT_EQ(back, sym);
      // A lane one byte longer or shorter than its bits: refused.
      int k = int(rng() % lanes);
      while (lane_bytes[k] == 0) k = (k + 1) % lanes;
      uint16_t bad[fmt::kMaxLanes];
      std::copy(lane_bytes, lane_bytes + lanes, bad);
      bad[k]--;
      ASSERT_FALSE(huff_decode_lanes(buf.data(), bad, lanes, table, m, back.data(), buf.data() + buf.size()));
    }
    // Capacity one byte short: overflow reported, nothing written past the cap.
    std::vector<uint8_t> small(total + 8, 0xEE);
    ASSERT_EQ(huff_encode_lanes(sym.data(), m, code, lanes, small.data(), total - 1, lane_bytes), SIZE_MAX);
    for (size_t i = total - 1; i < small.size(); ++i) ASSERT_EQ(small[i], 0xEE);
  }
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
