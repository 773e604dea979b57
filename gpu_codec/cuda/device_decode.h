// One codec block decoded by one CTA. The block is read straight from the frame in global memory;
// shared memory holds only the decode tables and a window of kDecodeWindow symbols per lane, so it
// does not grow with the block size or element type:
//   parse (one thread; validates every field as decode_block does) -> decode tables (all threads)
//   -> rounds of { each lane thread decodes its next window; all threads merge the window's
//   elements and store them, 16 bytes at a time where aligned }.
// Any inconsistency sets sh.error; every read stays inside [blk, blk + size).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cta.h"
#include "format.h"
#include "launch_config.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

struct DecodeShared {
  uint16_t table[4][fmt::kTableSize];  // (len << 8) | symbol for each 11-bit window
  uint16_t run_start[4][257];          // canonical order: first table entry of each code
  uint16_t run_entry[4][256];
  uint8_t lens[4][256];
  uint8_t window[4][fmt::kMaxLanes][kDecodeWindow];
  uint32_t lane_at[4][fmt::kMaxLanes];     // lane stream offset in the block
  uint16_t lane_bytes[4][fmt::kMaxLanes];
  uint32_t lane_pos[4][fmt::kMaxLanes];    // HUFF: bits consumed so far; SPARSE: next exception
  uint32_t data_at[4];
  uint32_t lo[4], nsym[4], nruns[4];
  uint32_t except[4];                      // SPARSE: exception count (sh.value: the base)
  uint8_t mode[4], value[4];
  uint32_t error;
  // Kernel bookkeeping (decode_body): per-message headers and the unit prefix of the batch.
  uint32_t unit_end[kMaxBatch];
  uint64_t payload_at[kMaxBatch];
  uint64_t n[kMaxBatch];
  uint32_t nblocks[kMaxBatch];
  int32_t status[kMaxBatch];
  uint8_t kind[kMaxBatch], type[kMaxBatch], block_log2[kMaxBatch], lanes_log2[kMaxBatch];
  uint32_t last;
};

ZIPCCL_HD uint32_t dec_lane_count(uint32_t m, uint32_t per, int k) {
  const uint32_t first = uint32_t(k) * per;
  return first < m ? (m - first < per ? m - first : per) : 0;
}

// Validates a SPARSE plane's exceptions (ascending positions below m, values other than the base)
// and sets each lane's first exception: lane k's elements start at k * per.
ZIPCCL_HD bool parse_sparse(const uint8_t* data, uint32_t m, uint32_t per, int lanes, DecodeShared& sh, int p) {
  const uint32_t k_total = sh.except[p];
  const uint8_t* val = data + 2 * size_t(k_total);
  uint32_t next = 0;
  int lane = 0;
  for (uint32_t j = 0; j < k_total; ++j) {
    const uint32_t i = uint32_t(load_byte(data + 2 * j) | (load_byte(data + 2 * j + 1) << 8));
    if (i < next || i >= m || load_byte(val + j) == sh.value[p]) return false;
    for (; lane < lanes && uint32_t(lane) * per <= i; ++lane) sh.lane_pos[p][lane] = j;
    next = i + 1;
  }
  for (; lane < lanes; ++lane) sh.lane_pos[p][lane] = k_total;
  return true;
}

