// The encoder's choices (FORMAT.md section 6) as host/device functions, so that the CPU encoder and
// the CUDA encoder make exactly the same decisions and so write byte-identical frames:
//  - the plane-mode screens (all equal -> CONST; every-8th-byte collision screen; the 97% rule);
//  - the length-limited Huffman construction, from leaves sorted by (frequency, symbol).
// Sorting is separate: (frequency, symbol) is a total order, so any correct sort gives the same leaf
// order. The CPU uses sort_leaves (a heapsort: no std::sort on a device); a thread block ranks
// leaves in parallel with leaf_rank. Tests check both against each other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format.h"

namespace zipccl {
namespace codec {
namespace policy {

// Planes other than plane 0 are screened on every kScreenStride-th byte before a full histogram.
constexpr uint32_t kScreenStride = 8;

ZIPCCL_HD uint32_t screen_samples(uint32_t m) { return (m + kScreenStride - 1) / kScreenStride; }

// Before that screen, every plane (plane 0 too) of a block of at least kPrescreenMinElems elements is
// screened on every kPrescreenStride-th byte (256 samples in 8192): RAW when fewer than 1 in 192 of
// the samples' pairs are equal (uniform bytes: 1 in 256, 4.7 standard deviations below). That
// rejects a random mantissa plane for a quarter of the counting, and a random plane 0 (incompressible
// input) before a 256-symbol code is built for it (random bytes encoded at 0.48 GB/s before, v1z); a
// plane the screen below would pass (pairs equal at 1 in 146 or more) is rejected with probability
// ~2e-4, and then only costs ratio. Exponent planes have far more equal pairs (1 in 5 or so). The
// statistic is exact integer arithmetic, so the CPU and the GPU encoder decide alike.
constexpr uint32_t kPrescreenStride = 4 * kScreenStride;
constexpr uint32_t kPrescreenMinElems = 8192;

ZIPCCL_HD uint32_t prescreen_samples(uint32_t m) {
  return (m + kPrescreenStride - 1) / kPrescreenStride;
}

// sum_f2: the sum of f * (f - 1) over the pre-screen sample's counts f (twice its equal pairs).
ZIPCCL_HD bool prescreen_says_raw(uint64_t sum_f2, uint32_t m) {
  const uint64_t s = prescreen_samples(m);
  return m >= kPrescreenMinElems && sum_f2 * 192 < s * (s - 1);
}

// True when a plane whose bytes all lie in `span` consecutive values can never be pre-screened RAW,
// so that the sample need not be counted: its sum of f * (f - 1) is at least that of the samples
// spread as evenly as they can be over span values, and that already reaches the threshold. Exact:
// the same decision as counting. Exponent planes span ~20 values (8192 elements: up to 114 values pass).
ZIPCCL_HD bool prescreen_span_passes(uint32_t span, uint32_t m) {
  if (m < kPrescreenMinElems || span == 0) return false;
  const uint64_t s = prescreen_samples(m), q = s / span, r = s % span;
  const uint64_t least = r * (q + 1) * q + (span - r) * q * (q - 1);  // sum of f (f - 1), evenly spread
  return !prescreen_says_raw(least, m);
}

// True when the sampled histogram says Huffman could pay: collision rate above 1/128 (Renyi-2 entropy
// below ~7 bits; uniform bytes collide at 1/256).
// Four partial sums, so that the multiply-adds do not wait on each other (a 256-step chain: 800 cycles
// here; 250).
ZIPCCL_HD bool screen_says_code(const uint32_t* sample_freq, uint32_t samples) {
  uint64_t sq[4] = {0, 0, 0, 0};
  for (int s = 0; s < 256; s += 4) {
    for (int j = 0; j < 4; ++j) sq[j] += uint64_t(sample_freq[s + j]) * sample_freq[s + j];
  }
  return (sq[0] + sq[1] + sq[2] + sq[3]) * 128 > uint64_t(samples) * samples;
}

// Code lengths from the sample instead of an exact histogram, when that is safe: the plane's bytes
// span a dense range [lo, hi] (at most twice the values the sample saw, plus 8) and no value holds
// half the sample (so neither CONST nor SPARSE can be chosen). Every value in [lo, hi] then counts at
// least 1, so each byte that occurs gets a code. On exponent planes the lengths cost ~0.05% of
// ratio against the exact histogram's, for an eighth of the counting.
// The sample lies in the plane's [lo, hi], so only that range is scanned.
// The sample's values in [lo, hi]: how many distinct, the largest count, the smallest and largest.
struct SampleStats {
  uint32_t distinct = 0, top = 0, first = 256, last = 0;
};
ZIPCCL_HD SampleStats sample_stats(const uint32_t* sample_freq, uint32_t lo, uint32_t hi) {
  SampleStats st;
  for (uint32_t s = lo; s <= hi && s < 256; ++s) {
    if (!sample_freq[s]) continue;
    ++st.distinct;
    st.top = sample_freq[s] > st.top ? sample_freq[s] : st.top;
    st.first = s < st.first ? s : st.first;
    st.last = s;
  }
  return st;
}

ZIPCCL_HD bool sample_suffices(const uint32_t* sample_freq, uint32_t samples, uint32_t lo, uint32_t hi) {
  const SampleStats st = sample_stats(sample_freq, lo, hi);
  return hi >= lo && hi - lo + 1 <= 2 * st.distinct + 8 && 2 * st.top < samples;
}

// The counts a sampled plane's code is built from, in place: sample count x stride, plus 1 in [lo, hi].
ZIPCCL_HD void sampled_counts(uint32_t* freq, uint32_t lo, uint32_t hi) {
  for (uint32_t s = lo; s <= hi && s < 256; ++s) freq[s] = freq[s] * kScreenStride + 1;  // zero elsewhere
}

// When the sample's range is not dense (sample_suffices fails on that alone) because of a few values
// far from the rest (a zero, denormals or outliers next to an exponent plane's few dozen values: a
// single 0x00 stretches the range to 0x00-0x7x), its dense core is found by dropping sampled values
// from the ends of the range, each time the end farther from its inner neighbour, until the rest
// [*clo, *chi] is dense as above. The code is then built from the sample inside the core
// (core_counts) and from exact counts of the plane's bytes outside it (a pass that only counts the
// rare ones, instead of a histogram of every byte). Fails when a value holds half the sample (CONST
// or SPARSE may win: the exact histogram decides), when fewer than two values would remain, or when
// more than a quarter of the sample lies outside the core.
ZIPCCL_HD bool sample_core(const uint32_t* sample_freq, uint32_t samples, uint32_t lo, uint32_t hi,
                           uint32_t* clo, uint32_t* chi) {
  const SampleStats st = sample_stats(sample_freq, lo, hi);
  uint32_t distinct = st.distinct, i = st.first, j = st.last;
  if (distinct < 2 || 2 * st.top >= samples) return false;
  uint32_t outside = 0;
  while (j - i + 1 > 2 * distinct + 8) {
    uint32_t ni = i + 1, pj = j - 1;  // the inner neighbours (distinct >= 2: both exist)
    while (!sample_freq[ni]) ++ni;
    while (!sample_freq[pj]) --pj;
    if (ni - i >= j - pj) {
      outside += sample_freq[i], i = ni;
    } else {
      outside += sample_freq[j], j = pj;
    }
    if (--distinct < 2) return false;
  }
  if (4 * outside > samples) return false;
  *clo = i, *chi = j;
  return true;
}

// The counts of a core plane's code, in place: inside [clo, chi] as sampled_counts; outside, zero,
// for the exact counts of those bytes to be added.
ZIPCCL_HD void core_counts(uint32_t* freq, uint32_t lo, uint32_t hi, uint32_t clo, uint32_t chi) {
  for (uint32_t s = lo; s <= hi && s < 256; ++s) {
    freq[s] = s >= clo && s <= chi ? freq[s] * kScreenStride + 1 : 0;
  }
}

// The 97% rule: HUFF when the estimated plane (descriptor + coded bits + ~4 bits per lane for each
// lane's last byte) is at most 97% of the raw plane.
ZIPCCL_HD size_t huff_estimate_bytes(uint32_t nsym, uint64_t bits, int lanes) {
  return fmt::huff_desc_bytes(nsym, lanes) + fmt::round_up4((bits + uint64_t(lanes) * 4 + 7) / 8);
}
ZIPCCL_HD bool huff_estimate_pays(uint32_t nsym, uint64_t bits, int lanes, uint32_t m) {
  return huff_estimate_bytes(nsym, bits, lanes) * 100 <= fmt::round_up4(m) * 97;
}

// SPARSE (FORMAT.md section 4): the base is the most frequent byte (the smallest on ties), the
// exceptions are the other bytes. Returns the base; *exceptions = m - its count. freq may be nonzero
// only in [lo, hi] (the plane's range), which is all that is scanned; the running maximum stays in a
// register (a comparison with freq[base] reloaded each step was a 1,700-cycle chain per plane).
ZIPCCL_HD uint32_t sparse_base(const uint32_t* freq, uint32_t m, uint32_t* exceptions, uint32_t lo = 0,
                               uint32_t hi = 255) {
  uint32_t base = lo, top = freq[lo];
  for (uint32_t s = lo + 1; s <= hi && s < 256; ++s) {
    if (freq[s] > top) top = freq[s], base = s;
  }
  *exceptions = m - top;
  return base;
}

// SPARSE when its descriptor plus padded data are at most 97% of the raw plane and no larger than
// the HUFF estimate (when HUFF pays at all). This keeps every block within fmt::block_bound.
ZIPCCL_HD bool sparse_pays(uint32_t exceptions, uint32_t m, bool huff_pays, uint32_t nsym, uint64_t bits, int lanes) {
  const size_t raw_plane = fmt::round_up4(m);
  const size_t sparse = fmt::kSparseDescBytes + fmt::round_up4(fmt::sparse_data_bytes(exceptions));
  if (exceptions == 0 || exceptions > 0xFFFFu || sparse * 100 > raw_plane * 97) return false;
  return !huff_pays || sparse <= huff_estimate_bytes(nsym, bits, lanes);
}

// Largest lane-stream total a HUFF plane may have: descriptor + padded stream <= raw plane, which
// keeps every block within fmt::block_bound. Above it the plane goes RAW.
ZIPCCL_HD size_t huff_stream_limit(uint32_t nsym, int lanes, uint32_t m) {
  const size_t raw_plane = fmt::round_up4(m);
  const size_t desc = fmt::huff_desc_bytes(nsym, lanes);
  return raw_plane > desc ? ((raw_plane - desc) & ~size_t(3)) : 0;
}

// ---- Leaf order ---------------------------------------------------------------------------------
// A leaf key orders by frequency, then symbol: (freq << 8) | symbol.
ZIPCCL_HD uint64_t leaf_key(uint32_t freq, uint32_t sym) { return (uint64_t(freq) << 8) | sym; }

// Position of symbol s (freq[s] > 0) among the present symbols in ascending key order.
ZIPCCL_HD uint32_t leaf_rank(const uint32_t* freq, uint32_t s) {
  const uint64_t k = leaf_key(freq[s], s);
  uint32_t r = 0;
  for (uint32_t t = 0; t < 256; ++t) r += (freq[t] != 0 && leaf_key(freq[t], t) < k) ? 1u : 0u;
  return r;
}

// In-place ascending heapsort of n distinct keys (deterministic, O(n log n), no allocation).
ZIPCCL_HD void sort_leaves(uint64_t* key, int n) {
  auto sift = [key](int root, int end) {
    for (;;) {
      int child = 2 * root + 1;
      if (child >= end) return;
      if (child + 1 < end && key[child + 1] > key[child]) ++child;
      if (key[root] >= key[child]) return;
      const uint64_t t = key[root];
      key[root] = key[child];
      key[child] = t;
      root = child;
    }
  };
  for (int i = n / 2 - 1; i >= 0; --i) sift(i, n);
  for (int end = n - 1; end > 0; --end) {
    const uint64_t t = key[0];
    key[0] = key[end];
    key[end] = t;
    sift(0, end);
  }
}

// ---- Length-limited Huffman depths --------------------------------------------------------------
// Scratch for one construction; W holds sums of frequencies (uint32_t suffices for one block's
// histogram, whose total is at most 2^14; the CPU API takes any uint32_t counts and uses uint64_t).
template <class W>
struct HuffScratch {
  W weight[2 * 256];
  uint16_t parent[2 * 256];
  uint8_t depth[2 * 256];
};

// Lengths (1..kMaxCodeLen, a complete code) for n leaves whose frequencies `freq` are sorted by
// (frequency, symbol) ascending. depth[i] is leaf i's length.
// Optimal lengths by the two-queue method (leaves and internal nodes are both consumed in
// non-decreasing weight order; ties take the leaf), then the limit: clamp, lengthen the cheapest
// codes until the Kraft sum fits, then shorten the most frequent codes while the slack allows.
template <class W>
ZIPCCL_HD void huffman_limited_depths(const W* freq, int n, HuffScratch<W>* s, uint8_t* depth) {
  constexpr int kL = fmt::kMaxCodeLen;
  if (n < 2) {
    for (int i = 0; i < n; ++i) depth[i] = 1;
    return;
  }
  int next_leaf = 0, next_node = n, end_node = n;
  for (int i = 0; i < n; ++i) s->weight[i] = freq[i];
  while (end_node < 2 * n - 1) {
    int pick[2];
    for (int j = 0; j < 2; ++j) {
      if (next_leaf < n && (next_node >= end_node || freq[next_leaf] <= s->weight[next_node])) {
        pick[j] = next_leaf++;
      } else {
        pick[j] = next_node++;
      }
    }
    s->weight[end_node] = s->weight[pick[0]] + s->weight[pick[1]];
    s->parent[pick[0]] = s->parent[pick[1]] = uint16_t(end_node);
    ++end_node;
  }
  s->depth[end_node - 1] = 0;
  for (int i = end_node - 2; i >= 0; --i) {
    const int d = s->depth[s->parent[i]] + 1;
    s->depth[i] = uint8_t(d < 255 ? d : 255);
  }

  int32_t kraft = 0;
  for (int i = 0; i < n; ++i) {
    depth[i] = uint8_t(s->depth[i] < kL ? s->depth[i] : kL);
    kraft += 1 << (kL - depth[i]);
  }
  while (kraft > (1 << kL)) {
    for (int i = 0; i < n && kraft > (1 << kL); ++i) {
      if (depth[i] < kL) {
        kraft -= 1 << (kL - depth[i] - 1);
        depth[i]++;
      }
    }
  }
  while (kraft < (1 << kL)) {
    for (int i = n - 1; i >= 0; --i) {
      const int gain = 1 << (kL - depth[i]);
      if (depth[i] > 1 && kraft + gain <= (1 << kL)) {
        kraft += gain;
        depth[i]--;
        break;
      }
    }
  }
}

}  // namespace policy
}  // namespace codec
}  // namespace zipccl
