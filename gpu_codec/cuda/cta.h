// The thread-block interface the per-block device functions are written against. On the device it
// maps to threadIdx/__syncthreads/atomics; the CPU tests supply a host implementation that runs a
// CTA as std::threads with a barrier, so the same per-block code runs (and is checked) on the CPU.
//
// A Cta provides: tid(), size(), block(), grid(), sync(), shared/global atomics (add, or, cas),
// hist_add (a counter increment that may be aggregated across a warp), fences and the volatile
// 64-bit loads/stores of the look-back.
#pragma once

#include <cstdint>
#include <cstring>
#if !defined(__CUDA_ARCH__)
#include <atomic>
#endif

#include "format.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

#if defined(__CUDACC__)
#define ZIPCCL_DEV __device__ __forceinline__
#else
#define ZIPCCL_DEV inline
#endif

// ---- hist_add's warp aggregation, shared by DeviceCta and the host emulation --------------------
// Lanes combine when they increment the same counter: the match is on the counter's address, not
// the key alone, since one warp can hold lanes of two planes (two histograms).
ZIPCCL_HD unsigned long long hist_match_value(const uint32_t* hist, uint32_t key) {
  return (unsigned long long)(uintptr_t)(hist + key);
}
// The lowest lane of a peer group adds the group's count.
ZIPCCL_HD bool is_group_leader(unsigned peers, unsigned lane) {
#if defined(__CUDA_ARCH__)
  return lane == unsigned(__ffs(peers) - 1);
#else
  return lane == unsigned(__builtin_ctz(peers));
#endif
}
ZIPCCL_HD uint32_t group_count(unsigned peers) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__popc(peers));
#else
  return uint32_t(__builtin_popcount(peers));
#endif
}

struct DeviceCta {
#if defined(__CUDA_ARCH__)
  ZIPCCL_DEV int tid() const { return int(threadIdx.x); }
  ZIPCCL_DEV int size() const { return int(blockDim.x); }
  ZIPCCL_DEV uint32_t block() const { return blockIdx.x; }
  ZIPCCL_DEV uint32_t grid() const { return gridDim.x; }
  ZIPCCL_DEV void sync() const { __syncthreads(); }
  ZIPCCL_DEV uint32_t add(uint32_t* p, uint32_t v) const { return atomicAdd(p, v); }
  ZIPCCL_DEV void or_bits(uint32_t* p, uint32_t v) const { atomicOr(p, v); }
  ZIPCCL_DEV uint32_t cas(uint32_t* p, uint32_t expect, uint32_t v) const { return atomicCAS(p, expect, v); }
  // Increments hist[key]; lanes of a warp with equal keys combine into one atomic (exponent planes
  // have few distinct values, and same-address shared atomics serialise).
  ZIPCCL_DEV void hist_add(uint32_t* hist, uint32_t key) const {
    const unsigned peers = __match_any_sync(__activemask(), hist_match_value(hist, key));
    if (is_group_leader(peers, threadIdx.x & 31)) atomicAdd(hist + key, group_count(peers));
  }
  ZIPCCL_DEV void fence() const { __threadfence(); }
  ZIPCCL_DEV void fence_system() const { __threadfence_system(); }
  ZIPCCL_DEV uint64_t load_volatile(const uint64_t* p) const { return *reinterpret_cast<const volatile uint64_t*>(p); }
  ZIPCCL_DEV void store_volatile(uint64_t* p, uint64_t v) const { *reinterpret_cast<volatile uint64_t*>(p) = v; }
  ZIPCCL_DEV void store_volatile32(uint32_t* p, uint32_t v) const { *reinterpret_cast<volatile uint32_t*>(p) = v; }
  ZIPCCL_DEV void pause() const { __nanosleep(32); }
#else
  // Never instantiated on the host (host code uses the test's HostCta); declared so that the
  // host pass of nvcc sees a complete type.
  int tid() const { return 0; }
  int size() const { return 1; }
  uint32_t block() const { return 0; }
  uint32_t grid() const { return 1; }
  void sync() const {}
  uint32_t add(uint32_t* p, uint32_t v) const { const uint32_t o = *p; *p += v; return o; }
  void or_bits(uint32_t* p, uint32_t v) const { *p |= v; }
  uint32_t cas(uint32_t* p, uint32_t e, uint32_t v) const { const uint32_t o = *p; if (o == e) *p = v; return o; }
  void hist_add(uint32_t* hist, uint32_t key) const { hist[key]++; }
  void fence() const {}
  void fence_system() const {}
  uint64_t load_volatile(const uint64_t* p) const { return *p; }
  void store_volatile(uint64_t* p, uint64_t v) const { *p = v; }
  void store_volatile32(uint32_t* p, uint32_t v) const { *p = v; }
  void pause() const {}
#endif
};

