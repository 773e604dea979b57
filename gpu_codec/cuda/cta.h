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
    const unsigned active = __activemask();
    const unsigned peers = __match_any_sync(active, key);
    if ((threadIdx.x & 31) == unsigned(__ffs(peers) - 1)) atomicAdd(hist + key, uint32_t(__popc(peers)));
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

// ---- Global memory access helpers ---------------------------------------------------------------
struct Vec16 {
  uint32_t w[4];
};

ZIPCCL_HD Vec16 load16_aligned(const uint8_t* p) {
  Vec16 v;
#if defined(__CUDA_ARCH__)
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
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

// Copies `bytes` from src to dst with the whole CTA: 16-byte accesses when both are 16-aligned,
// 4-byte when both are 4-aligned, bytes otherwise.
template <class Cta>
ZIPCCL_HD void cta_copy(const Cta& cta, uint8_t* dst, const uint8_t* src, size_t bytes) {
  const uintptr_t a = uintptr_t(dst) | uintptr_t(src);
  size_t done = 0;
  if ((a & 15) == 0) {
    const size_t n16 = bytes / 16;
    for (size_t i = size_t(cta.tid()); i < n16; i += size_t(cta.size()))
      store16_aligned(dst + 16 * i, load16_aligned(src + 16 * i));
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
