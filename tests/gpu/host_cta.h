// Runs the CUDA codec's kernel bodies on the CPU: a CTA is `threads` std::threads sharing a
// "shared memory" arena and a barrier; a grid runs all its CTAs at once (persistent CTAs spin on
// each other in the look-back, so they must be co-resident, as on the device).
//
// What the device would catch and a plain thread pool would not, the emulation checks too:
//  - warps: the threads of a CTA form 32-lane warps; warp collectives (hist_add's match) run over
//    the lanes that are active at that moment, as on the device, not as a per-thread shortcut;
//  - address spaces: the global-only loads (cta.h: __ldg on the device) fail the test when they
//    read a shared-memory arena;
//  - barriers: WarpOrder::kReversed / kShuffled run one warp at a time from each CTA barrier to the
//    next, so that a missing cta.sync() lets a warp see another's unwritten shared memory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "cta.h"

namespace zipccl {
namespace testing {

constexpr int kWarpSize = 32;

// How the threads of a CTA are scheduled between two CTA barriers: all at once (kFree), or one
// warp at a time, its lanes concurrently, in reversed or in a seeded random order of warps.
enum class WarpOrder { kFree, kReversed, kShuffled };

struct GridSchedule {
  WarpOrder order = WarpOrder::kFree;
  uint32_t seed = 0;
};

// One warp's rendezvous for collectives. A lane that arrives waits until every lane of the warp is
// waiting too, parked at a CTA barrier, or exited (inactive); the waiting lanes then form the
// active mask, as __activemask() does for lanes that reach the call together.
class HostWarp {
 public:
  void init(unsigned lanes) { lanes_ = lanes, idle_ = ~lanes; }
  // __match_any_sync(active, value): the active lanes whose value equals this lane's.
  unsigned match_any(int lane, uint64_t value) {
    std::unique_lock<std::mutex> lock(mu_);
    value_[lane] = value;
    waiting_ |= 1u << lane;
    const uint64_t gen = gen_;
    if (!try_complete()) cv_.wait(lock, [&] { return gen_ != gen; });
    return result_[lane];
  }
  void park(int lane, bool exited) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_ |= 1u << lane;
    if (exited) exited_ |= 1u << lane;
    try_complete();
  }
  void unpark_all() {
    std::lock_guard<std::mutex> lock(mu_);
    idle_ = ~lanes_ | exited_;
  }

 private:
  bool try_complete() {
    if (!waiting_ || (waiting_ | idle_) != ~0u) return false;
    for (int l = 0; l < kWarpSize; ++l) {
      if (!(waiting_ >> l & 1)) continue;
      unsigned peers = 0;
      for (int k = 0; k < kWarpSize; ++k) peers |= unsigned((waiting_ >> k & 1) && value_[k] == value_[l]) << k;
      result_[l] = peers;
    }
    waiting_ = 0;
    ++gen_;
    cv_.notify_all();
    return true;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  unsigned lanes_ = 0, idle_ = ~0u, exited_ = 0, waiting_ = 0;
  uint64_t gen_ = 0;
  uint64_t value_[kWarpSize] = {};
  unsigned result_[kWarpSize] = {};
};

// A CTA's barrier and warp schedule. A thread that returns from the body no longer takes part in
// barriers (as on the device). Lock order: the CTA's mutex, then a warp's.
class HostCtaState {
 public:
  HostCtaState(int threads, uint32_t block, GridSchedule sched)
      : warps_((threads + kWarpSize - 1) / kWarpSize), block_(block), sched_(sched), live_(threads),
        warp_(new HostWarp[size_t(warps_)]), cv_(new std::condition_variable[size_t(warps_)]),
        size_(size_t(warps_)), done_(size_t(warps_)), exited_(size_t(warps_)) {
    for (int w = 0; w < warps_; ++w) {
      size_[size_t(w)] = std::min(kWarpSize, threads - w * kWarpSize);
      warp_[size_t(w)].init(size_[size_t(w)] == kWarpSize ? ~0u : (1u << size_[size_t(w)]) - 1);
    }
    new_phase();
  }
  HostWarp& warp(int tid) { return warp_[size_t(tid / kWarpSize)]; }
  void start(int tid) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_[size_t(tid / kWarpSize)].wait(lock, [&] { return may_run(tid / kWarpSize); });
  }
  void sync(int tid) {
    const int w = tid / kWarpSize;
    std::unique_lock<std::mutex> lock(mu_);
    warp(tid).park(tid % kWarpSize, false);
    ++done_[size_t(w)];
    const uint64_t gen = gen_;
    if (++arrived_ == live_) release(); else next_turn();
    cv_[size_t(w)].wait(lock, [&] { return gen_ != gen && may_run(w); });
  }
  void exit(int tid) {
    const int w = tid / kWarpSize;
    std::lock_guard<std::mutex> lock(mu_);
    warp(tid).park(tid % kWarpSize, true);
    ++done_[size_t(w)], ++exited_[size_t(w)];
    if (--live_ > 0 && arrived_ == live_) release(); else next_turn();
  }

