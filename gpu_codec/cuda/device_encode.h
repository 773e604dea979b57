// One codec block encoded by one CTA (FORMAT.md sections 3-5), in two steps so that the kernel can
// publish the block's size to its successors before it writes the lane streams:
//   encode_block_plan:    load + split into planes, sampled and full histograms, per-plane mode and
//                         code (encoder_policy.h, as the CPU), lane sizes, the block header in staging;
//   encode_block_streams: lane streams (one thread per lane) and RAW planes into staging.
// The block then sits in shared memory at `staging`, sh.block_bytes long.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cta.h"
#include "encoder_policy.h"
#include "format.h"
#include "launch_config.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

constexpr uint8_t kPlaneCandidate = 4;  // transient: a full histogram and a code are needed

// Fixed part of the encode CTA's shared memory.
struct EncodeShared {
  uint32_t hist[4][256];         // sampled (every 8th) counts, then completed to the full histogram
  uint32_t pre[4][256];          // counts of every 32nd byte (the pre-screen)
  uint16_t code[4][256];         // canonical code by symbol
  uint8_t len[4][256];           // code length by symbol (0: absent)
  uint32_t lane_bits[4][fmt::kMaxLanes];
  uint32_t lane_at[4][fmt::kMaxLanes];  // offset of each lane stream in the staged block
  uint64_t bits[4];
  uint32_t lo[4], nsym[4], data_at[4];
  uint32_t except[4];            // SPARSE: bytes other than the base (sh.value)
  uint32_t bmin[4], bmax[4];     // smallest and largest byte of each plane
  uint8_t sampled[4];            // the plane's code comes from: 0 the histogram, 1 the sample, 2 the
                                 // sample inside [clo, chi] and exact counts outside (sample_core)
  uint32_t clo[4], chi[4];
  uint8_t mode[4], value[4];
  uint32_t flags;        // bit p: plane p not all equal; bit 4: an element differs from `first`
  uint32_t block_bytes;
  uint32_t slot;         // kernel bookkeeping (ticket of this CTA's current block)
  uint64_t prefix;       // kernel bookkeeping (exclusive prefix of the block)
};
constexpr uint32_t kFlagNotRepeated = 1u << 4;

// Construction scratch of one plane.
struct BuildScratch {
  uint32_t leaf_freq[256];
  uint8_t leaf_sym[256];
  uint8_t leaf_depth[256];
  policy::HuffScratch<uint32_t> huff;
};

ZIPCCL_HD EncodeSmemLayout encode_smem_layout(int planes, int block_log2) {
  EncodeSmemLayout l;
  const uint32_t b = 1u << block_log2;
  l.planes = uint32_t(round_up(sizeof(EncodeShared), 16));
  l.plane_stride = uint32_t(round_up(b, 16));
  l.staging = l.planes + uint32_t(planes) * l.plane_stride;
  const uint32_t staging_bytes = uint32_t(round_up(fmt::block_bound(b, planes), 16));
  l.scratch_stride = uint32_t(round_up(sizeof(BuildScratch), 16));
  const uint32_t scratch_bytes = uint32_t(planes) * l.scratch_stride;
  if (scratch_bytes <= staging_bytes) {
    l.scratch = l.staging;  // dead before the block is staged
    l.total = l.staging + staging_bytes;
  } else {
    l.scratch = l.staging + staging_bytes;
    l.total = l.scratch + scratch_bytes;
  }
  return l;
}

// The thread that runs plane p's serial work: one per warp where the CTA has the warps.
ZIPCCL_HD int plane_owner(int p, int cta_size) { return (p * cta_size) / 4; }

ZIPCCL_HD uint32_t lane_count(uint32_t m, uint32_t per, int k) {
  const uint32_t first = uint32_t(k) * per;
  return first < m ? (m - first < per ? m - first : per) : 0;
}

ZIPCCL_HD uint8_t plane_byte(uint32_t v, int np, int p) {
  if (np == 2) return p == 0 ? fmt::split16_p0(uint16_t(v)) : fmt::split16_p1(uint16_t(v));
  return p == 0 ? fmt::split32_p0(v) : p == 1 ? fmt::split32_p1(v) : uint8_t(v >> (p == 2 ? 8 : 0));
}