// Parses and validates the block header and layout (thread 0). Returns false when malformed.
ZIPCCL_HD bool parse_block(const uint8_t* blk, uint32_t size, uint32_t m, int np, int lanes, DecodeShared& sh) {
  if (size < 4) return false;
  const uint8_t modes = load_byte(blk);
  if (np == 2 && (modes >> 4)) return false;
  uint32_t pos = 1;
  uint32_t stream[4] = {0, 0, 0, 0};
  const uint32_t per = fmt::lane_elems(m, lanes);
  for (int p = 0; p < np; ++p) {
    const uint8_t mode = (modes >> (2 * p)) & 3;
    sh.mode[p] = mode;
    if (mode == fmt::kPlaneConst) {
      if (pos + 1 > size) return false;
      sh.value[p] = load_byte(blk + pos++);
    } else if (mode == fmt::kPlaneHuff) {
      if (size - pos < 2) return false;
      const uint32_t lo = load_byte(blk + pos), nsym = uint32_t(load_byte(blk + pos + 1)) + 1;
      if (lo + nsym > 256) return false;
      const uint32_t desc = 2 + (nsym + 1) / 2;
      if (size - pos < desc) return false;
      for (uint32_t i = 0; i < nsym; i += 2) {
        const uint8_t b = load_byte(blk + pos + 2 + i / 2);
        sh.lens[p][i] = b & 0x0F;
        if (i + 1 < nsym) {
          sh.lens[p][i + 1] = b >> 4;
        } else if (b >> 4) {
          return false;  // the unused last high nibble must be zero
        }
      }
      if (!fmt::code_is_valid(sh.lens[p], nsym)) return false;
      pos += desc;
      if (pos + 2 * uint32_t(lanes) > size) return false;
      sh.lo[p] = lo, sh.nsym[p] = nsym;
      for (int k = 0; k < lanes; ++k, pos += 2) {
        const uint16_t lb = uint16_t(load_byte(blk + pos) | (load_byte(blk + pos + 1) << 8));
        // A lane never holds more than 11 bits per element.
        if (lb > (uint64_t(dec_lane_count(m, per, k)) * fmt::kMaxCodeLen + 7) / 8) return false;
        sh.lane_bytes[p][k] = lb;
        stream[p] += lb;
      }
    } else if (mode == fmt::kPlaneSparse) {
      if (size - pos < fmt::kSparseDescBytes) return false;
      sh.value[p] = load_byte(blk + pos);
      sh.except[p] = uint32_t(load_byte(blk + pos + 1) | (load_byte(blk + pos + 2) << 8));
      if (sh.except[p] == 0) return false;
      pos += uint32_t(fmt::kSparseDescBytes);
    }
  }
  for (; pos & 3; ++pos) {
    if (pos >= size || load_byte(blk + pos)) return false;
  }
  for (int p = 0; p < np; ++p) {
    sh.data_at[p] = pos;
    uint64_t bytes = 0;
    if (sh.mode[p] == fmt::kPlaneRaw) {
      bytes = m;
    } else if (sh.mode[p] == fmt::kPlaneHuff) {
      bytes = stream[p];
      uint32_t at = pos;
      for (int k = 0; k < lanes; ++k) {
        sh.lane_at[p][k] = at;
        sh.lane_pos[p][k] = 0;
        at += sh.lane_bytes[p][k];
      }
    } else if (sh.mode[p] == fmt::kPlaneSparse) {
      bytes = fmt::sparse_data_bytes(sh.except[p]);
      if (pos + bytes > size || !parse_sparse(blk + pos, m, per, lanes, sh, p)) return false;
    }
    const uint64_t end = fmt::round_up4(pos + bytes);
    if (end > size) return false;
    for (uint64_t i = pos + bytes; i < end; ++i) {
      if (load_byte(blk + i)) return false;
    }
    pos = uint32_t(end);
  }
  return pos == size;
}

// Canonical runs of plane p's code (owner thread): entries run_start[j] .. run_start[j+1] - 1 of
// the table hold run_entry[j]; the same table fmt::build_decode_table fills.
ZIPCCL_HD void build_runs(DecodeShared& sh, int p) {
  uint32_t count[fmt::kMaxCodeLen + 2] = {0};
  const uint32_t nsym = sh.nsym[p];
  for (uint32_t i = 0; i < nsym; ++i) count[sh.lens[p][i]]++;
  uint32_t first[fmt::kMaxCodeLen + 2];  // first run index of each length
  uint32_t r = 0;
  for (int l = 1; l <= fmt::kMaxCodeLen; ++l) first[l] = r, r += count[l];
  for (uint32_t i = 0; i < nsym; ++i) {
    const uint32_t l = sh.lens[p][i];
    if (l) sh.run_entry[p][first[l]++] = uint16_t((l << 8) | (sh.lo[p] + i));
  }
  uint32_t w = 0;
  for (uint32_t j = 0; j < r; ++j) {
    sh.run_start[p][j] = uint16_t(w);
    w += 1u << (fmt::kMaxCodeLen - (sh.run_entry[p][j] >> 8));
  }
  sh.run_start[p][r] = uint16_t(w);  // == kTableSize for a complete code
  sh.nruns[p] = r;
}

