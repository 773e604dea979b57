// Round-trip properties: every input byte string comes back bit-exact, whatever its type, size,
// alignment, distribution, thread count or SIMD path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace {

using testing::gaussian_bf16;

struct Result {
  std::vector<uint8_t> frame;
  std::vector<uint8_t> back;
};

Result round_trip(const uint8_t* src, size_t n, const EncodeOptions& eo, const DecodeOptions& dopt = {}) {
  Result r;
  r.frame.resize(max_encoded_size(n));
  size_t fsize = 0;
  EXPECT_EQ(encode(src, n, r.frame.data(), r.frame.size(), &fsize, eo), Status::kOk);
  EXPECT_LE(fsize, max_encoded_size(n));
  r.frame.resize(fsize);
  // A decode buffer with a guard zone: nothing past the original size may be written.
  r.back.assign(n + 64, 0xA5);
  size_t out = 0;
  EXPECT_EQ(decode(r.frame.data(), fsize, r.back.data(), n, &out, dopt), Status::kOk);
  EXPECT_EQ(out, n);
  for (size_t i = n; i < n + 64; ++i) EXPECT_EQ(r.back[i], 0xA5) << "wrote past the output at " << i;
  r.back.resize(n);
  return r;
}

void expect_round_trip(const std::vector<uint8_t>& in, ElemType t, const char* what) {
  for (bool scalar : {false, true}) {
    EncodeOptions eo;
    eo.type = t;
    eo.force_scalar = scalar;
    DecodeOptions dopt;
    dopt.force_scalar = !scalar;  // cross: SIMD-encoded frames decoded by scalar code and back
    Result r = round_trip(in.data(), in.size(), eo, dopt);
    ASSERT_TRUE(r.back == in) << what << " type=" << elem_type_name(t) << " n=" << in.size()
                              << " scalar=" << scalar;
  }
}

const ElemType kTypes[] = {ElemType::kAuto, ElemType::kBf16, ElemType::kFp16, ElemType::kFp32};

TEST(RoundTrip, EdgeSizesEveryType) {
  const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 63, 64, 65, 127, 2047, 2048, 2049, 8191, 8192, 8193,
                          4096 * 2 - 2, 4096 * 2 + 2, 4096 * 4 + 1, 4096 * 4 * 3 + 3, 100003};
  // Bytes around the default block: 16384 elements are 32768 bytes of bf16 or fp16, 65536 of fp32.
  const size_t around_block[] = {32767, 32768, 32769, 65535, 65536, 65537};
  std::vector<size_t> all(std::begin(sizes), std::end(sizes));
  all.insert(all.end(), std::begin(around_block), std::end(around_block));
  for (size_t n : all) {
    auto in = gaussian_bf16((n + 1) / 2, 1.0, uint32_t(n));
    in.resize(n);
    for (ElemType t : kTypes) expect_round_trip(in, t, "gaussian");
  }
}

TEST(RoundTrip, BlockBoundariesForEachBlockSize) {
  for (int bl = 10; bl <= 14; ++bl) {
    const size_t block = size_t(1) << bl;
    for (size_t elems : {block - 1, block, block + 1, 3 * block + 31, 3 * block + 33}) {
      auto in = gaussian_bf16(elems, 0.02, uint32_t(bl * 1000 + elems));
      EncodeOptions eo;
      eo.type = ElemType::kBf16;
      eo.block_log2 = bl;
      Result r = round_trip(in.data(), in.size(), eo);
      ASSERT_TRUE(r.back == in) << "block_log2=" << bl << " elems=" << elems;
    }
  }
}