 private:
  bool may_run(int w) const { return sched_.order == WarpOrder::kFree || (turn_ < order_.size() && order_[turn_] == w); }
  void release() {
    arrived_ = 0;
    ++gen_;
    for (int w = 0; w < warps_; ++w) warp_[size_t(w)].unpark_all(), done_[size_t(w)] = exited_[size_t(w)];
    new_phase();
    if (sched_.order == WarpOrder::kFree) {
      for (int w = 0; w < warps_; ++w) cv_[size_t(w)].notify_all();
    }
  }
  // The order of warps from this barrier to the next.
  void new_phase() {
    order_.resize(size_t(warps_));
    std::iota(order_.begin(), order_.end(), 0);
    if (sched_.order == WarpOrder::kReversed) std::reverse(order_.begin(), order_.end());
    if (sched_.order == WarpOrder::kShuffled) {
      std::seed_seq seq{sched_.seed, block_, uint32_t(phase_)};
      std::mt19937 rng(seq);
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    ++phase_;
    turn_ = 0;
    next_turn();
  }
  // Passes the turn over warps whose lanes are all parked or exited.
  void next_turn() {
    if (sched_.order == WarpOrder::kFree) return;
    while (turn_ < order_.size() && done_[size_t(order_[turn_])] == size_[size_t(order_[turn_])]) ++turn_;
    if (turn_ < order_.size()) cv_[size_t(order_[turn_])].notify_all();
  }

  const int warps_;
  const uint32_t block_;
  const GridSchedule sched_;
  std::mutex mu_;
  int live_, arrived_ = 0;
  uint64_t gen_ = 0, phase_ = 0;
  std::unique_ptr<HostWarp[]> warp_;
  std::unique_ptr<std::condition_variable[]> cv_;  // per warp: its barrier release or its turn
  std::vector<int> size_, done_, exited_;          // per warp: lanes, lanes parked or exited, exited
  std::vector<int> order_;
  size_t turn_ = 0;
};

struct HostCta {
  int tid_, size_;
  uint32_t block_, grid_;
  HostCtaState* st_;
  int tid() const { return tid_; }
  int size() const { return size_; }
  uint32_t block() const { return block_; }
  uint32_t grid() const { return grid_; }
  void sync() const { st_->sync(tid_); }
  uint32_t add(uint32_t* p, uint32_t v) const { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
  void or_bits(uint32_t* p, uint32_t v) const { __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
  uint32_t cas(uint32_t* p, uint32_t expect, uint32_t v) const {
    __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expect;
  }
  // DeviceCta::hist_add with the warp's match emulated (cta.h holds the logic both use).
  void hist_add(uint32_t* hist, uint32_t key) const {
    const int lane = tid_ % kWarpSize;
    const unsigned peers = st_->warp(tid_).match_any(lane, codec::gpu::detail::hist_match_value(hist, key));
    if (codec::gpu::detail::is_group_leader(peers, unsigned(lane)))
      __atomic_fetch_add(hist + key, codec::gpu::detail::group_count(peers), __ATOMIC_SEQ_CST);
  }
  void fence() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  void fence_system() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  uint64_t load_volatile(const uint64_t* p) const { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
  void store_volatile(uint64_t* p, uint64_t v) const { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
  void store_volatile32(uint32_t* p, uint32_t v) const { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
  void pause() const { std::this_thread::yield(); }
};

// The shared memory of a grid: one 16-aligned arena per CTA, filled with garbage (0xCD) as
// uninitialised shared memory would be, all in one range that the global-only loads reject.
class HostSharedMemory {
 public:
  HostSharedMemory(uint32_t grid, size_t bytes) : stride_((bytes + 31) / 16 * 16), buf_(new uint8_t[grid * stride_ + 16]) {
    base_ = buf_.get() + ((16 - (reinterpret_cast<uintptr_t>(buf_.get()) & 15)) & 15);
    end_ = base_ + grid * stride_;
    std::memset(base_, 0xCD, size_t(end_ - base_));
  }
  uint8_t* arena(uint32_t block) const { return base_ + block * stride_; }
  // Makes the calling thread's global-only loads report reads of this grid's shared memory.
  void guard_this_thread(codec::gpu::detail::HostSharedLoads* loads) const {
    codec::gpu::detail::host_shared_arena() = {base_, end_, loads};
  }
  static void unguard_this_thread() { codec::gpu::detail::host_shared_arena() = {}; }
  size_t offset(const void* p) const { return size_t(static_cast<const uint8_t*>(p) - base_); }

 private:
  size_t stride_;
  std::unique_ptr<uint8_t[]> buf_;
  uint8_t* base_;
  uint8_t* end_;
};

// The emulation's threads, kept between launches: creating one costs ~0.3 ms on a small VM and a
// launch needs hundreds.
class HostThreadPool {
 public:
  static HostThreadPool& get() {
    static HostThreadPool pool;
    return pool;
  }
  ~HostThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs job(i) for every i in [0, n), all at once on n threads; returns when every job has.
  void run(size_t n, const std::function<void(size_t)>& job) {
    std::lock_guard<std::mutex> one_at_a_time(run_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    while (threads_.size() < n) threads_.emplace_back([this, i = threads_.size()] { work(i); });
    job_ = &job, n_ = n, running_ = n;
    ++gen_;
    start_.notify_all();
    done_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  void work(size_t i) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_.wait(lock, [&] { return stop_ || gen_ != seen; });
      if (stop_) return;
      seen = gen_;
      if (i >= n_) continue;
      const std::function<void(size_t)>* job = job_;
      lock.unlock();
      (*job)(i);
      lock.lock();
      if (--running_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t n_ = 0, running_ = 0;
  uint64_t gen_ = 0;
  bool stop_ = false;
};

// Runs body(cta, smem) on every thread of `grid` CTAs of `threads` threads, all CTAs concurrently,
// each CTA's warps as `sched` says. Fails the current test when a global-only load read shared memory.
inline void run_grid(uint32_t grid, int threads, size_t smem_bytes,
                     const std::function<void(const HostCta&, uint8_t*)>& body, GridSchedule sched = GridSchedule()) {
  HostSharedMemory smem(grid, smem_bytes);
  codec::gpu::detail::HostSharedLoads loads;
  std::vector<std::unique_ptr<HostCtaState>> ctas;
  for (uint32_t b = 0; b < grid; ++b) ctas.emplace_back(new HostCtaState(threads, b, sched));
  HostThreadPool::get().run(size_t(grid) * size_t(threads), [&](size_t i) {
    const uint32_t b = uint32_t(i / size_t(threads));
    const int t = int(i % size_t(threads));
    smem.guard_this_thread(&loads);
    ctas[b]->start(t);
    body(HostCta{t, threads, b, grid, ctas[b].get()}, smem.arena(b));
    ctas[b]->exit(t);
    HostSharedMemory::unguard_this_thread();
  });
  if (loads.count.load()) {
    ADD_FAILURE() << loads.count.load() << " global-only loads (__ldg on the device) read shared memory; the first at "
                  << "byte " << smem.offset(loads.first.load()) << " of the grid's shared arena";
  }
}

}  // namespace testing
}  // namespace zipccl