// *p = min(*p, v) (Max = false) or max(*p, v) with the Cta's compare-and-swap; reads go through
// add(p, 0) so that they are atomic on every Cta.
template <bool Max, class Cta>
ZIPCCL_HD void cta_extreme(const Cta& cta, uint32_t* p, uint32_t v) {
  for (uint32_t old = cta.add(p, 0); Max ? v > old : v < old;) {
    const uint32_t seen = cta.cas(p, old, v);
    if (seen == old) break;
    old = seen;
  }
}

// Per-thread accumulators of the split: the CONST/repeat flags and each plane's byte range.
struct SplitAcc {
  uint32_t flags = 0;
  uint32_t lo[4] = {255, 255, 255, 255}, hi[4] = {0, 0, 0, 0};
};

// Splits one element into the planes and accumulates it into acc.
template <class Cta>
ZIPCCL_HD void split_element(const Cta& cta, EncodeShared& sh, uint8_t* planes, uint32_t stride, int np, uint32_t i,
                             uint32_t v, uint32_t e0, uint32_t first, SplitAcc* acc) {
  uint32_t* flags = &acc->flags;
  for (int p = 0; p < np; ++p) {
    const uint8_t b = plane_byte(v, np, p);
    planes[size_t(p) * stride + i] = b;
    if (b != plane_byte(e0, np, p)) *flags |= 1u << p;
    acc->lo[p] = b < acc->lo[p] ? b : acc->lo[p];
    acc->hi[p] = b > acc->hi[p] ? b : acc->hi[p];
  }
  if (v != first) *flags |= kFlagNotRepeated;
  (void)cta;
  (void)sh;
}

// policy::prescreen_says_raw on a pre-screen histogram.
ZIPCCL_HD bool prescreen_raw(const uint32_t* pre, uint32_t m) {
  uint64_t sum = 0;
  if (m >= policy::kPrescreenMinElems) {
    for (int v = 0; v < 256; ++v) sum += uint64_t(pre[v]) * (pre[v] ? pre[v] - 1 : 0);
  }
  return policy::prescreen_says_raw(sum, m);
}

// The steps of encode_block_plan, each ended by the caller's cta.sync(). The planes sit at
// smem + lay.planes, plane p at p * lay.plane_stride.

// Clears the histograms and the per-plane state.
template <class Cta>
ZIPCCL_HD void plan_reset(const Cta& cta, EncodeShared& sh) {
  const int tid = cta.tid(), nt = cta.size();
  for (int i = tid; i < 4 * 256; i += nt) (&sh.hist[0][0])[i] = 0;
  for (int i = tid; i < 4 * 256; i += nt) (&sh.pre[0][0])[i] = 0;
  if (tid == 0) {
    sh.flags = 0;
    for (int p = 0; p < 4; ++p) sh.bmin[p] = 255, sh.bmax[p] = 0, sh.sampled[p] = 0;
  }
}

// Load and split: 16-byte loads when the block is 16-aligned; one element per step otherwise. Sets
// sh.flags and each plane's byte range [sh.bmin, sh.bmax].
template <class Cta>
ZIPCCL_HD void plan_split(const Cta& cta, const uint8_t* src, uint32_t m, int np, uint32_t es, uint32_t first,
                          EncodeShared& sh, uint8_t* planes, uint32_t stride) {
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t e0 = load_elem(src, es);
  SplitAcc acc;
  uint32_t done = 0;
  if ((uintptr_t(src) & 15) == 0) {
    const uint32_t per = 16 / es, chunks = m / per;
    for (uint32_t c = uint32_t(tid); c < chunks; c += uint32_t(nt)) {
      const Vec16 v = load16_aligned(src + 16 * size_t(c));
      for (uint32_t j = 0; j < per; ++j) {
        const uint32_t e = es == 2 ? (v.w[j / 2] >> (16 * (j & 1))) & 0xFFFFu : v.w[j];
        const uint32_t i = c * per + j;
        split_element(cta, sh, planes, stride, np, i, e, e0, first, &acc);
      }
    }
    done = chunks * per;
  }
  for (uint32_t i = done + uint32_t(tid); i < m; i += uint32_t(nt)) {
    split_element(cta, sh, planes, stride, np, i, load_elem(src + size_t(i) * es, es), e0, first, &acc);
  }
  if (acc.flags) cta.or_bits(&sh.flags, acc.flags);
  for (int p = 0; p < np; ++p) {
    if (acc.lo[p] <= acc.hi[p]) cta_extreme<false>(cta, &sh.bmin[p], acc.lo[p]), cta_extreme<true>(cta, &sh.bmax[p], acc.hi[p]);
  }
}