TEST(RoundTrip, Distributions) {
  const size_t n = 300000;
  expect_round_trip(gaussian_bf16(n, 1e-3, 1), ElemType::kBf16, "gauss 1e-3");
  expect_round_trip(gaussian_bf16(n, 1e3, 2), ElemType::kBf16, "gauss 1e3");
  expect_round_trip(testing::gaussian_fp16(n, 1.0, 3), ElemType::kFp16, "fp16");
  expect_round_trip(testing::gaussian_fp32(n, 1.0, 4, false), ElemType::kFp32, "fp32");
  expect_round_trip(testing::gaussian_fp32(n, 1.0, 5, true), ElemType::kFp32, "fp32 zero low");
  expect_round_trip(testing::special_bf16(n, 6), ElemType::kBf16, "specials");
  expect_round_trip(testing::random_bytes(2 * n + 1, 7), ElemType::kAuto, "random");
  expect_round_trip(std::vector<uint8_t>(2 * n, 0), ElemType::kAuto, "zeros");
  expect_round_trip(std::vector<uint8_t>(2 * n + 1, 0x3F), ElemType::kBf16, "repeated odd");
  for (double per_mille : {0.01, 1.0, 5.0, 30.0, 120.0, 400.0})  // SPARSE planes, then too dense for it
    expect_round_trip(testing::sparse_low16_fp32(n, 1e-3, 10, per_mille), ElemType::kFp32, "fp32 sparse low");
  // Interpreting data as the wrong type must still be lossless.
  expect_round_trip(testing::gaussian_fp32(n, 1.0, 8, false), ElemType::kBf16, "fp32 as bf16");
  expect_round_trip(gaussian_bf16(n, 1.0, 9), ElemType::kFp32, "bf16 as fp32");
}

TEST(RoundTrip, EveryBf16PatternAndSkewedAlphabets) {
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t v = 0; v < 65536; ++v) all[2 * v] = uint8_t(v), all[2 * v + 1] = uint8_t(v >> 8);
  expect_round_trip(all, ElemType::kBf16, "all patterns");
  // Two symbols, one very rare; and long runs.
  std::vector<uint8_t> skew(2 * 50000, 0);
  for (size_t i = 0; i < skew.size(); i += 2) skew[i + 1] = (i % 4001 == 0) ? 0x3F : 0x3E;
  expect_round_trip(skew, ElemType::kBf16, "two-symbol");
  // Geometric exponents: forces the 11-bit length limit.
  std::vector<uint8_t> geo(2 * 200000);
  std::mt19937 rng(5);
  for (size_t i = 0; i < geo.size(); i += 2) {
    int e = 0;
    while ((rng() & 1) && e < 60) ++e;
    const uint16_t v = uint16_t(((127 - e) << 7) | (rng() & 0x807F));
    geo[i] = uint8_t(v), geo[i + 1] = uint8_t(v >> 8);
  }
  expect_round_trip(geo, ElemType::kBf16, "geometric");
}

TEST(RoundTrip, UnalignedInputAndOutput) {
  auto in = gaussian_bf16(50001, 1.0, 11);
  for (size_t off = 1; off < 4; ++off) {
    std::vector<uint8_t> src(in.size() + off);
    std::memcpy(src.data() + off, in.data(), in.size());
    std::vector<uint8_t> frame(max_encoded_size(in.size()) + off);
    size_t fsize = 0;
    EncodeOptions eo;
    eo.type = ElemType::kBf16;
    ASSERT_EQ(encode(src.data() + off, in.size(), frame.data() + off, frame.size() - off, &fsize, eo), Status::kOk);
    std::vector<uint8_t> back(in.size() + off);
    size_t out = 0;
    ASSERT_EQ(decode(frame.data() + off, fsize, back.data() + off, in.size(), &out), Status::kOk);
    ASSERT_EQ(0, std::memcmp(back.data() + off, in.data(), in.size())) << "offset " << off;
  }
}

TEST(RoundTrip, ThreadsGiveIdenticalFrames) {
  auto in = gaussian_bf16(1 << 20, 0.01, 12);
  in.resize(in.size() - 3);
  EncodeOptions one;
  one.type = ElemType::kBf16;
  Result a = round_trip(in.data(), in.size(), one);
  for (int t : {2, 3, 7}) {
    EncodeOptions eo = one;
    eo.threads = t;
    DecodeOptions dopt;
    dopt.threads = t;
    Result b = round_trip(in.data(), in.size(), eo, dopt);
    ASSERT_TRUE(a.frame == b.frame) << "threads=" << t;
    ASSERT_TRUE(b.back == in);
  }
}

TEST(RoundTrip, SimdAndScalarFramesAreIdentical) {
  for (auto in : {gaussian_bf16(100000, 1.0, 13), testing::gaussian_fp32(70001, 1.0, 14, true),
                  testing::special_bf16(99999, 15), testing::gaussian_fp16(4097, 1.0, 16)}) {
    EncodeOptions a, b;
    b.force_scalar = true;
    Result ra = round_trip(in.data(), in.size(), a), rb = round_trip(in.data(), in.size(), b);
    ASSERT_TRUE(ra.frame == rb.frame);
  }
}

