// CPU unit tests of the CUDA codec's host/device building blocks: the shared encoder policy, the
// decode table, type detection, and the launch configuration and workspace arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "emulate.h"
#include "encoder_policy.h"
#include "huffman.h"
#include "test_data.h"

namespace zipccl {
namespace testing {
namespace {

using codec::ElemType;
using codec::gpu::GpuStatus;
namespace fmt = codec::fmt;
namespace policy = codec::policy;

TEST(Policy, ParallelRankGivesTheSortedLeafOrder) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    uint32_t freq[256] = {0};
    const int present = 2 + int(rng() % 255);
    for (int j = 0; j < present; ++j) freq[rng() % 256] = trial % 3 == 0 ? 1 + rng() % 4 : 1 + rng() % 100000;
    uint64_t key[256];
    int n = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      if (freq[s]) key[n++] = policy::leaf_key(freq[s], s);
    }
    std::vector<uint64_t> expect(key, key + n);
    std::sort(expect.begin(), expect.end());
    policy::sort_leaves(key, n);
    ASSERT_TRUE(std::equal(expect.begin(), expect.end(), key));
    std::vector<uint64_t> ranked(n);
    for (uint32_t s = 0; s < 256; ++s) {
      if (freq[s]) ranked[policy::leaf_rank(freq, s)] = policy::leaf_key(freq[s], s);
    }
    ASSERT_EQ(ranked, expect);
  }
}

// The 32-bit construction the device runs gives build_huffman's lengths.
TEST(Policy, DeviceWidthConstructionMatchesBuildHuffman) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 500; ++trial) {
    uint32_t freq[256] = {0};
    const int present = 2 + int(rng() % 255);
    uint32_t total = 0;
    for (int j = 0; j < present && total < 16384; ++j) {
      const uint32_t f = trial % 2 ? 1 + rng() % 3 : 1u << (rng() % 12);
      freq[rng() % 256] += f;
      total += f;
    }
    if (std::count_if(freq, freq + 256, [](uint32_t f) { return f != 0; }) < 2) continue;
    codec::HuffCode cpu;
    const uint64_t bits = codec::build_huffman(freq, &cpu);
    uint32_t leaf_freq[256];
    uint8_t leaf_sym[256], depth[256];
    int n = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      if (freq[s]) {
        const uint32_t r = policy::leaf_rank(freq, s);
        leaf_freq[r] = freq[s], leaf_sym[r] = uint8_t(s), ++n;
      }
    }
    policy::HuffScratch<uint32_t> scratch;
    policy::huffman_limited_depths(leaf_freq, n, &scratch, depth);
    uint64_t dbits = 0;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(depth[i], cpu.len_of[leaf_sym[i]]) << "trial " << trial;
      dbits += uint64_t(leaf_freq[i]) * depth[i];
    }
    ASSERT_EQ(dbits, bits);
  }
}

TEST(Policy, Thresholds) {
  uint32_t uniform[256];
  for (auto& f : uniform) f = 4;
  EXPECT_FALSE(policy::screen_says_code(uniform, 1024));
  uint32_t peaked[256] = {0};
  peaked[0] = 1000, peaked[1] = 24;
  EXPECT_TRUE(policy::screen_says_code(peaked, 1024));
  EXPECT_EQ(policy::screen_samples(8192), 1024u);
  // Pre-screen: 256 samples (65,280 pairs): RAW below 340 (2 x 170 equal pairs, 1 in 192).
  EXPECT_EQ(policy::prescreen_samples(8192), 256u);
  EXPECT_TRUE(policy::prescreen_says_raw(339, 8192));
  EXPECT_FALSE(policy::prescreen_says_raw(340, 8192));
  EXPECT_FALSE(policy::prescreen_says_raw(0, 8191));  // smaller blocks are not pre-screened
}

