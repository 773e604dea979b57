// The CUDA codec's kernel bodies run on host threads (emulate.h): frames must be byte-identical to
// the CPU codec's, decoding must invert both encoders, and malformed frames must get the CPU
// decoder's status. This is the strongest check available without a GPU: the same per-block device
// code, barriers, ticket and look-back, only scheduled by the OS instead of the SMs.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "emulate.h"
#include "test_data.h"

namespace zipccl {
namespace testing {
namespace {

using codec::ElemType;

std::vector<uint8_t> with_const_blocks(size_t count, uint32_t seed) {
  auto v = gaussian_bf16(count, 1.0, seed);
  // Zero a whole 1024-element block (CONST planes) and a run in another.
  for (size_t i = 0; i < std::min<size_t>(count, 2048) * 2; ++i) v[i] = 0;
  for (size_t i = 4096; i < std::min<size_t>(count * 2, 6000); i += 2) v[i + 1] = 0x3F;
  return v;
}

// Tests of every kernel (detect, encode, finalize, decode) run in every schedule: free-running CTAs,
// and one warp at a time from barrier to barrier (reversed, shuffled), where a missing cta.sync()
// shows. The larger tests run free only: an adversarial schedule costs 2-3x the time.
class EmulatedSchedule : public ::testing::TestWithParam<GridSchedule> {
 protected:
  static EmuGrid grid() {
    EmuGrid g;
    g.sched = GetParam();
    return g;
  }
};

std::string schedule_name(const ::testing::TestParamInfo<GridSchedule>& info) {
  const WarpOrder o = info.param.order;
  return o == WarpOrder::kFree ? "Free" : o == WarpOrder::kReversed ? "Reversed" : "Shuffled" + std::to_string(info.param.seed);
}

void expect_same_frames(const std::vector<EmuInput>& in, int block_log2, EmuGrid g = EmuGrid()) {
  const auto gpu = emu_encode(in, block_log2, g);
  ASSERT_EQ(gpu.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto cpu = cpu_encode(in[i].bytes, in[i].type, block_log2);
    ASSERT_EQ(gpu[i].size(), cpu.size()) << "message " << i << " type " << codec::elem_type_name(in[i].type)
                                         << " n " << in[i].bytes.size() << " block_log2 " << block_log2;
    ASSERT_TRUE(gpu[i] == cpu) << "frames differ: message " << i << " type " << codec::elem_type_name(in[i].type)
                               << " n " << in[i].bytes.size();
  }
}

// 8192 + 1000 and 8192 + 4004: last blocks whose sampled histogram has a warp of lanes in two planes
// (screen samples % 32 != 0), where a hist_add that merges lanes by key alone miscounts.
TEST(Emulated, FramesMatchCpuPerType) {
  for (size_t n : {size_t(1), size_t(2047), size_t(8192), size_t(8193), size_t(8192 + 1000), size_t(8192 + 4004),
                   size_t(3 * 8192 + 5)}) {
    std::vector<EmuInput> in = {
        {gaussian_bf16(n, 1e-3, 1), ElemType::kBf16},
        {gaussian_fp16(n, 1.0, 2), ElemType::kFp16},
        {gaussian_fp32(n, 0.1, 3, false), ElemType::kFp32},
        {gaussian_fp32(n, 0.1, 4, true), ElemType::kFp32},
        {special_bf16(n, 5), ElemType::kBf16},
        {sparse_low16_fp32(n, 0.1, 6, 5.0), ElemType::kFp32},
        {sparse_low16_fp32(n, 0.1, 7, 60.0), ElemType::kFp32},
        {prescreen_blind_bf16(n, 0x11, true, 0), ElemType::kBf16},  // the pre-screen says RAW (plane 0)
        {prescreen_blind_bf16(n, 0x11, true, 1), ElemType::kBf16},  // and plane 1
        {sprinkled_bf16(n, 1e-3, 8, 2.0), ElemType::kBf16},         // sampled core, exact outliers
        {sprinkled_bf16(n, 1.0, 9, 40.0), ElemType::kBf16},
    };
    expect_same_frames(in, 13);
  }
}

TEST(Emulated, FramesMatchCpuOddSizesBlockSizesAndFallbacks) {
  std::vector<EmuInput> in;
  for (size_t cut : {0, 1, 3}) {
    auto v = gaussian_bf16(5000, 1.0, 10 + uint32_t(cut));
    v.resize(v.size() - cut);
    in.push_back({v, ElemType::kBf16});
    auto w = gaussian_fp32(3000, 1.0, 20 + uint32_t(cut), true);
    w.resize(w.size() - cut);
    in.push_back({w, ElemType::kFp32});
  }
  in.push_back({random_bytes(20000, 30), ElemType::kBf16});                  // RAW frame
  in.push_back({std::vector<uint8_t>(40000, 0), ElemType::kBf16});           // CONST frame
  in.push_back({std::vector<uint8_t>(40001, 0), ElemType::kBf16});           // odd: not CONST
  in.push_back({std::vector<uint8_t>(3, 7), ElemType::kFp32});               // shorter than one element
  in.push_back({std::vector<uint8_t>(), ElemType::kBf16});                   // empty
  in.push_back({with_const_blocks(12000, 31), ElemType::kBf16});             // CONST planes
  in.push_back({std::vector<uint8_t>(33333, 9), ElemType::kNone});           // bytes: CONST
  in.push_back({random_bytes(33333, 32), ElemType::kNone});                  // bytes: RAW
  for (int bl : {10, 12, 14}) expect_same_frames(in, bl);
}

// Random shapes (test_data.h random_shape), eight messages a launch, every block size: the device
// encoder's frames are the CPU's, byte for byte. The fixed inputs above once missed a CPU-only
// divergence that only one fp32 length showed.
TEST(Emulated, FramesMatchCpuOnRandomShapes) {
  const ElemType types[] = {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32};
  for (uint32_t batch = 0; batch < 10; ++batch) {
    std::vector<EmuInput> in;
    for (uint32_t i = 0; i < 8; ++i) {
      Shape sh = random_shape(5000 + 8 * batch + i);
      in.push_back({std::move(sh.bytes), types[sh.kind]});
    }
    expect_same_frames(in, 10 + int(batch % 5));
  }
}

TEST_P(EmulatedSchedule, FramesMatchCpuAuto) {
  std::vector<EmuInput> in = {
      {gaussian_bf16(20000, 1e-2, 40), ElemType::kAuto},
      {gaussian_fp16(20000, 1.0, 41), ElemType::kAuto},
      {gaussian_fp32(9000, 1.0, 42, false), ElemType::kAuto},
      {gaussian_fp32(9000, 1.0, 43, true), ElemType::kAuto},
      {random_bytes(30000, 44), ElemType::kAuto},
      {std::vector<uint8_t>(50, 1), ElemType::kAuto},
      {std::vector<uint8_t>(5000, 0), ElemType::kAuto},
  };
  // The GPU encoder's default block size (block_log2 0) is 8192 elements, the CPU encoder's 16384.
  expect_same_frames(in, 13, grid());
  const auto dflt = emu_encode(in, 0, grid()), explicit13 = emu_encode(in, 13, grid());
  EXPECT_TRUE(dflt == explicit13);
  codec::FrameInfo info{};
  const auto cpu = cpu_encode(in[0].bytes, in[0].type, 0);
  ASSERT_EQ(codec::read_frame_info(cpu.data(), cpu.size(), &info), codec::Status::kOk);
  EXPECT_EQ(info.block_elems, 16384u);
}

TEST_P(EmulatedSchedule, UnalignedMessagesAndOneThreadPerWarpShape) {
  std::vector<EmuInput> in = {
      {gaussian_bf16(10000, 1.0, 50), ElemType::kBf16, 2},
      {gaussian_fp32(5000, 1.0, 51, true), ElemType::kFp32, 5},
      {random_bytes(7000, 52), ElemType::kBf16, 1},
  };
  expect_same_frames(in, 12, grid());
  EmuGrid g = grid();
  g.threads = 32;  // fewer threads than planes x lanes: every loop strides
  g.grid = 5;
  expect_same_frames(in, 12, g);
}

TEST(Emulated, ManyBlocksManyCtas) {
  EmuGrid g;
  g.grid = 8;
  g.threads = 64;
  std::vector<EmuInput> in = {{gaussian_bf16(60 * 1024 + 17, 1e-3, 60), ElemType::kBf16},
                              {gaussian_fp16(30 * 1024, 1.0, 61), ElemType::kFp16}};
  expect_same_frames(in, 10, g);
}

TEST_P(EmulatedSchedule, DecodesCpuFramesAndOwnFrames) {
  std::vector<EmuInput> in = {
      {gaussian_bf16(20000, 1e-3, 70), ElemType::kBf16},
      {gaussian_fp16(9001, 1.0, 71), ElemType::kFp16},
      {gaussian_fp32(7000, 0.1, 72, false), ElemType::kFp32},
      {gaussian_fp32(7000, 0.1, 73, true), ElemType::kFp32},
      {special_bf16(5000, 74), ElemType::kBf16},
      {random_bytes(12345, 75), ElemType::kBf16},
      {std::vector<uint8_t>(40000, 0), ElemType::kBf16},
      {std::vector<uint8_t>(777, 3), ElemType::kNone},
      {std::vector<uint8_t>(), ElemType::kBf16},
      {with_const_blocks(12001, 76), ElemType::kBf16},
      {sparse_low16_fp32(9000, 0.1, 77, 8.0), ElemType::kFp32},
  };
  in[1].bytes.push_back(0xAB);  // a tail byte
  for (int bl : {10, 13}) {
    std::vector<std::vector<uint8_t>> frames;
    std::vector<size_t> cap;
    for (auto& m : in) frames.push_back(cpu_encode(m.bytes, m.type, bl)), cap.push_back(m.bytes.size());
    const auto out = emu_decode(frames, cap, grid());
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(out[i].status, 0) << i;
      EXPECT_TRUE(out[i].bytes == in[i].bytes) << "message " << i;
    }
  }
  // GPU frames decode on the CPU.
  const auto gpu = emu_encode(in, 13, grid());
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<uint8_t> back(in[i].bytes.size() + 1);
    size_t got = 0;
    ASSERT_EQ(codec::decode(gpu[i].data(), gpu[i].size(), back.data(), back.size(), &got), codec::Status::kOk);
    back.resize(got);
    EXPECT_TRUE(back == in[i].bytes);
  }
}

// Every corruption gets the CPU decoder's status, and nothing is written past the destination.
TEST(Emulated, MalformedFramesGetCpuStatus) {
  std::mt19937 rng(80);
  const auto in = gaussian_bf16(6000, 1.0, 81);
  const auto fp = gaussian_fp32(3000, 1.0, 82, true);
  const auto good = cpu_encode(in, ElemType::kBf16, 10);
  const auto good32 = cpu_encode(fp, ElemType::kFp32, 10);
  const auto sp = sparse_low16_fp32(3000, 1.0, 83, 10.0);
  const auto good_sparse = cpu_encode(sp, ElemType::kFp32, 10);
  std::vector<std::vector<uint8_t>> frames;
  std::vector<size_t> cap;
  for (size_t len : {size_t(0), size_t(3), size_t(23), size_t(24), size_t(40), good.size() / 2, good.size() - 1})
    frames.emplace_back(good.begin(), good.begin() + len), cap.push_back(in.size());
  auto longer = good;
  longer.push_back(0);
  frames.push_back(longer), cap.push_back(in.size());
  frames.push_back(good), cap.push_back(in.size() - 1);  // destination too small
  for (int t = 0; t < 150; ++t) {
    const auto& base = t % 3 == 1 ? good : t % 3 == 2 ? good32 : good_sparse;
    auto f = base;
    const int flips = 1 + int(rng() % 3);
    for (int j = 0; j < flips; ++j) f[rng() % f.size()] ^= uint8_t(1u << (rng() % 8));
    frames.push_back(f), cap.push_back(t % 3 == 1 ? in.size() : t % 3 == 2 ? fp.size() : sp.size());
  }
  const auto out = emu_decode(frames, cap);
  for (size_t i = 0; i < frames.size(); ++i) {
    std::vector<uint8_t> back(cap[i]);
    size_t got = 0;
    const codec::Status s = codec::decode(frames[i].data(), frames[i].size(), back.data(), cap[i], &got);
    ASSERT_EQ(out[i].status, int(s)) << "frame " << i;
    if (s == codec::Status::kOk) {
      EXPECT_TRUE(out[i].bytes == std::vector<uint8_t>(back.begin(), back.begin() + got));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Emulated, EmulatedSchedule,
                         ::testing::Values(GridSchedule{WarpOrder::kFree, 0}, GridSchedule{WarpOrder::kReversed, 0},
                                           GridSchedule{WarpOrder::kShuffled, 1}),
                         schedule_name);

}  // namespace
}  // namespace testing
}  // namespace zipccl