// Frames decoding to 32 MiB or more are written with streaming stores where the kernel set has
// them: same bytes, at an odd and at an aligned output address, one thread and two.
TEST(RoundTrip, LargeFramesDecodeWithStreamingStores) {
  const size_t count = (size_t(32) << 20) / 2 + 3;  // past the threshold, a partial last block
  const auto in = testing::gaussian_bf16(count, 1.0, 21);
  std::vector<uint8_t> frame(max_encoded_size(in.size()));
  size_t n = 0;
  EncodeOptions eo;
  eo.type = ElemType::kBf16;
  eo.threads = 2;
  ASSERT_EQ(encode(in.data(), in.size(), frame.data(), frame.size(), &n, eo), Status::kOk);
  std::vector<uint8_t> out(in.size() + 65);
  for (size_t off : {size_t(0), size_t(1), size_t(2)}) {
    for (int threads : {1, 2}) {
      // Aligned to 64 first, then offset.
      uint8_t* dst = out.data() + (64 - (reinterpret_cast<uintptr_t>(out.data()) & 63)) % 64 + off;
      if (dst + in.size() > out.data() + out.size()) dst -= 64;
      size_t got = 0;
      DecodeOptions d;
      d.threads = threads;
      ASSERT_EQ(decode(frame.data(), n, dst, in.size(), &got, d), Status::kOk);
      ASSERT_EQ(got, in.size());
      ASSERT_EQ(std::memcmp(dst, in.data(), in.size()), 0) << "offset " << off << " threads " << threads;
    }
  }
}

// DecodeOptions::stream_out asks for streaming stores below the size threshold too: the same bytes,
// and nothing written past the output, for bf16 and fp32 with partial last blocks and elements.
TEST(RoundTrip, StreamingStoresOnRequest) {
  const auto bf16 = testing::gaussian_bf16((size_t(1) << 20) + 3, 1.0, 22);
  for (ElemType t : {ElemType::kBf16, ElemType::kFp32}) {
    const std::vector<uint8_t> in(bf16.begin(), bf16.end() - (t == ElemType::kFp32 ? 1 : 0));
    EncodeOptions eo;
    eo.type = t;
    DecodeOptions d;
    d.stream_out = true;
    Result r = round_trip(in.data(), in.size(), eo, d);
    ASSERT_TRUE(r.back == in) << elem_type_name(t);
  }
}

// Large encodes (the coders prefetching the next block's input and their output lines, kernels.h
// Ahead) give the scalar set's frame, at odd and aligned frame addresses, one thread and two, bf16
// (one RAW plane a block) and fp32 (three).
TEST(RoundTrip, LargeFramesEncodeAsTheScalarSet) {
  const size_t bf16_count = (size_t(32) << 20) / 2 + 5;
  const std::vector<std::pair<std::vector<uint8_t>, ElemType>> inputs = {
      {testing::gaussian_bf16(bf16_count, 1.0, 22), ElemType::kBf16},
      {testing::gaussian_fp32(bf16_count / 2, 1.0, 23, false), ElemType::kFp32}};
  for (const auto& [in, type] : inputs) {
    EncodeOptions ref;
    ref.type = type;
    ref.force_scalar = true;
    std::vector<uint8_t> want(max_encoded_size(in.size()));
    size_t want_n = 0;
    ASSERT_EQ(encode(in.data(), in.size(), want.data(), want.size(), &want_n, ref), Status::kOk);
    want.resize(want_n);
    std::vector<uint8_t> frame(max_encoded_size(in.size()) + 128);
    for (size_t off : {size_t(0), size_t(1), size_t(3)}) {
      for (int threads : {1, 2}) {
        uint8_t* dst = frame.data() + (64 - (reinterpret_cast<uintptr_t>(frame.data()) & 63)) % 64 + off;
        EncodeOptions eo;
        eo.type = type;
        eo.threads = threads;
        size_t n = 0;
        ASSERT_EQ(encode(in.data(), in.size(), dst, max_encoded_size(in.size()), &n, eo), Status::kOk);
        ASSERT_EQ(n, want.size()) << "offset " << off << " threads " << threads;
        ASSERT_EQ(std::memcmp(dst, want.data(), n), 0) << "offset " << off << " threads " << threads;
      }
    }
  }
}