// prescreen_span_passes against the samples dealt one at a time to the emptiest of `span` values
// (the spread with the fewest equal pairs): it passes exactly when that spread is not RAW.
TEST(Policy, PrescreenSpanPassesExactlyWhenTheEvenestSpreadIsNotRaw) {
  for (uint32_t m : {8191u, 8192u, 8193u, 12345u, 16384u}) {
    const uint32_t s = policy::prescreen_samples(m);
    for (uint32_t span = 1; span <= 256; ++span) {
      std::vector<uint64_t> f(span, 0);
      for (uint32_t i = 0; i < s; ++i) ++*std::min_element(f.begin(), f.end());
      uint64_t pairs = 0;
      for (uint64_t c : f) pairs += c * (c - 1);
      EXPECT_EQ(policy::prescreen_span_passes(span, m), m >= 8192 && !policy::prescreen_says_raw(pairs, m))
          << "m " << m << " span " << span;
    }
  }
  EXPECT_TRUE(policy::prescreen_span_passes(114, 8192));  // 256 samples: 1024 - 6 x 114 = 340 pairs
  EXPECT_FALSE(policy::prescreen_span_passes(115, 8192));
  EXPECT_FALSE(policy::prescreen_span_passes(0, 8192));
}

// sample_core: far values are dropped from the ends of the range, the end farther from its inner
// neighbour first, until the rest is dense; the core's counts are the sampled ones, everything
// outside zero (for the exact counts).
TEST(Policy, SampleCore) {
  uint32_t f[256] = {0};
  for (uint32_t s = 100; s < 120; ++s) f[s] = 50;  // 1000 samples over 20 values
  f[0] = 3, f[2] = 1, f[250] = 2;                  // 6 more, far away: 250 goes, then 0, then 2
  uint32_t clo = 0, chi = 0;
  EXPECT_FALSE(policy::sample_suffices(f, 1006, 0, 250));
  ASSERT_TRUE(policy::sample_core(f, 1006, 0, 250, &clo, &chi));
  EXPECT_EQ(clo, 100u);
  EXPECT_EQ(chi, 119u);
  uint32_t g[256];
  std::copy(f, f + 256, g);
  policy::core_counts(g, 0, 250, clo, chi);
  EXPECT_EQ(g[0], 0u);
  EXPECT_EQ(g[250], 0u);
  EXPECT_EQ(g[100], 50u * policy::kScreenStride + 1);
  // Zero and Inf/NaN exponents (0x00, 0xFF) around a core with gaps of 3 (7 values over 19: dense).
  uint32_t h[256] = {0};
  for (uint32_t s = 60; s <= 78; s += 3) h[s] = 100;
  h[0] = 2, h[255] = 1;
  ASSERT_TRUE(policy::sample_core(h, 703, 0, 255, &clo, &chi));
  EXPECT_EQ(clo, 60u);
  EXPECT_EQ(chi, 78u);
  // More than a quarter outside the core, or one value holding half the sample: no core.
  uint32_t q[256] = {0};
  for (uint32_t s = 100; s < 120; ++s) q[s] = 30;
  q[0] = 250;
  EXPECT_FALSE(policy::sample_core(q, 850, 0, 119, &clo, &chi));
  uint32_t t[256] = {0};
  t[100] = 600, t[101] = 400, t[0] = 24;
  EXPECT_FALSE(policy::sample_core(t, 1024, 0, 101, &clo, &chi));
  EXPECT_EQ(policy::screen_samples(8193), 1025u);
  // 8192 symbols at ~3 bits: HUFF; at 7.9 bits: not.
  EXPECT_TRUE(policy::huff_estimate_pays(40, 8192 * 3, 32, 8192));
  EXPECT_FALSE(policy::huff_estimate_pays(256, 8192 * 79 / 10, 32, 8192));
  EXPECT_EQ(policy::huff_stream_limit(40, 32, 8192), (8192 - fmt::huff_desc_bytes(40, 32)) & ~size_t(3));
  EXPECT_EQ(policy::huff_stream_limit(256, 64, 10), 0u);
}