ZIPCCL_HD uint16_t table_entry(const DecodeShared& sh, int p, uint32_t v) {
  uint32_t lo = 0, hi = sh.nruns[p];  // find the last run starting at or before v
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (sh.run_start[p][mid] <= v) lo = mid; else hi = mid;
  }
  return sh.run_entry[p][lo];
}

// Decodes up to kDecodeWindow symbols of lane k of plane p, starting at symbol `from`. Returns false
// when the lane ends inconsistently with its length.
ZIPCCL_HD bool decode_window(const uint8_t* blk, DecodeShared& sh, int p, int k, uint32_t from, uint32_t count) {
  const uint8_t* lane = blk + sh.lane_at[p][k];
  const uint32_t lane_bytes = sh.lane_bytes[p][k];
  uint32_t pos = sh.lane_pos[p][k];
  uint32_t byte = pos >> 3;
  uint64_t buf = 0;
  int nb = 0;
  // Bytes past the lane read as zero: only a malformed lane consumes them, and its bit count then
  // fails the end-of-lane check.
  auto refill = [&]() {
    while (nb <= 56) {
      buf |= uint64_t(byte < lane_bytes ? load_byte(lane + byte) : 0) << (56 - nb);
      ++byte;
      nb += 8;
    }
  };
  refill();
  buf <<= (pos & 7);
  nb -= int(pos & 7);
  const uint32_t end = from + kDecodeWindow < count ? from + kDecodeWindow : count;
  uint8_t* out = sh.window[p][k];
  for (uint32_t i = from; i < end; ++i) {
    if (nb < fmt::kMaxCodeLen) refill();
    const uint16_t e = sh.table[p][buf >> (64 - fmt::kMaxCodeLen)];
    const uint32_t len = e >> 8;
    out[i - from] = uint8_t(e);
    buf <<= len;
    nb -= int(len);
    pos += len;
  }
  sh.lane_pos[p][k] = pos;
  if (end < count) return true;
  // A valid lane uses exactly its bytes and pads with zero bits.
  if ((pos + 7) / 8 != lane_bytes) return false;
  return (pos & 7) == 0 || (load_byte(lane + lane_bytes - 1) & (0xFFu >> (pos & 7))) == 0;
}

// Expands symbols [from, end) of lane k of SPARSE plane p into its window: the base, then the
// lane's exceptions that fall in the window (consumed in order from sh.lane_pos).
ZIPCCL_HD void sparse_window(const uint8_t* blk, DecodeShared& sh, int p, int k, uint32_t first, uint32_t from,
                             uint32_t count) {
  const uint32_t end = from + kDecodeWindow < count ? from + kDecodeWindow : count;
  uint8_t* out = sh.window[p][k];
  for (uint32_t i = from; i < end; ++i) out[i - from] = sh.value[p];
  const uint8_t* data = blk + sh.data_at[p];
  const uint32_t k_total = sh.except[p];
  uint32_t j = sh.lane_pos[p][k];
  for (; j < k_total; ++j) {
    const uint32_t i = uint32_t(load_byte(data + 2 * j) | (load_byte(data + 2 * j + 1) << 8));
    if (i >= first + end) break;
    out[i - first - from] = load_byte(data + 2 * size_t(k_total) + j);
  }
  sh.lane_pos[p][k] = j;
}

// Element i of the block (window-local index j of lane k for HUFF and SPARSE planes).
ZIPCCL_HD uint32_t merge_element(const uint8_t* blk, const DecodeShared& sh, int np, int k, uint32_t j, uint32_t i) {
  uint8_t b[4];
  for (int p = 0; p < np; ++p) {
    b[p] = sh.mode[p] == fmt::kPlaneConst ? sh.value[p]
           : sh.mode[p] == fmt::kPlaneRaw ? load_byte(blk + sh.data_at[p] + i)
                                          : sh.window[p][k][j];
  }
  return np == 2 ? fmt::merge16(b[0], b[1]) : fmt::merge32(b[0], b[1], b[2], b[3]);
}