// Random shapes (test_data.h random_shape: every type, lengths 1..40000, scales over nine decades,
// lone outliers, the last element included): the SIMD kernel set's frame is the scalar set's, byte
// for byte, at every block size, and decodes back. (A sampled screen that missed the last samples'
// range once made them differ on one fp32 length only.)
TEST(RoundTrip, SimdFramesEqualScalarOnRandomShapes) {
  const ElemType types[] = {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32};
  for (uint32_t seed = 0; seed < 300; ++seed) {
    const testing::Shape sh = testing::random_shape(1000 + seed);
    EncodeOptions simd, scalar;
    simd.type = scalar.type = types[sh.kind];
    simd.block_log2 = scalar.block_log2 = 10 + int(seed % 5);
    scalar.force_scalar = true;
    SCOPED_TRACE(::testing::Message() << "seed " << 1000 + seed << " type " << elem_type_name(simd.type)
                                      << " bytes " << sh.bytes.size() << " block_log2 " << simd.block_log2);
    const Result a = round_trip(sh.bytes.data(), sh.bytes.size(), simd);
    const Result b = round_trip(sh.bytes.data(), sh.bytes.size(), scalar);
    ASSERT_TRUE(a.frame == b.frame);
    ASSERT_TRUE(a.back == sh.bytes);
  }
}

// The pre-screen (encoder_policy.h) decides on every 32nd byte of each plane, in blocks of at least
// 8192 elements: when those samples are all different the plane is RAW even though every other byte
// equals one value; when they equal it too the plane is coded. Smaller blocks skip the pre-screen.
TEST(Frame, PrescreenDecidesOnEvery32ndByte) {
  const size_t n = 4 * 8192;
  auto size_of = [&](const std::vector<uint8_t>& in, int block_log2) {
    EncodeOptions eo;
    eo.type = ElemType::kBf16;
    eo.block_log2 = block_log2;
    const Result r = round_trip(in.data(), in.size(), eo);
    EXPECT_TRUE(r.back == in);
    return r.frame.size();
  };
  for (int plane : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "plane " << plane);
    const auto blind = testing::prescreen_blind_bf16(n, 0x11, true, plane);
    const auto plain = testing::prescreen_blind_bf16(n, 0x11, false, plane);
    EXPECT_GT(size_of(blind, 13), n);      // the plane RAW in every block: over a byte an element
    EXPECT_LT(size_of(plain, 13), n / 8);  // the plane coded (CONST)
    EXPECT_LT(size_of(blind, 12), n / 4);  // 4096-element blocks: no pre-screen, the plane coded
  }
}

// A few zeros and denormals in Gaussian bf16 (sample_core): the code comes from the sample inside
// the exponents' core and exact counts outside it, which costs next to nothing against the exact
// histogram's code (1.490x with 0.1% zeros, measured): every kernel set makes the same frame.
TEST(Frame, SprinkledZerosKeepTheRatio) {
  for (double per_mille : {1.0, 10.0, 100.0}) {
    SCOPED_TRACE(::testing::Message() << "per mille " << per_mille);
    const auto in = testing::sprinkled_bf16(8 * 8192, 1e-3, 12, per_mille);
    EncodeOptions eo, scalar;
    eo.type = scalar.type = ElemType::kBf16;
    scalar.force_scalar = true;
    const Result a = round_trip(in.data(), in.size(), eo);
    const Result b = round_trip(in.data(), in.size(), scalar);
    ASSERT_TRUE(a.back == in);
    ASSERT_TRUE(a.frame == b.frame);
    EXPECT_GT(double(in.size()) / double(a.frame.size()), per_mille < 50 ? 1.47 : 1.40);
  }
}

