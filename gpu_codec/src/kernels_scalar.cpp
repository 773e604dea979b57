// Scalar reference kernels: the definition every SIMD and GPU variant is tested against.
#include <cstring>

#include "cpu_features.h"
#include "encoder_policy.h"
#include "huff_lanes.h"
#include "kernels.h"

namespace zipccl {
namespace codec {
using namespace fmt;

namespace {

void split16(const uint8_t* src, uint32_t m, uint8_t* p0, uint8_t* p1) {
  for (uint32_t i = 0; i < m; ++i) {
    const uint16_t v = load_le16(src + 2 * i);
    p0[i] = split16_p0(v);
    p1[i] = split16_p1(v);
  }
}

void merge16(const uint8_t* p0, const uint8_t* p1, uint32_t m, uint8_t* dst) {
  for (uint32_t i = 0; i < m; ++i) store_le16(dst + 2 * i, fmt::merge16(p0[i], p1[i]));
}

void split32(const uint8_t* src, uint32_t m, uint8_t* const* p) {
  for (uint32_t i = 0; i < m; ++i) {
    const uint32_t v = load_le32(src + 4 * i);
    p[0][i] = split32_p0(v);
    p[1][i] = split32_p1(v);
    p[2][i] = uint8_t(v >> 8);
    p[3][i] = uint8_t(v);
  }
}

void merge32(const uint8_t* const* p, uint32_t m, uint8_t* dst) {
  for (uint32_t i = 0; i < m; ++i) store_le32(dst + 4 * i, fmt::merge32(p[0][i], p[1][i], p[2][i], p[3][i]));
}

void histogram(const uint8_t* p, uint32_t m, uint32_t* freq) {
  // Four sub-histograms: runs of equal bytes (the common case for exponents) would otherwise
  // serialise on one counter. Eight bytes per load, each counted with one read-modify-write.
  uint32_t h[4][256];
  std::memset(h, 0, sizeof(h));
  uint32_t i = 0;
  for (; i + 8 <= m; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    h[0][v & 0xFF]++;
    h[1][(v >> 8) & 0xFF]++;
    h[2][(v >> 16) & 0xFF]++;
    h[3][(v >> 24) & 0xFF]++;
    h[0][(v >> 32) & 0xFF]++;
    h[1][(v >> 40) & 0xFF]++;
    h[2][(v >> 48) & 0xFF]++;
    h[3][v >> 56]++;
  }
  for (; i < m; ++i) h[0][p[i]]++;
  for (int s = 0; s < 256; ++s) freq[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

}  // namespace

void minmax_scalar(const uint8_t* p, uint32_t m, uint32_t* lo, uint32_t* hi) {
  uint8_t a = 255, b = 0;
  for (uint32_t i = 0; i < m; ++i) {
    a = p[i] < a ? p[i] : a;
    b = p[i] > b ? p[i] : b;
  }
  *lo = a, *hi = b;
}

// Counts every kScreenStride-th byte: the screen of planes other than the exponent (usually
// near-random mantissa bits), and the sample that may stand in for the full histogram.
// Four sub-histograms, four samples a step: an exponent plane's few values would otherwise make
// each increment wait for the previous one to the same counter.
void sample_histogram_scalar(const uint8_t* p, uint32_t m, uint32_t* freq) {
  constexpr uint32_t kS = policy::kScreenStride;
  uint32_t h[4][256];
  std::memset(h, 0, sizeof(h));
  const uint8_t* q = p;
  const uint8_t* const end = p + m;
  // One pointer and constant offsets: two instructions a sample.
  for (; end - q > ptrdiff_t(3 * kS); q += 4 * kS) {
    h[0][q[0]]++;
    h[1][q[kS]]++;
    h[2][q[2 * kS]]++;
    h[3][q[3 * kS]]++;
  }
  for (; q < end; q += kS) h[0][*q]++;
  for (int s = 0; s < 256; ++s) freq[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

void count_outside_scalar(const uint8_t* p, uint32_t m, uint32_t clo, uint32_t chi, uint32_t* freq) {
  for (uint32_t i = 0; i < m; ++i) {
    if (p[i] < clo || p[i] > chi) freq[p[i]]++;
  }
}

namespace {

const Kernels kScalar = {"scalar",         split16,
                         merge16,          nullptr,
                         split32,          merge32,
                         histogram,        minmax_scalar,
                         lanes_encode_k,   lanes_decode_k,
                         TableKind::kPair, sample_histogram_scalar,
                         nullptr,          count_outside_scalar};

}  // namespace

size_t huff_encode_lanes(const uint8_t* sym, uint32_t m, const HuffCode& code, int lanes, uint8_t* out,
                         size_t cap, uint16_t* lane_bytes) {
  return lanes_encode(sym, m, code, lanes, out, cap, lane_bytes);
}

bool huff_decode_lanes(const uint8_t* in, const uint16_t* lane_bytes, int lanes, const DecodeTable& table,
                       uint32_t m, uint8_t* out, const uint8_t* readable_end) {
  return lanes_decode(in, lane_bytes, lanes, table, m, out, readable_end);
}

const Kernels& scalar_kernels() { return kScalar; }

Kernels scalar_with(const char* name, const OwnKernels& own) {
  Kernels k = kScalar;
  k.name = name;
  k.split16 = own.split16, k.merge16 = own.merge16, k.split32 = own.split32, k.merge32 = own.merge32;
  k.histogram = own.histogram, k.minmax = own.minmax;
  k.huff_encode = own.huff_encode, k.huff_decode = own.huff_decode;
  return k;
}

namespace {

// A set's table, built once; `build` runs only where the CPU has the set's features.
struct KernelSet {
  bool ok;
  Kernels k;
};

template <typename Build>
KernelSet make_set(Isa isa, const Build& build) {
  KernelSet s{false, kScalar};
  if (cpu_runs(isa)) s.ok = build(&s.k);
  return s;
}

}  // namespace

const Kernels* kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return &kScalar;
    case Isa::kAvx2: {
      static const KernelSet s = make_set(isa, avx2_kernel_set);
      return s.ok ? &s.k : nullptr;
    }
    case Isa::kAvx512: {
      static const KernelSet s = make_set(isa, [](Kernels* k) {
        const Kernels* avx2 = kernels_for(Isa::kAvx2);
        return avx2 && avx512_kernel_set(*avx2, k);
      });
      return s.ok ? &s.k : nullptr;
    }
    case Isa::kNeon: {
      static const KernelSet s = make_set(isa, neon_kernel_set);
      return s.ok ? &s.k : nullptr;
    }
    case Isa::kAuto: {
      static const Kernels* const best = kernels_for(effective_isa(Isa::kAuto));
      return best;
    }
  }
  return nullptr;
}

const Kernels& select_kernels(Isa requested) {
  const Kernels* k = kernels_for(requested);
  return k ? *k : *kernels_for(Isa::kAuto);
}

}  // namespace codec
}  // namespace zipccl
