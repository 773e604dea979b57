// Frames from the network are untrusted: every corruption is an error or a (by chance valid)
// frame of the stated size; never a crash, never a write past the output.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "format.h"
#include "test_data.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace {

std::vector<uint8_t> make_frame(const std::vector<uint8_t>& in, ElemType t) {
  std::vector<uint8_t> f(max_encoded_size(in.size()));
  size_t n = 0;
  EncodeOptions eo;
  eo.type = t;
  EXPECT_EQ(encode(in.data(), in.size(), f.data(), f.size(), &n, eo), Status::kOk);
  f.resize(n);
  return f;
}

// Decodes into an exactly-sized heap buffer (ASan catches any overflow) behind a guard check.
Status try_decode(const std::vector<uint8_t>& frame, size_t cap) {
  std::vector<uint8_t> out(cap + 16, 0x5A);
  size_t got = 0;
  Status s = decode(frame.data(), frame.size(), out.data(), cap, &got);
  for (size_t i = cap; i < cap + 16; ++i) EXPECT_EQ(out[i], 0x5A);
  if (s == Status::kOk) {
    EXPECT_LE(got, cap);
  }
  return s;
}

TEST(Malformed, EveryTruncationIsAnError) {
  auto in = testing::gaussian_bf16(3000, 1.0, 1);
  auto f = make_frame(in, ElemType::kBf16);
  for (size_t len = 0; len < f.size(); ++len) {
    std::vector<uint8_t> t(f.begin(), f.begin() + len);
    EXPECT_NE(try_decode(t, in.size()), Status::kOk) << "len " << len;
  }
  std::vector<uint8_t> longer = f;
  longer.push_back(0);
  EXPECT_EQ(try_decode(longer, in.size()), Status::kCorrupt);
}

TEST(Malformed, HeaderFieldsAreChecked) {
  auto in = testing::gaussian_bf16(5000, 1.0, 2);
  auto f = make_frame(in, ElemType::kBf16);
  auto bad = f;
  bad[0] ^= 1;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kBadMagic);
  bad = f, bad[4] = 2;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kBadVersion);
  bad = f, bad[5] = 3;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[6] = 4;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[7] = 9;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[7] = 15;
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[20] = 7;  // lanes_log2 > 6
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[21] = 1;  // reserved
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, bad[16] += 1;  // block count disagrees with the size
  EXPECT_EQ(try_decode(bad, in.size()), Status::kCorrupt);
  bad = f, fmt::store_le64(bad.data() + 8, 1ull << 40);  // lying size
  EXPECT_NE(try_decode(bad, in.size()), Status::kOk);
  bad = f, fmt::store_le64(bad.data() + 8, in.size() - 2);  // one element fewer
  EXPECT_NE(try_decode(bad, in.size()), Status::kOk);
  EXPECT_EQ(try_decode(f, in.size() - 1), Status::kDstTooSmall);
  EXPECT_EQ(try_decode(f, in.size()), Status::kOk);
}

TEST(Malformed, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(3);
  const std::vector<uint8_t> inputs[] = {testing::gaussian_bf16(9000, 1.0, 4),
                                         testing::gaussian_fp32(5000, 1.0, 5, true),
                                         testing::special_bf16(7001, 6)};
  for (const auto& in : inputs) {
    for (ElemType t : {ElemType::kBf16, ElemType::kFp32}) {
      auto f = make_frame(in, t);
      for (int trial = 0; trial < 3000; ++trial) {
        auto bad = f;
        const int flips = 1 + int(rng() % 4);
        for (int i = 0; i < flips; ++i) bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
        const Status s = try_decode(bad, in.size());
        if (s == Status::kOk) continue;  // a flip in raw plane bytes is a valid, different frame
        EXPECT_NE(s, Status::kInvalidArgument);
      }
    }
  }
}