// Sampled histogram (every kScreenStride-th element) of every plane: the screen for planes > 0,
// and the first part of each full histogram; every 4th of those samples is also the pre-screen's.
template <class Cta>
ZIPCCL_HD void plan_sample(const Cta& cta, uint32_t m, int np, EncodeShared& sh, const uint8_t* planes,
                           uint32_t stride) {
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t samples = policy::screen_samples(m);
  constexpr uint32_t kPreEvery = policy::kPrescreenStride / policy::kScreenStride;
  for (uint32_t s = uint32_t(tid); s < samples * uint32_t(np); s += uint32_t(nt)) {
    const int p = int(s / samples);
    const uint32_t k = s % samples;
    const uint8_t b = planes[size_t(p) * stride + k * policy::kScreenStride];
    cta.hist_add(sh.hist[p], b);
    if (k % kPreEvery == 0) cta.hist_add(sh.pre[p], b);
  }
}

// First choice of each plane's mode (by its owner thread): CONST, RAW, or a candidate for a code,
// whose counts may come from the sample (sh.sampled 1, or 2 for the sample's core).
template <class Cta>
ZIPCCL_HD void plan_screen(const Cta& cta, uint32_t m, int np, EncodeShared& sh, const uint8_t* planes,
                           uint32_t stride) {
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t samples = policy::screen_samples(m);
  for (int p = 0; p < np; ++p) {
    if (tid != plane_owner(p, nt)) continue;
    uint8_t mode = fmt::kPlaneRaw;
    if (!(sh.flags & (1u << p))) {
      mode = fmt::kPlaneConst;
      sh.value[p] = planes[size_t(p) * stride];
    } else if (!prescreen_raw(sh.pre[p], m) && (p == 0 || policy::screen_says_code(sh.hist[p], samples))) {
      mode = kPlaneCandidate;
      if (policy::sample_suffices(sh.hist[p], samples, sh.bmin[p], sh.bmax[p])) {
        policy::sampled_counts(sh.hist[p], sh.bmin[p], sh.bmax[p]);
        sh.sampled[p] = 1;
      } else if (policy::sample_core(sh.hist[p], samples, sh.bmin[p], sh.bmax[p], &sh.clo[p], &sh.chi[p])) {
        policy::core_counts(sh.hist[p], sh.bmin[p], sh.bmax[p], sh.clo[p], sh.chi[p]);
        sh.sampled[p] = 2;
      }
    }
    sh.mode[p] = mode;
  }
}

// Complete the histograms of candidate planes (4 bytes per step): with the unsampled elements, or,
// for a core plane (sampled 2), with every element outside its core.
template <class Cta>
ZIPCCL_HD void plan_complete_histograms(const Cta& cta, uint32_t m, int np, EncodeShared& sh, const uint8_t* planes,
                                        uint32_t stride) {
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t words = (m + 3) / 4;
  for (int p = 0; p < np; ++p) {
    if (sh.mode[p] != kPlaneCandidate || sh.sampled[p] == 1) continue;
    const uint8_t* pl = planes + size_t(p) * stride;
    const bool core = sh.sampled[p] == 2;
    const uint32_t clo = sh.clo[p], chi = sh.chi[p];
    for (uint32_t w = uint32_t(tid); w < words; w += uint32_t(nt)) {
      for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t i = 4 * w + j;
        if (i >= m) continue;
        const uint32_t v = pl[i];
        if (core ? v < clo || v > chi : i % policy::kScreenStride != 0) cta.hist_add(sh.hist[p], v);
      }
    }
  }
}

// Leaves in (frequency, symbol) order by parallel ranking: the order sort_leaves gives the CPU.
template <class Cta>
ZIPCCL_HD void plan_rank_leaves(const Cta& cta, int np, EncodeShared& sh, uint8_t* smem, const EncodeSmemLayout& lay) {
  const int tid = cta.tid(), nt = cta.size();
  for (int s = tid; s < np * 256; s += nt) {
    const int p = s / 256, sym = s % 256;
    if (sh.mode[p] != kPlaneCandidate || !sh.hist[p][sym]) continue;
    BuildScratch* b = reinterpret_cast<BuildScratch*>(smem + lay.scratch + size_t(p) * lay.scratch_stride);
    const uint32_t r = policy::leaf_rank(sh.hist[p], uint32_t(sym));
    b->leaf_freq[r] = sh.hist[p][sym];
    b->leaf_sym[r] = uint8_t(sym);
  }
}

