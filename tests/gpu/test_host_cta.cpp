// The host emulation itself (host_cta.h): it must reject what the device rejects (global-only
// loads of shared memory), run warp collectives over the lanes active at that moment, and schedule
// warps in the order it claims, or the emulated codec tests prove less than they seem to.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "host_cta.h"

namespace zipccl {
namespace testing {
namespace {

namespace gd = codec::gpu::detail;

TEST(HostCta, GlobalOnlyLoadsOfSharedMemoryFailTheTest) {
  EXPECT_NONFATAL_FAILURE(run_grid(2, 32, 64, [](const HostCta& cta, uint8_t* smem) {
                            if (cta.block() == 1 && cta.tid() == 3) (void)gd::load_byte(smem + 5);
                          }),
                          "global-only loads (__ldg on the device) read shared memory");
  EXPECT_NONFATAL_FAILURE(run_grid(1, 32, 64, [](const HostCta&, uint8_t* smem) { (void)gd::load16_aligned(smem + 16); }),
                          "global-only loads");
}

TEST(HostCta, GenericLoadsOfSharedMemoryAndGlobalOnlyLoadsOfGlobalMemoryPass) {
  std::vector<uint8_t> global(64, 9);
  std::atomic<uint32_t> sum{0};
  run_grid(2, 64, 64, [&](const HostCta& cta, uint8_t* smem) {
    sum += gd::load16_generic(smem).w[0] & 0xFF;
    sum += gd::load_byte(global.data() + cta.tid() % 64) + gd::load16_aligned(global.data()).w[3] % 2;
  });
  EXPECT_EQ(sum.load(), 2u * 64 * (0xCD + 9 + 1));
  (void)gd::load_byte(global.data());  // outside a grid nothing is guarded
}

// Lanes 0..15 meet in a match while 16..31 are parked at the barrier: the active mask is 0xFFFF.
TEST(HostCta, WarpCollectivesSeeOnlyActiveLanes) {
  std::vector<unsigned> peers(64, 0);
  run_grid(1, 64, 16, [&](const HostCta& cta, uint8_t*) {
    const int lane = cta.tid() % kWarpSize;
    if (cta.tid() < 32 && lane < 16) peers[size_t(cta.tid())] = cta.st_->warp(cta.tid()).match_any(lane, lane % 2);
    if (cta.tid() >= 32 && lane >= 8) return;  // exited lanes are inactive too
    if (cta.tid() >= 32) peers[size_t(cta.tid())] = cta.st_->warp(cta.tid()).match_any(lane, 1);
    cta.sync();
  });
  for (int t = 0; t < 16; ++t) EXPECT_EQ(peers[size_t(t)], t % 2 ? 0xAAAAu : 0x5555u) << t;
  for (int t = 32; t < 40; ++t) EXPECT_EQ(peers[size_t(t)], 0xFFu) << t;
}

// One warp holds lanes of two histograms with equal keys: only the same counter combines
// (defect 7 of issue 26 merged them by key alone).
TEST(HostCta, HistAddCombinesLanesOfOneCounterOnly) {
  std::vector<uint32_t> hist(2 * 256, 0);
  run_grid(1, 128, 16, [&](const HostCta& cta, uint8_t*) {
    for (int s = cta.tid(); s < 1000; s += cta.size()) cta.hist_add(&hist[size_t(s / 500) * 256], uint32_t(s % 3));
  });
  for (int p = 0; p < 2; ++p) {
    for (uint32_t k = 0; k < 3; ++k) {
      uint32_t expect = 0;
      for (int s = p * 500; s < (p + 1) * 500; ++s) expect += uint32_t(s % 3) == k;
      EXPECT_EQ(hist[size_t(p) * 256 + k], expect) << "plane " << p << " key " << k;
    }
  }
}

// Lane 0 of each warp logs its warp in every phase between barriers.
std::vector<int> warp_log(GridSchedule sched, int phases) {
  std::vector<int> log(size_t(4 * phases), -1);
  std::atomic<int> at{0};
  run_grid(1, 128, 16, [&](const HostCta& cta, uint8_t*) {
    for (int ph = 0; ph < phases; ++ph) {
      if (cta.tid() % kWarpSize == 0) log[size_t(at++)] = cta.tid() / kWarpSize;
      cta.sync();
    }
  }, sched);
  return log;
}

TEST(HostCta, AdversarialOrdersRunOneWarpAtATime) {
  EXPECT_EQ(warp_log({WarpOrder::kReversed, 0}, 2), (std::vector<int>{3, 2, 1, 0, 3, 2, 1, 0}));
  const auto a = warp_log({WarpOrder::kShuffled, 1}, 4), b = warp_log({WarpOrder::kShuffled, 2}, 4);
  EXPECT_NE(a, b);
  for (int ph = 0; ph < 4; ++ph) {
    std::vector<int> warps(a.begin() + 4 * ph, a.begin() + 4 * ph + 4);
    std::sort(warps.begin(), warps.end());
    EXPECT_EQ(warps, (std::vector<int>{0, 1, 2, 3})) << "phase " << ph;
  }
}

}  // namespace
}  // namespace testing
}  // namespace zipccl