// The SIMD decoders (AVX-512 register tables, AVX2, NEON) accept and refuse exactly the frames the
// scalar one does: damaged Huffman streams and lane lengths included.
TEST(Malformed, SimdAndScalarDecodersAgree) {
  std::mt19937 rng(13);
  const std::vector<uint8_t> inputs[] = {testing::gaussian_bf16(3 * 8192 + 77, 1.0, 8),
                                         testing::gaussian_bf16(8192, 1e-3, 9), testing::special_bf16(9001, 10)};
  int refused = 0;
  for (const auto& in : inputs) {
    const auto f = make_frame(in, ElemType::kBf16);
    for (int trial = 0; trial < 1500; ++trial) {
      auto bad = f;
      const int flips = 1 + int(rng() % 3);
      for (int i = 0; i < flips; ++i) {
        // Mostly past the frame header, where the block descriptors and streams are.
        const size_t at = 24 + rng() % (bad.size() - 24);
        bad[at] ^= uint8_t(1u << (rng() % 8));
      }
      std::vector<uint8_t> a(in.size()), b(in.size());
      size_t na = 0, nb = 0;
      DecodeOptions scalar;
      scalar.force_scalar = true;
      const Status sa = decode(bad.data(), bad.size(), a.data(), a.size(), &na, scalar);
      const Status sb = decode(bad.data(), bad.size(), b.data(), b.size(), &nb);
      ASSERT_EQ(sa, sb) << "trial " << trial << " simd path " << simd_path();
      if (sa == Status::kOk) {
        ASSERT_EQ(na, nb);
        ASSERT_EQ(a, b);
      } else {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(Malformed, GarbageNeverDecodes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> g(size_t(rng() % 200));
    for (auto& b : g) b = uint8_t(rng());
    if (g.size() >= 5 && trial % 2) {
      fmt::store_le32(g.data(), fmt::kMagic);
      g[4] = fmt::kVersion;
    }
    std::vector<uint8_t> out(64);
    size_t got;
    const Status s = decode(g.data(), g.size(), out.data(), out.size(), &got);
    if (s == Status::kOk) {
      EXPECT_LE(got, out.size());
    }
  }
}

// A SPARSE plane's exceptions must be strictly ascending positions below m with values other than
// the base. 1024 fp32 ones (planes 0 and 1 CONST) whose low halves are zero except at three
// places: planes 2 and 3 are SPARSE, and the block layout is known byte by byte.
TEST(Malformed, SparsePlanesAreChecked) {
  using fmt::load_le16;
  using fmt::store_le16;
  using fmt::store_le32;
  std::vector<uint8_t> in(4 * 1024);
  for (size_t i = 0; i < 1024; ++i) store_le32(in.data() + 4 * i, 0x3F800000u);
  for (uint32_t i : {5u, 100u, 999u}) store_le32(in.data() + 4 * i, 0x3F800000u | (0x11u * (i % 7 + 1)) * 0x101u);
  const auto f = make_frame(in, ElemType::kFp32);
  const size_t blk = 24 + 4;  // one block: header, block index
  ASSERT_EQ(f[blk], fmt::kPlaneConst | fmt::kPlaneConst << 2 | fmt::kPlaneSparse << 4 | fmt::kPlaneSparse << 6);
  // modes, 2 CONST values, 2 x (base, u16 count), padding to 12; plane 2 data: 3 positions, 3 values.
  ASSERT_EQ(f[blk + 3], 0);
  ASSERT_EQ(load_le16(f.data() + blk + 4), 3);
  const size_t pos2 = blk + 12, val2 = pos2 + 6;
  ASSERT_EQ(load_le16(f.data() + pos2), 5);
  ASSERT_EQ(try_decode(f, in.size()), Status::kOk);
  auto corrupt = [&](const char* what, const std::function<void(std::vector<uint8_t>&)>& edit) {
    auto g = f;
    edit(g);
    EXPECT_EQ(try_decode(g, in.size()), Status::kCorrupt) << what;
  };
  corrupt("descending", [&](std::vector<uint8_t>& g) { store_le16(g.data() + pos2, 100); store_le16(g.data() + pos2 + 2, 5); });
  corrupt("repeated", [&](std::vector<uint8_t>& g) { store_le16(g.data() + pos2 + 2, 5); });
  corrupt("past the block", [&](std::vector<uint8_t>& g) { store_le16(g.data() + pos2 + 4, 1024); });
  corrupt("equals the base", [&](std::vector<uint8_t>& g) { g[val2 + 1] = 0; });
  corrupt("no exceptions", [&](std::vector<uint8_t>& g) { store_le16(g.data() + blk + 4, 0); });
  corrupt("count too large", [&](std::vector<uint8_t>& g) { store_le16(g.data() + blk + 4, 4); });
  corrupt("padding", [&](std::vector<uint8_t>& g) { g[val2 + 3] = 1; });
}

TEST(Malformed, NullAndBadArguments) {
  size_t got;
  uint8_t buf[64];
  EXPECT_EQ(decode(nullptr, 10, buf, 64, &got), Status::kInvalidArgument);
  EXPECT_EQ(decode(buf, 0, buf, 64, nullptr), Status::kInvalidArgument);
  EXPECT_EQ(encode(nullptr, 10, buf, 64, &got), Status::kInvalidArgument);
  EncodeOptions eo;
  eo.block_log2 = 9;
  EXPECT_EQ(encode(buf, 10, buf, 64, &got, eo), Status::kInvalidArgument);
  eo.block_log2 = 0;
  eo.threads = 0;
  EXPECT_EQ(encode(buf, 10, buf, 64, &got, eo), Status::kInvalidArgument);
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