// Each candidate plane's code (by its owner thread): Huffman lengths, then SPARSE, RAW or the
// canonical codes, as the CPU encoder decides (encoder_policy.h).
template <class Cta>
ZIPCCL_HD void plan_codes(const Cta& cta, uint32_t m, int np, int lanes, EncodeShared& sh, uint8_t* smem,
                          const EncodeSmemLayout& lay) {
  const int tid = cta.tid(), nt = cta.size();
  for (int p = 0; p < np; ++p) {
    if (tid != plane_owner(p, nt)) continue;
    for (int s = 0; s < 256; ++s) sh.len[p][s] = 0;
    if (sh.mode[p] != kPlaneCandidate) continue;
    BuildScratch* b = reinterpret_cast<BuildScratch*>(smem + lay.scratch + size_t(p) * lay.scratch_stride);
    int n = 0;
    for (int s = 0; s < 256; ++s) n += sh.hist[p][s] != 0;
    policy::huffman_limited_depths(b->leaf_freq, n, &b->huff, b->leaf_depth);
    uint32_t lo = 255, hi = 0;
    uint64_t bits = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t sym = b->leaf_sym[i];
      lo = sym < lo ? sym : lo;
      hi = sym > hi ? sym : hi;
      sh.len[p][sym] = b->leaf_depth[i];
      bits += uint64_t(b->leaf_freq[i]) * b->leaf_depth[i];
    }
    sh.lo[p] = lo, sh.nsym[p] = hi - lo + 1, sh.bits[p] = bits;
    const bool huff = policy::huff_estimate_pays(sh.nsym[p], bits, lanes, m);
    uint32_t except = 0;
    const uint32_t base = policy::sparse_base(sh.hist[p], m, &except);
    if (policy::sparse_pays(except, m, huff, sh.nsym[p], bits, lanes)) {
      sh.mode[p] = fmt::kPlaneSparse;
      sh.value[p] = uint8_t(base);
      sh.except[p] = except;
      continue;
    }
    if (!huff) {
      sh.mode[p] = fmt::kPlaneRaw;
      continue;
    }
    fmt::assign_codes(sh.len[p] + lo, sh.nsym[p], sh.code[p] + lo);
  }
}

// Exact lane sizes (HUFF) or exception counts (SPARSE: each lane's run of elements writes its own
// exceptions in step 2). Each lane thread reads its symbols starting at a rotated offset: lanes
// are often a multiple of 128 bytes apart, and in-order reads would all hit one bank.
template <class Cta>
ZIPCCL_HD void plan_lane_sizes(const Cta& cta, uint32_t m, int np, int lanes, EncodeShared& sh, const uint8_t* planes,
                               uint32_t stride) {
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t per = fmt::lane_elems(m, lanes);
  for (int s = tid; s < np * lanes; s += nt) {
    const int p = s / lanes, k = s % lanes;
    const bool sparse = sh.mode[p] == fmt::kPlaneSparse;
    if (sh.mode[p] != kPlaneCandidate && !sparse) continue;
    const uint32_t cnt = lane_count(m, per, k);
    const uint8_t* lp = planes + size_t(p) * stride + size_t(k) * per;
    uint32_t bits = 0;
    const uint32_t rot = cnt ? (4u * uint32_t(k)) % cnt : 0;
    for (uint32_t j = 0; j < cnt; ++j) {
      const uint32_t i = j + rot < cnt ? j + rot : j + rot - cnt;
      bits += sparse ? uint32_t(lp[i] != sh.value[p]) : sh.len[p][lp[i]];
    }
    sh.lane_bits[p][k] = bits;
  }
}

