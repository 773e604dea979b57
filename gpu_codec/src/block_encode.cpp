#include <cstring>

#include "block.h"
#include "encoder_policy.h"

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

// The pre-screen's statistic (policy::prescreen_says_raw): the sum of f * (f - 1) over the counts of
// every kPrescreenStride-th byte. Two count tables, alternate samples, so that the increments of a
// repeated byte do not all wait on each other.
uint64_t prescreen_sum(const uint8_t* p, uint32_t m) {
  constexpr uint32_t kS = policy::kPrescreenStride;
  uint16_t h[2][256];  // at most kMaxBlockElems / kS = 512 samples
  std::memset(h, 0, sizeof(h));
  uint32_t i = 0;
  for (; i + kS < m; i += 2 * kS) h[0][p[i]]++, h[1][p[i + kS]]++;
  if (i < m) h[0][p[i]]++;
  // sum f (f - 1) = sum f^2 - samples. Counts fit int16 and their squares' sum int32, so the squares
  // are one widening multiply-add (pmaddwd) a pair of counts.
  int16_t f[256];
  for (int v = 0; v < 256; ++v) f[v] = int16_t(h[0][v] + h[1][v]);
  int32_t sq = 0;
  for (int v = 0; v < 256; ++v) sq += int32_t(f[v]) * f[v];
  return uint64_t(sq) - policy::prescreen_samples(m);
}

struct PlanePlan {
  uint8_t mode;
  uint8_t value;     // kPlaneConst; kPlaneSparse: the base byte
  HuffCode* code;    // kPlaneHuff
  uint32_t except;   // kPlaneSparse: bytes other than the base
};

// SPARSE data: the positions of the bytes other than `base` (u16 each, ascending), then those bytes.
// Eight bytes are compared at a time: a SPARSE plane is the base in nearly every word (a byte loop
// was 40% of an fp32 encode with zero low halves, v2p).
void write_sparse(const uint8_t* p, uint32_t m, uint8_t base, uint32_t except, uint8_t* dst) {
  uint8_t* pos = dst;
  uint8_t* val = dst + 2 * size_t(except);
  const uint64_t bases = 0x0101010101010101ull * base;
  auto put = [&](uint32_t i) {
    if (p[i] == base) return;
    store_le16(pos, uint16_t(i));
    pos += 2;
    *val++ = p[i];
  };
  uint32_t i = 0;
  for (; i + 8 <= m; i += 8) {
    if (load_le64(p + i) == bases) continue;
    for (uint32_t j = i; j < i + 8; ++j) put(j);
  }
  for (; i < m; ++i) put(i);
}

}  // namespace

