#include "entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;

std::vector<uint8_t> bf16_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b;
  for (uint16_t x : v) b.push_back(static_cast<uint8_t>(x)), b.push_back(static_cast<uint8_t>(x >> 8));
  return b;
}

TEST(Entropy, HistogramKnownDistributions) {
  uint64_t h[256] = {};
  EXPECT_EQ(order0_entropy(h, 0), 0.0);
  h[7] = 1000;
  EXPECT_EQ(order0_entropy(h, 1000), 0.0);
  h[9] = 1000;
  EXPECT_NEAR(order0_entropy(h, 2000), 1.0, 1e-12);
  for (auto& c : h) c = 37;
  EXPECT_NEAR(order0_entropy(h, 37 * 256), 8.0, 1e-12);
  uint64_t q[256] = {};
  q[0] = 2, q[1] = 1, q[2] = 1;  // p = 1/2, 1/4, 1/4
  EXPECT_NEAR(order0_entropy(q, 4), 1.5, 1e-12);
}

TEST(Entropy, BytesUniformAndConstant) {
  std::vector<uint8_t> u(256 * 64);
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(i);
  EXPECT_NEAR(byte_entropy(u.data(), u.size()), 8.0, 1e-12);
  std::vector<uint8_t> c(1000, 0x42);
  EXPECT_EQ(byte_entropy(c.data(), c.size()), 0.0);
  EXPECT_EQ(byte_entropy(nullptr, 0), 0.0);
}

TEST(Entropy, PlaneSymbolsFollowTheCodecSplit) {
  uint8_t s[4];
  const uint8_t one_bf16[2] = {0x80, 0x3F};  // 1.0
  plane_symbols(ElemType::kBf16, one_bf16, s);
  EXPECT_EQ(s[0], 0x7F);
  EXPECT_EQ(s[1], 0x00);
  const uint8_t neg_bf16[2] = {0xC5, 0xBF};  // -1.5390625: sign, exponent 0x7F, mantissa 0x45
  plane_symbols(ElemType::kBf16, neg_bf16, s);
  EXPECT_EQ(s[0], 0x7F);
  EXPECT_EQ(s[1], 0x80 | 0x45);
  const uint8_t one_fp16[2] = {0x00, 0x3C};  // 1.0: exponent 01111, top mantissa bits 000
  plane_symbols(ElemType::kFp16, one_fp16, s);
  EXPECT_EQ(s[0], 0x78);
  EXPECT_EQ(s[1], 0x00);
  const uint8_t fp32[4] = {0x56, 0x34, 0x12, 0xC0};  // 0xC0123456
  plane_symbols(ElemType::kFp32, fp32, s);
  EXPECT_EQ(s[0], 0x80);
  EXPECT_EQ(s[1], 0x80 | 0x12);
  EXPECT_EQ(s[2], 0x34);
  EXPECT_EQ(s[3], 0x56);
  EXPECT_EQ(plane_count(ElemType::kBf16), 2);
  EXPECT_EQ(plane_count(ElemType::kFp32), 4);
  EXPECT_EQ(plane_count(ElemType::kNone), 1);
}

TEST(Entropy, ConstantExponentRandomLowByteBoundsAtTwo) {
  // Exponent constant, sign+mantissa uniform over all 256 values: 8 of 16 bits remain.
  std::vector<uint16_t> v(256 * 64);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<uint16_t>(0x3F80 | (i & 0x7F) | ((i >> 7) & 1) << 15);
  auto b = bf16_bytes(v);
  EntropyBound e = entropy_bound(b.data(), b.size(), ElemType::kBf16, 4096);
  ASSERT_EQ(e.planes.size(), 2u);
  EXPECT_EQ(e.elems, v.size());
  EXPECT_NEAR(e.planes[0].whole_bits, 0.0, 1e-12);
  EXPECT_NEAR(e.planes[1].whole_bits, 8.0, 1e-12);
  EXPECT_NEAR(e.whole_ratio, 2.0, 1e-12);
  EXPECT_NEAR(e.block_ratio, 2.0, 1e-12);
}