// Final modes (a candidate whose exact streams do not pay is RAW), the modes byte and the plane
// descriptors into staging. Returns where the descriptors end; lanes_at[p]: where plane p's lane
// byte counts go. One thread.
ZIPCCL_HD uint32_t stage_descriptors(uint32_t m, int np, int lanes, EncodeShared& sh, uint8_t* staging,
                                     uint32_t lanes_at[4]) {
  uint8_t modes = 0;
  for (int p = 0; p < np; ++p) {
    if (sh.mode[p] == kPlaneCandidate) {
      size_t stream = 0;
      for (int k = 0; k < lanes; ++k) stream += (sh.lane_bits[p][k] + 7) / 8;
      sh.mode[p] = stream <= policy::huff_stream_limit(sh.nsym[p], lanes, m) ? fmt::kPlaneHuff : fmt::kPlaneRaw;
    }
    modes |= uint8_t(sh.mode[p] << (2 * p));
  }
  staging[0] = modes;
  uint32_t pos = 1;
  for (int p = 0; p < np; ++p) {
    if (sh.mode[p] == fmt::kPlaneConst) {
      staging[pos++] = sh.value[p];
    } else if (sh.mode[p] == fmt::kPlaneHuff) {
      const uint32_t lo = sh.lo[p], nsym = sh.nsym[p];
      staging[pos] = uint8_t(lo);
      staging[pos + 1] = uint8_t(nsym - 1);
      for (uint32_t i = 0; i < nsym; i += 2) {
        const uint8_t hi = i + 1 < nsym ? sh.len[p][lo + i + 1] : 0;
        staging[pos + 2 + i / 2] = uint8_t(sh.len[p][lo + i] | (hi << 4));
      }
      pos += 2 + (nsym + 1) / 2;
      lanes_at[p] = pos;
      pos += 2 * uint32_t(lanes);
    } else if (sh.mode[p] == fmt::kPlaneSparse) {
      staging[pos] = sh.value[p];
      fmt::store_le16(staging + pos + 1, uint16_t(sh.except[p]));
      pos += uint32_t(fmt::kSparseDescBytes);
    }
  }
  while (pos & 3) staging[pos++] = 0;
  return pos;
}

// The block layout after the descriptors (from pos): each plane's data offset, lane offsets and
// byte counts, zero padding; sets sh.block_bytes. One thread.
ZIPCCL_HD void stage_layout(uint32_t m, int np, int lanes, EncodeShared& sh, uint8_t* staging, uint32_t pos,
                            const uint32_t lanes_at[4]) {
  const size_t raw_plane = fmt::round_up4(m);
  for (int p = 0; p < np; ++p) {
    sh.data_at[p] = pos;
    uint32_t bytes = 0;
    if (sh.mode[p] == fmt::kPlaneRaw) {
      bytes = uint32_t(raw_plane);  // the copy writes the padding too
    } else if (sh.mode[p] == fmt::kPlaneHuff) {
      for (int k = 0; k < lanes; ++k) {
        const uint32_t lb = (sh.lane_bits[p][k] + 7) / 8;
        fmt::store_le16(staging + lanes_at[p] + 2 * k, uint16_t(lb));
        sh.lane_at[p][k] = pos + bytes;
        bytes += lb;
      }
      for (uint32_t i = pos + bytes; i < uint32_t(fmt::round_up4(pos + bytes)); ++i) staging[i] = 0;
    } else if (sh.mode[p] == fmt::kPlaneSparse) {
      uint32_t first = 0;  // lane k's exceptions are numbers first .. first + count - 1
      for (int k = 0; k < lanes; ++k) {
        sh.lane_at[p][k] = first;
        first += sh.lane_bits[p][k];
      }
      bytes = uint32_t(fmt::sparse_data_bytes(sh.except[p]));
      for (uint32_t i = pos + bytes; i < uint32_t(fmt::round_up4(pos + bytes)); ++i) staging[i] = 0;
    }
    pos = uint32_t(fmt::round_up4(pos + bytes));
  }
  sh.block_bytes = pos;
}