size_t encode_block(const Kernels& k, const uint8_t* src, uint32_t m, uint8_t type, int lanes, uint8_t* dst,
                    size_t cap, Ahead* ahead) {
  alignas(64) uint8_t planes[4][kMaxBlockElems];
  HuffCode codes[4];
  const int np = type_planes(type);
  uint32_t lo0 = 0, hi0 = 0;  // plane 0's range, when split16_range gave it
  const bool range0 = np == 2 && m > 0 && k.split16_range;
  if (range0) {
    k.split16_range(src, m, planes[0], planes[1], &lo0, &hi0);
  } else if (np == 2) {
    k.split16(src, m, planes[0], planes[1]);
  } else {
    uint8_t* p[4] = {planes[0], planes[1], planes[2], planes[3]};
    k.split32(src, m, p);
  }

  PlanePlan plan[4];
  const size_t raw_plane = round_up4(m);
  for (int p = 0; p < np; ++p) {
    plan[p] = {kPlaneRaw, 0, nullptr, 0};
    const bool known = p == 0 && range0;
    if (known ? lo0 == hi0 : repeats(planes[p], m, 1)) {
      plan[p] = {kPlaneConst, planes[p][0], nullptr, 0};
      continue;
    }
    // Plane 0's range (split16_range) often settles the pre-screen without counting (~200 ns a plane).
    const bool passes = known && policy::prescreen_span_passes(hi0 - lo0 + 1, m);
    if (!passes &&
        policy::prescreen_says_raw(m >= policy::kPrescreenMinElems ? prescreen_sum(planes[p], m) : 0, m)) {
      continue;
    }
    uint32_t freq[256];
    k.sample_histogram(planes[p], m, freq);
    const uint32_t samples = policy::screen_samples(m);
    if (p != 0 && !policy::screen_says_code(freq, samples)) continue;
    uint32_t lo = lo0, hi = hi0;
    if (!known) k.minmax(planes[p], m, &lo, &hi);
    uint32_t clo, chi;
    if (policy::sample_suffices(freq, samples, lo, hi)) {
      policy::sampled_counts(freq, lo, hi);
    } else if (policy::sample_core(freq, samples, lo, hi, &clo, &chi)) {
      policy::core_counts(freq, lo, hi, clo, chi);
      k.count_outside(planes[p], m, clo, chi, freq);
    } else {
      k.histogram(planes[p], m, freq);
    }
    // freq is zero outside [lo, hi] (the plane's range), exact or sampled.
    const uint64_t bits = build_huffman(freq, &codes[p], lo, hi);
    const bool huff = policy::huff_estimate_pays(codes[p].nsym, bits, lanes, m);
    uint32_t except = 0;
    const uint32_t base = policy::sparse_base(freq, m, &except, lo, hi);
    if (policy::sparse_pays(except, m, huff, codes[p].nsym, bits, lanes)) {
      plan[p] = {kPlaneSparse, uint8_t(base), nullptr, except};
    } else if (huff) {
      plan[p] = {kPlaneHuff, 0, &codes[p], 0};
    }
  }

  for (;;) {
    // Header: modes byte, then each plane's descriptor in plane order, padded to 4.
    size_t pos = 1;
    uint8_t modes = 0;
    size_t lanes_at[4] = {0};
    for (int p = 0; p < np; ++p) modes |= uint8_t(plan[p].mode << (2 * p));
    if (cap < 4) return 0;
    dst[0] = modes;
    for (int p = 0; p < np; ++p) {
      if (plan[p].mode == kPlaneConst) {
        if (pos + 1 > cap) return 0;
        dst[pos++] = plan[p].value;
      } else if (plan[p].mode == kPlaneHuff) {
        if (pos + huff_desc_bytes(plan[p].code->nsym, lanes) > cap) return 0;
        pos += write_huff_desc(*plan[p].code, dst + pos);
        lanes_at[p] = pos;
        pos += 2 * size_t(lanes);
      } else if (plan[p].mode == kPlaneSparse) {
        if (pos + kSparseDescBytes > cap) return 0;
        dst[pos] = plan[p].value;
        store_le16(dst + pos + 1, uint16_t(plan[p].except));
        pos += kSparseDescBytes;
      }
    }
    while (pos & 3) {
      if (pos >= cap) return 0;
      dst[pos++] = 0;
    }
    bool redo = false;
    for (int p = 0; p < np && !redo; ++p) {
      size_t bytes = 0;
      if (plan[p].mode == kPlaneRaw) {
        if (pos + raw_plane > cap) return 0;
        std::memcpy(dst + pos, planes[p], m);
        bytes = m;
      } else if (plan[p].mode == kPlaneHuff) {
        // The stream may use at most what the raw plane would have cost (keeps block_bound true).
        const size_t limit = policy::huff_stream_limit(plan[p].code->nsym, lanes, m);
        const size_t room = pos < cap ? cap - pos : 0;
        uint16_t lane_bytes[kMaxLanes];
        const size_t stream = k.huff_encode(planes[p], m, *plan[p].code, lanes, dst + pos,
                                            limit < room ? limit : room, lane_bytes, ahead);
        if (stream == SIZE_MAX) {
          if (limit <= room) {  // not worth it after all: ship the plane raw
            plan[p].mode = kPlaneRaw;
            redo = true;
            break;
          }
          return 0;
        }
        for (int l = 0; l < lanes; ++l) store_le16(dst + lanes_at[p] + 2 * l, lane_bytes[l]);
        bytes = stream;
      } else if (plan[p].mode == kPlaneSparse) {
        bytes = sparse_data_bytes(plan[p].except);
        if (pos + bytes > cap) return 0;
        write_sparse(planes[p], m, plan[p].value, plan[p].except, dst + pos);
      }
      const size_t end = pos + round_up4(bytes);
      if (end > cap) return 0;
      std::memset(dst + pos + bytes, 0, end - pos - bytes);
      pos = end;
    }
    if (!redo) return pos;
  }
}

}  // namespace codec
}  // namespace zipccl
