// Runs the CUDA codec's kernel bodies on the CPU: a CTA is `threads` std::threads sharing a heap
// "shared memory" and a barrier; a grid runs all its CTAs at once (persistent CTAs spin on each
// other in the look-back, so they must be co-resident, as on the device).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zipccl {
namespace testing {

class HostBarrier {
 public:
  explicit HostBarrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  uint64_t gen_ = 0;
};

struct HostCta {
  int tid_, size_;
  uint32_t block_, grid_;
  HostBarrier* bar_;
  int tid() const { return tid_; }
  int size() const { return size_; }
  uint32_t block() const { return block_; }
  uint32_t grid() const { return grid_; }
  void sync() const { bar_->wait(); }
  uint32_t add(uint32_t* p, uint32_t v) const { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
  void or_bits(uint32_t* p, uint32_t v) const { __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
  uint32_t cas(uint32_t* p, uint32_t expect, uint32_t v) const {
    __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expect;
  }
  void hist_add(uint32_t* hist, uint32_t key) const { __atomic_fetch_add(hist + key, 1u, __ATOMIC_SEQ_CST); }
  void fence() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  void fence_system() const { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  uint64_t load_volatile(const uint64_t* p) const { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
  void store_volatile(uint64_t* p, uint64_t v) const { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
  void store_volatile32(uint32_t* p, uint32_t v) const { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
  void pause() const { std::this_thread::yield(); }
};

// Runs body(cta, smem) on every thread of `grid` CTAs of `threads` threads, all concurrently.
// Shared memory starts filled with garbage (0xCD), as uninitialised shared memory would be.
inline void run_grid(uint32_t grid, int threads, size_t smem_bytes,
                     const std::function<void(const HostCta&, uint8_t*)>& body) {
  std::vector<std::unique_ptr<HostBarrier>> bars;
  std::vector<std::unique_ptr<uint8_t[]>> smem;
  for (uint32_t b = 0; b < grid; ++b) {
    bars.emplace_back(new HostBarrier(threads));
    smem.emplace_back(new uint8_t[smem_bytes + 16]);
    std::memset(smem.back().get(), 0xCD, smem_bytes + 16);
  }
  std::vector<std::thread> pool;
  for (uint32_t b = 0; b < grid; ++b) {
    for (int t = 0; t < threads; ++t) {
      uint8_t* base = smem[b].get();
      uint8_t* aligned = base + ((16 - (reinterpret_cast<uintptr_t>(base) & 15)) & 15);
      pool.emplace_back([&body, b, t, grid, threads, aligned, bar = bars[b].get()] {
        body(HostCta{t, threads, b, grid, bar}, aligned);
      });
    }
  }
  for (auto& th : pool) th.join();
}

}  // namespace testing
}  // namespace zipccl