// Step 1. src: the block's m elements (global); first: the message's first element (CONST frame
// check); lanes: 1..64. On return (all threads): sh.block_bytes, sh.flags; staging holds the header.
template <class Cta>
ZIPCCL_HD void encode_block_plan(const Cta& cta, const uint8_t* src, uint32_t m, uint8_t type, int lanes, uint32_t first,
                                 EncodeShared& sh, uint8_t* smem, const EncodeSmemLayout& lay) {
  const int np = fmt::type_planes(type);
  const uint32_t es = uint32_t(fmt::type_elem_size(type));
  uint8_t* planes = smem + lay.planes;
  const uint32_t stride = lay.plane_stride;

  plan_reset(cta, sh);
  cta.sync();
  plan_split(cta, src, m, np, es, first, sh, planes, stride);
  cta.sync();
  plan_sample(cta, m, np, sh, planes, stride);
  cta.sync();
  plan_screen(cta, m, np, sh, planes, stride);
  cta.sync();
  plan_complete_histograms(cta, m, np, sh, planes, stride);
  cta.sync();
  plan_rank_leaves(cta, np, sh, smem, lay);
  cta.sync();
  plan_codes(cta, m, np, lanes, sh, smem, lay);
  cta.sync();
  plan_lane_sizes(cta, m, np, lanes, sh, planes, stride);
  cta.sync();
  // Header bytes into staging by one thread: a few hundred bytes.
  if (cta.tid() == 0) {
    uint8_t* staging = smem + lay.staging;
    uint32_t lanes_at[4] = {0, 0, 0, 0};
    const uint32_t pos = stage_descriptors(m, np, lanes, sh, staging, lanes_at);
    stage_layout(m, np, lanes, sh, staging, pos, lanes_at);
  }
  cta.sync();
}

// Writes one lane's codes MSB-first into out (whole bytes; the last one zero-padded).
ZIPCCL_HD void write_lane(const uint8_t* sym, uint32_t count, const uint8_t* len, const uint16_t* code, uint8_t* out) {
  uint64_t acc = 0;  // pending bits, left-aligned
  uint32_t nb = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t s = sym[i];
    acc |= uint64_t(code[s]) << (64 - len[s] - nb);
    nb += len[s];
    while (nb >= 8) {
      *out++ = uint8_t(acc >> 56);
      acc <<= 8;
      nb -= 8;
    }
  }
  if (nb) *out = uint8_t(acc >> 56);
}

// Step 2: lane streams and RAW planes into staging. Ends with a CTA barrier.
template <class Cta>
ZIPCCL_HD void encode_block_streams(const Cta& cta, uint32_t m, uint8_t type, int lanes, EncodeShared& sh, uint8_t* smem,
                                    const EncodeSmemLayout& lay) {
  const int np = fmt::type_planes(type);
  const uint8_t* planes = smem + lay.planes;
  uint8_t* staging = smem + lay.staging;
  const int tid = cta.tid(), nt = cta.size();
  const uint32_t per = fmt::lane_elems(m, lanes);
  for (int s = tid; s < np * lanes; s += nt) {
    const int p = s / lanes, k = s % lanes;
    if (sh.mode[p] != fmt::kPlaneHuff) continue;
    write_lane(planes + size_t(p) * lay.plane_stride + size_t(k) * per, lane_count(m, per, k), sh.len[p], sh.code[p],
               staging + sh.lane_at[p][k]);
  }
  for (int s = tid; s < np * lanes; s += nt) {
    const int p = s / lanes, k = s % lanes;
    if (sh.mode[p] != fmt::kPlaneSparse) continue;
    const uint8_t* lp = planes + size_t(p) * lay.plane_stride;
    uint8_t* pos = staging + sh.data_at[p] + 2 * size_t(sh.lane_at[p][k]);
    uint8_t* val = staging + sh.data_at[p] + 2 * size_t(sh.except[p]) + sh.lane_at[p][k];
    const uint32_t first = uint32_t(k) * per, end = first + lane_count(m, per, k);
    for (uint32_t i = first; i < end; ++i) {
      if (lp[i] == sh.value[p]) continue;
      fmt::store_le16(pos, uint16_t(i));
      pos += 2;
      *val++ = lp[i];
    }
  }
  const uint32_t words = (m + 3) / 4;
  for (int p = 0; p < np; ++p) {
    if (sh.mode[p] != fmt::kPlaneRaw) continue;
    const uint8_t* pl = planes + size_t(p) * lay.plane_stride;
    for (uint32_t w = uint32_t(tid); w < words; w += uint32_t(nt)) {
      uint32_t v = 0;
      for (uint32_t j = 0; j < 4; ++j) v |= uint32_t(4 * w + j < m ? pl[4 * w + j] : 0) << (8 * j);
      store_u32_aligned(staging + sh.data_at[p] + 4 * w, v);
    }
  }
  cta.sync();
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