// Decodes the block blk[0, size) (global) of m elements into dst (global, m * esize bytes).
// All threads return; true when the block was valid (and dst written).
template <class Cta>
ZIPCCL_HD bool decode_block(const Cta& cta, const uint8_t* blk, uint32_t size, uint32_t m, uint8_t type, int lanes,
                            uint8_t* dst, DecodeShared& sh) {
  const int np = fmt::type_planes(type);
  const uint32_t es = uint32_t(fmt::type_elem_size(type));
  const int tid = cta.tid(), nt = cta.size();
  if (tid == 0) {
    // The GPU decoder stages nothing larger than a conforming block (codec_cuda.h).
    sh.error = (size > fmt::block_bound(m, np) || !parse_block(blk, size, m, np, lanes, sh)) ? 1u : 0u;
  }
  cta.sync();
  if (sh.error) return false;
  for (int p = 0; p < np; ++p) {
    if (sh.mode[p] == fmt::kPlaneHuff && tid == (p * nt) / 4) build_runs(sh, p);
  }
  cta.sync();
  for (int s = tid; s < np * int(fmt::kTableSize); s += nt) {
    const int p = s / int(fmt::kTableSize);
    if (sh.mode[p] == fmt::kPlaneHuff) sh.table[p][s % fmt::kTableSize] = table_entry(sh, p, uint32_t(s) % fmt::kTableSize);
  }
  cta.sync();

  const uint32_t per = fmt::lane_elems(m, lanes);
  const uint32_t rounds = (per + kDecodeWindow - 1) / kDecodeWindow;
  constexpr uint32_t kGroup = 16 / 2;  // elements per merge step (16 bytes of 16-bit elements)
  const uint32_t groups_per_lane = kDecodeWindow / kGroup;
  for (uint32_t r = 0; r < rounds; ++r) {
    const uint32_t from = r * kDecodeWindow;
    for (int s = tid; s < np * lanes; s += nt) {
      const int p = s / lanes, k = s % lanes;
      const uint32_t cnt = dec_lane_count(m, per, k);
      if (sh.mode[p] == fmt::kPlaneHuff && from < cnt && !decode_window(blk, sh, p, k, from, cnt))
        cta.or_bits(&sh.error, 1);
      if (sh.mode[p] == fmt::kPlaneSparse && from < cnt) sparse_window(blk, sh, p, k, uint32_t(k) * per, from, cnt);
    }
    cta.sync();
    if (sh.error) return false;
    for (uint32_t g = uint32_t(tid); g < uint32_t(lanes) * groups_per_lane; g += uint32_t(nt)) {
      const int k = int(g / groups_per_lane);
      const uint32_t j0 = (g % groups_per_lane) * kGroup;
      const uint32_t cnt = dec_lane_count(m, per, k);
      if (from + j0 >= cnt) continue;
      const uint32_t i0 = uint32_t(k) * per + from + j0;
      uint8_t* out = dst + size_t(i0) * es;
      if (from + j0 + kGroup <= cnt && (uintptr_t(out) & 15) == 0) {
        Vec16 v[2];
        for (uint32_t j = 0; j < kGroup; ++j) {
          const uint32_t e = merge_element(blk, sh, np, k, j0 + j, i0 + j);
          if (es == 2) {
            uint32_t& w = v[0].w[j / 2];
            w = (j & 1) ? (w | (e << 16)) : e;
          } else {
            v[j / 4].w[j % 4] = e;
          }
        }
        store16_aligned(out, v[0]);
        if (es == 4) store16_aligned(out + 16, v[1]);
      } else {
        const uint32_t n = cnt - (from + j0) < kGroup ? cnt - (from + j0) : kGroup;
        for (uint32_t j = 0; j < n; ++j) {
          const uint32_t e = merge_element(blk, sh, np, k, j0 + j, i0 + j);
          for (uint32_t b = 0; b < es; ++b) out[es * j + b] = uint8_t(e >> (8 * b));
        }
      }
    }
    cta.sync();
  }
  return true;
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