// The device's parallel table fill equals fmt::build_decode_table.
TEST(DeviceDecode, TableMatchesBuildDecodeTable) {
  std::mt19937 rng(3);
  auto sh = std::make_unique<codec::gpu::detail::DecodeShared>();
  for (int trial = 0; trial < 200; ++trial) {
    uint32_t freq[256] = {0};
    const int present = 2 + int(rng() % 200);
    for (int j = 0; j < present; ++j) freq[rng() % 256] += 1 + rng() % (trial % 2 ? 5 : 5000);
    if (std::count_if(freq, freq + 256, [](uint32_t f) { return f != 0; }) < 2) continue;
    codec::HuffCode code;
    codec::build_huffman(freq, &code);
    uint16_t expect[fmt::kTableSize];
    ASSERT_TRUE(fmt::build_decode_table(code.len, code.lo, code.nsym, expect));
    sh->lo[1] = code.lo, sh->nsym[1] = code.nsym;
    std::copy(code.len, code.len + code.nsym, sh->lens[1]);
    gd::build_runs(*sh, 1);
    for (uint32_t v = 0; v < fmt::kTableSize; ++v) ASSERT_EQ(gd::table_entry(*sh, 1, v), expect[v]) << v;
  }
}

TEST(DeviceFrame, DetectionMatchesCpu) {
  std::vector<std::vector<uint8_t>> inputs = {
      gaussian_bf16(50000, 1e-3, 1), gaussian_fp16(50000, 1.0, 2), gaussian_fp32(30000, 1.0, 3, false),
      gaussian_fp32(30000, 1.0, 4, true), random_bytes(100000, 5), random_bytes(63, 6), random_bytes(64, 7),
      gaussian_bf16(700, 1.0, 8), std::vector<uint8_t>(4096, 0), special_bf16(3000, 9),
  };
  auto sh = std::make_unique<gd::DetectShared>();
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t cut : {0, 1, 2, 3, 1001}) {
      if (cut > inputs[i].size()) continue;
      const size_t n = inputs[i].size() - cut;
      uint8_t got = 0xFF;
      run_grid(1, 32, sizeof(gd::DetectShared), [&](const HostCta& cta, uint8_t* smem) {
        const uint8_t t = gd::detect_type(cta, inputs[i].data(), n, *reinterpret_cast<gd::DetectShared*>(smem));
        if (cta.tid() == 0) got = t;
      });
      EXPECT_EQ(got, uint8_t(codec::detect_elem_type(inputs[i].data(), n))) << "input " << i << " n " << n;
    }
  }
}

TEST(DeviceFrame, CheckFrameMatchesReadFrameInfo) {
  const auto in = gaussian_bf16(3000, 1.0, 10);
  const auto f = cpu_encode(in, ElemType::kBf16, 10);
  std::mt19937 rng(11);
  for (int t = 0; t < 2000; ++t) {
    auto g = f;
    g.resize(t % 5 == 0 ? rng() % g.size() : g.size());
    if (t % 2) g[rng() % std::min<size_t>(g.size() + 1, 48) % std::max<size_t>(g.size(), 1)] ^= uint8_t(1u << (rng() % 8));
    const size_t cap = t % 7 == 0 ? in.size() - 1 : in.size();
    gd::FrameHeader h;
    uint64_t payload_at = 0;
    const int s = g.empty() ? gd::check_frame(nullptr, 0, cap, &h, &payload_at)
                            : gd::check_frame(g.data(), g.size(), cap, &h, &payload_at);
    codec::FrameInfo info;
    codec::Status expect = codec::read_frame_info(g.empty() ? nullptr : g.data(), g.size(), &info);
    if (expect == codec::Status::kOk) {
      expect = info.frame_size > g.size()   ? codec::Status::kTruncated
               : info.frame_size < g.size() ? codec::Status::kCorrupt
               : info.original_size > cap   ? codec::Status::kDstTooSmall
                                            : codec::Status::kOk;
    }
    ASSERT_EQ(s, int(expect)) << "trial " << t;
  }
}

TEST(LaunchConfig, GridSize) {
  EXPECT_EQ(gd::grid_size(1000000, 132, 4, 0), 528u);
  EXPECT_EQ(gd::grid_size(1000000, 132, 4, 16), 64u);
  EXPECT_EQ(gd::grid_size(1000000, 132, 4, 500), 528u);  // max_sms above the device: the device
  EXPECT_EQ(gd::grid_size(10, 132, 4, 0), 10u);          // never more CTAs than work
  EXPECT_EQ(gd::grid_size(0, 132, 4, 0), 1u);            // at least one (it publishes results)
  EXPECT_EQ(gd::grid_size(100, 0, 0, 0), 1u);
}