TEST(Entropy, PerBlockSeesScaleChangesTheWholeBufferDoesNot) {
  // Two blocks, each constant, with different exponents: one bit per element overall, none per block.
  std::vector<uint16_t> v(8192, 0x3F80);
  for (size_t i = 4096; i < v.size(); ++i) v[i] = 0x4000;
  auto b = bf16_bytes(v);
  EntropyBound e = entropy_bound(b.data(), b.size(), ElemType::kBf16, 4096);
  EXPECT_NEAR(e.planes[0].whole_bits, 1.0, 1e-12);
  EXPECT_NEAR(e.planes[0].block_bits, 0.0, 1e-12);
  EXPECT_NEAR(e.whole_ratio, 16.0, 1e-9);
  EXPECT_TRUE(std::isinf(e.block_ratio));
  // With one block spanning both halves the two bounds agree.
  EntropyBound one = entropy_bound(b.data(), b.size(), ElemType::kBf16, 8192);
  EXPECT_NEAR(one.block_ratio, one.whole_ratio, 1e-9);
}

TEST(Entropy, PartialLastBlockIsWeightedByItsElements) {
  // 4096 elements alternating two exponents (1 bit), then 2048 constant (0 bits).
  std::vector<uint16_t> v(6144, 0x3F80);
  for (size_t i = 0; i < 4096; i += 2) v[i] = 0x4000;
  auto b = bf16_bytes(v);
  EntropyBound e = entropy_bound(b.data(), b.size(), ElemType::kBf16, 4096);
  EXPECT_NEAR(e.planes[0].block_bits, 4096.0 / 6144.0, 1e-12);
}

TEST(Entropy, TailBytesCountAsRaw) {
  const uint8_t b[3] = {0x80, 0x3F, 0x11};  // one constant element + one trailing byte
  EntropyBound e = entropy_bound(b, 3, ElemType::kBf16);
  EXPECT_EQ(e.elems, 1u);
  EXPECT_NEAR(e.whole_ratio, 24.0 / 8.0, 1e-12);
  EntropyBound empty = entropy_bound(nullptr, 0, ElemType::kFp32);
  EXPECT_EQ(empty.whole_ratio, 1.0);
  EXPECT_EQ(empty.block_ratio, 1.0);
}

TEST(Entropy, Fp32LowZeroPlanesCostNothing) {
  std::vector<uint8_t> b(4 * 4096);
  for (uint32_t i = 0; i < 4096; ++i) {
    const uint32_t v = 0x3F000000u | (i & 0x7F) << 16 | ((i >> 7) & 1) << 31;  // exponent 0x7E
    for (int k = 0; k < 4; ++k) b[4 * i + k] = static_cast<uint8_t>(v >> (8 * k));
  }
  EntropyBound e = entropy_bound(b.data(), b.size(), ElemType::kFp32);
  ASSERT_EQ(e.planes.size(), 4u);
  EXPECT_NEAR(e.planes[0].whole_bits, 0.0, 1e-12);
  EXPECT_NEAR(e.planes[1].whole_bits, 8.0, 1e-12);
  EXPECT_NEAR(e.planes[2].whole_bits, 0.0, 1e-12);
  EXPECT_NEAR(e.planes[3].whole_bits, 0.0, 1e-12);
  EXPECT_NEAR(e.whole_ratio, 4.0, 1e-12);
}

TEST(Entropy, NoneTypeIsOneBytePlane) {
  std::vector<uint8_t> u(256 * 16);
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(i * 7);
  EntropyBound e = entropy_bound(u.data(), u.size(), ElemType::kNone);
  ASSERT_EQ(e.planes.size(), 1u);
  EXPECT_NEAR(e.whole_ratio, 1.0, 1e-12);
}

}  // namespace
}  // namespace tools
}  // namespace zipccl
