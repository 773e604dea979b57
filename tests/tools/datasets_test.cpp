#include "datasets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Exact value of an fp16 bit pattern (finite only).
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

TEST(Datasets, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);    // max float rounds to infinity
  const uint16_t nan = float_to_bf16(from_bits(0x7F800001));  // payload only in the low bits
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x7F, 0);
}

TEST(Datasets, Fp16KnownValues) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_fp16(NAN) & 0x7C00, 0x7C00);
  EXPECT_NE(float_to_fp16(NAN) & 0x3FF, 0);
}

TEST(Datasets, Fp16IsNearestOnRandomFloats) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0x477FEFFF);  // finite, below the overflow threshold
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(bits(gen));
    const uint16_t h = float_to_fp16(f);
    const double err = std::fabs(half_value(h) - f);
    if (h != 0x7BFF) {
      EXPECT_LE(err, std::fabs(half_value(static_cast<uint16_t>(h + 1)) - f)) << f;
    }
    if (h != 0) {
      EXPECT_LE(err, std::fabs(half_value(static_cast<uint16_t>(h - 1)) - f)) << f;
    }
  }
}

TEST(Datasets, DeterministicWhateverTheThreadCount) {
  const size_t size = (size_t{3} << 20) + 4 * 1000 + 3;  // several generator chunks, odd byte count
  for (const DatasetInfo& d : builtin_datasets()) {
    std::vector<uint8_t> a, b, c;
    ASSERT_TRUE(make_dataset(d.name, size, &a, 1));
    ASSERT_TRUE(make_dataset(d.name, size, &b, 3));
    ASSERT_TRUE(make_dataset(d.name, size, &c, 0));
    const size_t es = codec::elem_size(d.type);
    EXPECT_EQ(a.size(), size / es * es) << d.name;
    EXPECT_TRUE(a == b && a == c) << d.name;
  }
  std::vector<uint8_t> x;
  EXPECT_FALSE(make_dataset("no-such-set", 100, &x));
}

TEST(Datasets, SetsHaveTheirAdvertisedProperties) {
  std::vector<uint8_t> b;
  ASSERT_TRUE(make_dataset("grads-fp32-lo16zero", 4 << 20, &b));
  size_t low_zero = 0, n = b.size() / 4;
  for (size_t i = 0; i < n; ++i) low_zero += b[4 * i] == 0 && b[4 * i + 1] == 0;
  EXPECT_GT(low_zero, n * 99 / 100);
  EXPECT_LT(low_zero, n);

  ASSERT_TRUE(make_dataset("nan-heavy-bf16", 4 << 20, &b));
  size_t nan = 0, inf = 0, denormal = 0, neg_zero = 0;
  n = b.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = static_cast<uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
    const bool max_exp = (v & 0x7F80) == 0x7F80;
    nan += max_exp && (v & 0x7F);
    inf += max_exp && !(v & 0x7F);
    denormal += (v & 0x7F80) == 0 && (v & 0x7F);
    neg_zero += v == 0x8000;
  }
  EXPECT_NEAR(static_cast<double>(nan) / n, 0.30, 0.01);
  EXPECT_GT(inf, n / 100);
  EXPECT_GT(denormal, n / 50);
  EXPECT_GT(neg_zero, n / 50);

  ASSERT_TRUE(make_dataset("zeros", 1000, &b));
  for (uint8_t x : b) ASSERT_EQ(x, 0);

  ASSERT_TRUE(make_dataset("gauss-bf16-s1", 2 << 20, &b));
  double sum2 = 0;
  n = b.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = static_cast<uint32_t>(b[2 * i] | b[2 * i + 1] << 8) << 16;
    const double f = from_bits(v);
    sum2 += f * f;
  }
  EXPECT_NEAR(std::sqrt(sum2 / n), 1.0, 0.01);
}

}  // namespace
}  // namespace tools
}  // namespace zipccl