TEST(LaunchConfig, SlotsUnitsAndWorkspace) {
  EXPECT_EQ(gd::item_slots(0, fmt::kTypeBf16, 13), 0u);
  EXPECT_EQ(gd::item_slots(1, fmt::kTypeBf16, 13), 0u);  // shorter than an element: RAW, no blocks
  EXPECT_EQ(gd::item_slots(2, fmt::kTypeBf16, 13), 1u);
  EXPECT_EQ(gd::item_slots(16384, fmt::kTypeBf16, 13), 1u);
  EXPECT_EQ(gd::item_slots(16386, fmt::kTypeBf16, 13), 2u);
  EXPECT_EQ(gd::item_slots(16387, fmt::kTypeBf16, 13), 2u);
  EXPECT_EQ(gd::item_slots(32768, fmt::kTypeFp32, 13), 1u);
  EXPECT_EQ(gd::item_slots(32772, fmt::kTypeFp32, 13), 2u);
  // auto reserves what a 16-bit outcome needs: never fewer than any typed outcome.
  for (uint64_t n : {64ull, 1000ull, 16384ull, 16385ull, 1ull << 30, 0xFFFFFFFFull}) {
    for (uint8_t t : {fmt::kTypeNone, fmt::kTypeBf16, fmt::kTypeFp16, fmt::kTypeFp32}) {
      for (int bl = 10; bl <= 14; ++bl) EXPECT_LE(gd::item_blocks(n, t, bl), gd::item_slots(n, gd::kTypeAuto, bl));
    }
  }
  EXPECT_EQ(gd::item_units(0), 1u);
  EXPECT_EQ(gd::item_units(gd::kCopyChunk), 2u);
  EXPECT_EQ(gd::item_units(gd::kCopyChunk + 1), 3u);
  EXPECT_EQ(gd::encode_workspace_bytes(0) % 256, 0u);
  EXPECT_GE(gd::encode_workspace_bytes(1000), gd::kSlotsOffset + 8000);
  // 1 GiB of bf16 in 8192-element blocks: 65536 look-back words.
  EXPECT_EQ(codec::gpu::encode_workspace_size(size_t(1) << 30), gd::encode_workspace_bytes(65536));
  const size_t sizes[3] = {1 << 20, 1 << 20, 100};
  EXPECT_EQ(codec::gpu::encode_batch_workspace_size(sizes, 3), gd::encode_workspace_bytes(64 + 64 + 1));
  EXPECT_EQ(codec::gpu::encode_workspace_size(100, 9), 0u);  // bad block_log2
  // Batches above kMaxBatch are encoded in several launches: the workspace fits the largest.
  std::vector<size_t> many(200, 1 << 20);
  EXPECT_EQ(codec::gpu::encode_batch_workspace_size(many.data(), many.size()),
            gd::encode_workspace_bytes(64 * gd::kMaxBatch));
}

TEST(LaunchConfig, SharedMemoryFitsTheArchitectures) {
  // sm_80 allows 163 KiB of dynamic shared memory per block, sm_90 227 KiB.
  for (int planes : {2, 4}) {
    for (int bl = fmt::kMinBlockLog2; bl <= fmt::kMaxBlockLog2; ++bl) {
      const gd::EncodeSmemLayout l = gd::encode_smem_layout(planes, bl);
      EXPECT_LE(l.total, 163u * 1024) << planes << " planes, block_log2 " << bl;
      EXPECT_EQ(l.planes % 16, 0u);
      EXPECT_EQ(l.staging % 16, 0u);
      EXPECT_GE(l.staging - l.planes, uint32_t(planes) << bl);
      EXPECT_TRUE(l.scratch == l.staging || l.scratch >= l.staging + fmt::block_bound(1u << bl, planes));
      EXPECT_GE(l.total, l.scratch + planes * sizeof(gd::BuildScratch) - (l.scratch == l.staging ? 0 : 0));
    }
  }
  // The default bf16 configuration leaves room for 4 CTAs on an SM of 228 KiB.
  EXPECT_LE(gd::encode_smem_layout(2, 13).total, 56u * 1024);
  // Why the GPU's default block is half the CPU's: at the default every type fits the 99 KiB a
  // thread block may have on sm_86 / sm_89; fp32 at the CPU's 16384 elements would not.
  EXPECT_EQ(codec::gpu::kDefaultBlockLog2, 13);
  EXPECT_EQ(codec::kDefaultBlockLog2, 14);
  EXPECT_LE(gd::encode_smem_layout(4, codec::gpu::kDefaultBlockLog2).total, 99u * 1024);
  EXPECT_GT(gd::encode_smem_layout(4, codec::kDefaultBlockLog2).total, 99u * 1024);
  EXPECT_LE(sizeof(gd::DecodeShared), 48u * 1024);  // no opt-in needed; independent of block size
}