TEST(Frame, SmallCapacityFallsBackOrFails) {
  auto in = gaussian_bf16(10000, 1.0, 17);
  std::vector<uint8_t> frame(in.size() + 24);
  size_t fsize = 0;
  // Exactly a raw frame's room: the coded frame fits too (it is smaller), so encode succeeds.
  ASSERT_EQ(encode(in.data(), in.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  EXPECT_LT(fsize, in.size());
  // Random bytes in raw-frame room: a raw frame.
  auto rnd = testing::random_bytes(10000, 18);
  ASSERT_EQ(encode(rnd.data(), rnd.size(), frame.data(), rnd.size() + 24, &fsize), Status::kOk);
  EXPECT_EQ(fsize, rnd.size() + 24);
  // Too small for anything.
  EXPECT_EQ(encode(rnd.data(), rnd.size(), frame.data(), 100, &fsize), Status::kDstTooSmall);
  // Decode into a too-small buffer.
  ASSERT_EQ(encode(in.data(), in.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  std::vector<uint8_t> back(in.size());
  size_t out;
  EXPECT_EQ(decode(frame.data(), fsize, back.data(), in.size() - 1, &out), Status::kDstTooSmall);
}

TEST(Frame, RatioOnGaussianIsNearTheBound) {
  // Not a speed test: the coded size is deterministic. 16/(8+2.55) = 1.517 is the bound.
  auto in = gaussian_bf16(1 << 20, 1.0, 19);
  std::vector<uint8_t> frame(max_encoded_size(in.size()));
  size_t fsize = 0;
  ASSERT_EQ(encode(in.data(), in.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  const double ratio = double(in.size()) / fsize;
  EXPECT_GT(ratio, 1.48);
  EXPECT_LT(ratio, 1.52);
  FrameInfo info;
  ASSERT_EQ(read_frame_info(frame.data(), fsize, &info), Status::kOk);
  EXPECT_EQ(info.kind, FrameKind::kCoded);
  EXPECT_EQ(info.type, ElemType::kBf16);
  EXPECT_EQ(info.frame_size, fsize);
}

TEST(Frame, SparseLowHalvesCostFarLessThanABitPerByte) {
  // 0.5% of fp32 gradients with non-zero low halves: a Huffman code pays at least 1 bit per byte of
  // planes 2 and 3 (ratio <= 32/(2.6+8+2) = 2.54x); SPARSE planes cost ~0.12 bits each (~2.95x).
  auto in = testing::sparse_low16_fp32(1 << 18, 1e-3, 21, 5.0);
  std::vector<uint8_t> frame(max_encoded_size(in.size()));
  size_t fsize = 0;
  ASSERT_EQ(encode(in.data(), in.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  EXPECT_GT(double(in.size()) / fsize, 2.85);
}

TEST(Frame, ZerosAreOneConstFrameAndRandomIsRaw) {
  std::vector<uint8_t> zeros(1 << 20, 0), frame(max_encoded_size(1 << 20));
  size_t fsize = 0;
  ASSERT_EQ(encode(zeros.data(), zeros.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  EXPECT_LE(fsize, 28u);
  auto rnd = testing::random_bytes(1 << 20, 20);
  ASSERT_EQ(encode(rnd.data(), rnd.size(), frame.data(), frame.size(), &fsize), Status::kOk);
  EXPECT_LE(fsize, rnd.size() + rnd.size() / 200);
}

TEST(Frame, OneElementOffTheRepeatedValueIsNotConst) {
  // A buffer of one repeated element but for one byte (first, middle or last) is no CONST frame, and
  // it round-trips, for every element size and sizes around a block.
  for (ElemType t : {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32}) {
    for (size_t n : {size_t(8), size_t(12), size_t(1000), size_t(16384), size_t(16388), size_t(1) << 20}) {
      for (size_t at : {size_t(0), n / 2, n - 1}) {
        std::vector<uint8_t> in(n, 0x3C), frame(max_encoded_size(n)), back(n);
        in[at] ^= 0x01;
        EncodeOptions eo;
        eo.type = t;
        size_t fsize = 0, dsize = 0;
        ASSERT_EQ(encode(in.data(), n, frame.data(), frame.size(), &fsize, eo), Status::kOk);
        ASSERT_GT(fsize, 24u + 4u) << "n " << n << " at " << at;
        ASSERT_EQ(decode(frame.data(), fsize, back.data(), n, &dsize), Status::kOk);
        ASSERT_EQ(dsize, n);
        ASSERT_EQ(back, in) << "n " << n << " at " << at;
      }
    }
  }
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