// ---- Memory access helpers ----------------------------------------------------------------------
// load16_aligned and load_byte (so load_elem) are global-only (__ldg: on shared memory the device
// faults with cudaErrorInvalidAddressSpace); they read the kernels' global inputs. Code whose
// source may be shared memory uses the generic loads (load16_generic, load_u32_aligned, plain
// dereference).
#if !defined(__CUDA_ARCH__)
// Shared-memory reads through the global-only loads, as the host emulation (tests/gpu/host_cta.h)
// counts them: it sets each CTA thread's arena range; elsewhere the range is empty.
struct HostSharedLoads {
  std::atomic<uint64_t> count{0};
  std::atomic<const void*> first{nullptr};
};
struct HostSharedArena {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
  HostSharedLoads* loads = nullptr;
};
inline HostSharedArena& host_shared_arena() {
  static thread_local HostSharedArena arena;
  return arena;
}
inline void host_check_global_load(const uint8_t* p, size_t bytes) {
  const HostSharedArena& a = host_shared_arena();
  const uintptr_t at = uintptr_t(p);
  if (at + bytes <= uintptr_t(a.begin) || at >= uintptr_t(a.end)) return;
  const void* none = nullptr;
  a.loads->first.compare_exchange_strong(none, p);
  a.loads->count.fetch_add(1);
}
#endif

struct Vec16 {
  uint32_t w[4];
};

ZIPCCL_HD Vec16 load16_aligned(const uint8_t* p) {
  Vec16 v;
#if defined(__CUDA_ARCH__)
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
#else
  host_check_global_load(p, 16);
  std::memcpy(v.w, p, 16);
#endif
  return v;
}

// 16 bytes from a 16-aligned address in global or shared memory.
ZIPCCL_HD Vec16 load16_generic(const uint8_t* p) {
  Vec16 v;
#if defined(__CUDA_ARCH__)
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
#else
  std::memcpy(v.w, p, 16);
#endif
  return v;
}

ZIPCCL_HD void store16_aligned(uint8_t* p, const Vec16& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
  std::memcpy(p, v.w, 16);
#endif
}

ZIPCCL_HD uint8_t load_byte(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  host_check_global_load(p, 1);
  return *p;
#endif
}

// 32-bit little-endian load of an address that is a multiple of 4.
ZIPCCL_HD uint32_t load_u32_aligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
ZIPCCL_HD void store_u32_aligned(uint8_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  std::memcpy(p, &v, 4);
#endif
}

// Little-endian element of esize bytes (1, 2 or 4) at any alignment.
ZIPCCL_HD uint32_t load_elem(const uint8_t* p, uint32_t esize) {
  uint32_t v = 0;
  for (uint32_t i = 0; i < esize; ++i) v |= uint32_t(load_byte(p + i)) << (8 * i);
  return v;
}

// Copies `bytes` from src (global or shared) to dst with the whole CTA: 16-byte accesses when both
// are 16-aligned, 4-byte when both are 4-aligned, bytes otherwise.
template <class Cta>
ZIPCCL_HD void cta_copy(const Cta& cta, uint8_t* dst, const uint8_t* src, size_t bytes) {
  const uintptr_t a = uintptr_t(dst) | uintptr_t(src);
  size_t done = 0;
  if ((a & 15) == 0) {
    const size_t n16 = bytes / 16;
    for (size_t i = size_t(cta.tid()); i < n16; i += size_t(cta.size()))
      store16_aligned(dst + 16 * i, load16_generic(src + 16 * i));
    done = n16 * 16;
  } else if ((a & 3) == 0) {
    const size_t n4 = bytes / 4;
    for (size_t i = size_t(cta.tid()); i < n4; i += size_t(cta.size()))
      store_u32_aligned(dst + 4 * i, load_u32_aligned(src + 4 * i));
    done = n4 * 4;
  }
  for (size_t i = done + size_t(cta.tid()); i < bytes; i += size_t(cta.size())) dst[i] = src[i];
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