TEST(LaunchConfig, BuildEncodeParams) {
  std::vector<uint8_t> a(100), d(codec::max_encoded_size(1 << 20));
  codec::gpu::EncodeItem items[4] = {
      {a.data(), 1 << 20, d.data(), d.size(), ElemType::kBf16},
      {a.data(), 100, d.data(), d.size(), ElemType::kAuto},
      {a.data(), 10, d.data(), d.size(), ElemType::kAuto},  // < 64 bytes: none, as detect_elem_type
      {a.data(), 0, d.data(), d.size(), ElemType::kFp32},
  };
  gd::EncodeParams prm;
  int planes = 0;
  bool any_auto = false;
  ASSERT_EQ(gd::build_encode_params(items, 4, 0, &prm, &planes, &any_auto), GpuStatus::kOk);
  EXPECT_EQ(prm.block_log2, 13);
  EXPECT_EQ(prm.lanes_log2, 5);
  EXPECT_EQ(prm.items[0].first_slot, 0u);
  EXPECT_EQ(prm.items[1].first_slot, 64u);
  EXPECT_EQ(prm.items[1].type, gd::kTypeAuto);
  EXPECT_EQ(prm.items[2].type, fmt::kTypeNone);
  EXPECT_EQ(prm.total_slots, 64u + 1 + 1 + 0);
  EXPECT_EQ(prm.items[1].first_unit, 65u);
  EXPECT_EQ(prm.total_units, 65u + 2 + 2 + 1);
  EXPECT_EQ(planes, 4);
  EXPECT_TRUE(any_auto);
  items[0].dst_capacity = codec::max_encoded_size(1 << 20) - 1;
  EXPECT_EQ(gd::build_encode_params(items, 4, 0, &prm, &planes, &any_auto), GpuStatus::kDstTooSmall);
  items[0].dst_capacity = d.size();
  EXPECT_EQ(gd::build_encode_params(items, 4, 15, &prm, &planes, &any_auto), GpuStatus::kInvalidArgument);
  EXPECT_EQ(gd::build_encode_params(items, 0, 0, &prm, &planes, &any_auto), GpuStatus::kInvalidArgument);
  items[3].type = ElemType(7);
  EXPECT_EQ(gd::build_encode_params(items, 4, 0, &prm, &planes, &any_auto), GpuStatus::kInvalidArgument);
  items[3].type = ElemType::kFp32;
  items[0].src = nullptr;
  EXPECT_EQ(gd::build_encode_params(items, 4, 0, &prm, &planes, &any_auto), GpuStatus::kInvalidArgument);
}

TEST(LaunchConfig, BuildDecodeParams) {
  std::vector<uint8_t> a(100);
  codec::gpu::DecodeItem items[2] = {{a.data(), 100, a.data(), 1 << 20}, {a.data(), 24, a.data(), 0}};
  gd::DecodeParams prm;
  uint64_t bound = 0;
  ASSERT_EQ(gd::build_decode_params(items, 2, &prm, &bound), GpuStatus::kOk);
  EXPECT_EQ(bound, 512u);  // 1 MiB of output is at most 512 blocks of 1024 16-bit elements
  EXPECT_EQ(prm.count, 2u);
  items[1].dst = nullptr, items[1].dst_capacity = 5;
  EXPECT_EQ(gd::build_decode_params(items, 2, &prm, &bound), GpuStatus::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace zipccl
