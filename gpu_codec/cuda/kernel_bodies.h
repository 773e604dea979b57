// The kernels' bodies, written against the Cta interface (cta.h) so that the CPU tests run them -
// grid, ticket, look-back and all - with host threads. The __global__ wrappers (kernels.cuh) only
// bind them to DeviceCta and dynamic shared memory.
//
// Encode, per launch (batch of messages):
//   detect_body   (auto messages only) one CTA per message: element type into the workspace.
//   encode_body   persistent CTAs take block slots from a ticket counter in order; each block is
//                 planned, publishes its size (decoupled look-back), is staged, learns its offset
//                 from its predecessors and is copied into the frame with its index entry.
//   finalize_body frame headers, tail bytes; RAW/CONST fallbacks (the RAW copy spread over the
//                 grid); the last CTA to finish publishes the results and clears the workspace.
// Decode: decode_body, persistent CTAs over (message, block) units; the last CTA publishes results.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cta.h"
#include "device_decode.h"
#include "device_encode.h"
#include "device_frame.h"
#include "launch_config.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

ZIPCCL_HD Control* ws_control(uint8_t* ws) { return reinterpret_cast<Control*>(ws); }
ZIPCCL_HD ItemState* ws_items(uint8_t* ws) { return reinterpret_cast<ItemState*>(ws + kItemStateOffset); }
ZIPCCL_HD uint64_t* ws_slots(uint8_t* ws) { return reinterpret_cast<uint64_t*>(ws + kSlotsOffset); }

ZIPCCL_HD uint64_t lookback_add(uint64_t a, uint64_t b) {
  return ((a & kValueMask) + (b & kValueMask)) | ((a | b) & kNotRepeated);
}

// Index of the item whose range [first(i), first(i+1)) holds u; `first` is non-decreasing.
template <class F>
ZIPCCL_HD uint32_t find_item(uint32_t count, uint64_t u, F first) {
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (first(mid) <= u) lo = mid; else hi = mid;
  }
  return lo;
}

ZIPCCL_HD uint8_t resolved_type(const EncodeItemParam& it, uint8_t* ws, uint32_t i) {
  return it.type == kTypeAuto ? uint8_t(ws_items(ws)[i].type) : it.type;
}

// ---- detect -------------------------------------------------------------------------------------
template <class Cta>
ZIPCCL_HD void detect_body(const Cta& cta, const EncodeParams& prm, uint8_t* smem) {
  DetectShared& sh = *reinterpret_cast<DetectShared*>(smem);
  for (uint32_t i = cta.block(); i < prm.count; i += cta.grid()) {
    const EncodeItemParam& it = prm.items[i];
    if (it.type != kTypeAuto) continue;
    const uint8_t t = detect_type(cta, it.src, it.n, sh);
    if (cta.tid() == 0) ws_items(prm.workspace)[i].type = t;
    cta.sync();
  }
}

// ---- encode -------------------------------------------------------------------------------------
// Byte messages (type none) only need the CONST test: is every byte equal to the first?
template <class Cta>
ZIPCCL_HD bool bytes_differ(const Cta& cta, const uint8_t* src, uint64_t begin, uint64_t end, uint32_t* flag) {
  if (cta.tid() == 0) *flag = 0;
  cta.sync();
  const uint8_t first = load_byte(src);
  bool differ = false;
  for (uint64_t i = begin + uint64_t(cta.tid()); i < end; i += uint64_t(cta.size())) differ |= load_byte(src + i) != first;
  if (differ) cta.or_bits(flag, 1);
  cta.sync();
  return *flag != 0;
}

template <class Cta>
ZIPCCL_HD void encode_body(const Cta& cta, const EncodeParams& prm, uint8_t* smem, const EncodeSmemLayout& lay) {
  EncodeShared& sh = *reinterpret_cast<EncodeShared*>(smem);
  uint8_t* ws = prm.workspace;
  Control* ctl = ws_control(ws);
  uint64_t* slots = ws_slots(ws);
  const int lanes = 1 << prm.lanes_log2;
  const uint32_t block_elems = 1u << prm.block_log2;
  for (;;) {
    if (cta.tid() == 0) sh.slot = cta.add(&ctl->ticket, 1);
    cta.sync();
    const uint32_t slot = sh.slot;
    if (slot >= prm.total_slots) break;
    const uint32_t i = find_item(prm.count, slot, [&](uint32_t j) { return uint64_t(prm.items[j].first_slot); });
    const EncodeItemParam& it = prm.items[i];
    const uint32_t b = slot - it.first_slot;
    const uint8_t type = resolved_type(it, ws, i);
    const uint64_t nblocks = item_blocks(it.n, type, prm.block_log2);
    if (b >= nblocks) {  // an auto message whose detected type needs fewer blocks than reserved
      cta.sync();
      continue;
    }
    uint64_t own = 0;
    if (type == fmt::kTypeNone) {
      const uint64_t begin = uint64_t(b) * 2 * block_elems;
      const uint64_t end = begin + 2 * block_elems < it.n ? begin + 2 * block_elems : it.n;
      own = bytes_differ(cta, it.src, begin, end, &sh.flags) ? kNotRepeated : 0;
    } else {
      const uint32_t es = uint32_t(fmt::type_elem_size(type));
      const uint64_t nelem = it.n / es, first = uint64_t(b) * block_elems;
      const uint32_t m = uint32_t(nelem - first < block_elems ? nelem - first : block_elems);
      encode_block_plan(cta, it.src + first * es, m, type, lanes, load_elem(it.src, es), sh, smem, lay);
      own = sh.block_bytes | ((sh.flags & kFlagNotRepeated) ? kNotRepeated : 0);
    }
    // Publish this block's own size early, so that successors can add it while it is staged.
    if (cta.tid() == 0) cta.store_volatile(&slots[slot], (b == 0 ? kFlagInclusive : kFlagAggregate) | own);
    if (type != fmt::kTypeNone) {
      const uint32_t es = uint32_t(fmt::type_elem_size(type));
      const uint64_t nelem = it.n / es, first = uint64_t(b) * block_elems;
      const uint32_t m = uint32_t(nelem - first < block_elems ? nelem - first : block_elems);
      encode_block_streams(cta, m, type, lanes, sh, smem, lay);
    }
    if (cta.tid() == 0) {
      uint64_t excl = 0;
      for (uint32_t j = slot; j > it.first_slot;) {
        --j;
        uint64_t w;
        while (((w = cta.load_volatile(&slots[j])) & kFlagMask) == 0) cta.pause();
        excl = lookback_add(excl, w);
        if ((w & kFlagMask) == kFlagInclusive) break;
      }
      const uint64_t incl = lookback_add(excl, own);
      if (b != 0) cta.store_volatile(&slots[slot], kFlagInclusive | incl);
      if (b + 1 == nblocks) ws_items(ws)[i].result = incl;
      sh.prefix = excl & kValueMask;
      if (type != fmt::kTypeNone) {
        const CodedLayout l = coded_layout(type, prm.block_log2, uint32_t(nblocks), it.n);
        fmt::store_le32(it.dst + l.index_at + 4 * uint64_t(b), uint32_t((incl & kValueMask)));
      }
    }
    cta.sync();
    if (type != fmt::kTypeNone) {
      const CodedLayout l = coded_layout(type, prm.block_log2, uint32_t(nblocks), it.n);
      cta_copy(cta, it.dst + l.payload_at + sh.prefix, smem + lay.staging, sh.block_bytes);
    }
    cta.sync();
  }
}

// ---- finalize -----------------------------------------------------------------------------------
struct FrameChoice {
  uint8_t kind, type;
  uint32_t nblocks;
  uint64_t size;
};

// The frame the CPU encoder writes for this message, given the blocks' combined look-back word.
ZIPCCL_HD FrameChoice choose_frame(const EncodeItemParam& it, uint8_t type, int block_log2, uint64_t result) {
  const uint64_t n = it.n;
  FrameChoice c{fmt::kFrameRaw, fmt::kTypeNone, 0, fmt::kHeaderBytes + n};
  const uint64_t es = fmt::type_elem_size(type);
  if (n == 0 || n % es == 0) {
    if (n && !(result & kNotRepeated)) return FrameChoice{fmt::kFrameConst, type, 0, fmt::kHeaderBytes + es};
  }
  if (type == fmt::kTypeNone || n < es) return c;
  const uint32_t nblocks = uint32_t(item_blocks(n, type, block_log2));
  const CodedLayout l = coded_layout(type, block_log2, nblocks, n);
  const uint64_t coded = l.payload_at + (result & kValueMask);
  if (coded < fmt::kHeaderBytes + n) return FrameChoice{fmt::kFrameCoded, type, nblocks, coded};
  return c;
}

template <class Cta>
ZIPCCL_HD FrameChoice item_choice(const Cta&, const EncodeParams& prm, uint32_t i) {
  const EncodeItemParam& it = prm.items[i];
  const uint8_t type = resolved_type(it, prm.workspace, i);
  const bool has_blocks = item_slots(it.n, it.type, prm.block_log2) > 0 && item_blocks(it.n, type, prm.block_log2) > 0;
  const uint64_t result = has_blocks ? ws_items(prm.workspace)[i].result : kNotRepeated;
  return choose_frame(it, type, prm.block_log2, result);
}

template <class Cta>
ZIPCCL_HD void finalize_body(const Cta& cta, const EncodeParams& prm, uint32_t* last_flag) {
  uint8_t* ws = prm.workspace;
  const int tid = cta.tid(), nt = cta.size();
  for (uint64_t u = cta.block(); u < prm.total_units; u += cta.grid()) {
    const uint32_t i = find_item(prm.count, u, [&](uint32_t j) { return uint64_t(prm.items[j].first_unit); });
    const EncodeItemParam& it = prm.items[i];
    const uint64_t local = u - it.first_unit;
    const FrameChoice c = item_choice(cta, prm, i);
    if (local == 0) {
      if (tid == 0) {
        FrameHeader h{c.kind, c.type, 0, 0, c.nblocks, it.n};
        if (c.kind == fmt::kFrameCoded) h.block_log2 = prm.block_log2, h.lanes_log2 = prm.lanes_log2;
        write_frame_header(it.dst, h);
        if (c.kind == fmt::kFrameConst) {
          for (uint64_t j = 0; j < fmt::type_elem_size(c.type); ++j) it.dst[fmt::kHeaderBytes + j] = load_byte(it.src + j);
        } else if (c.kind == fmt::kFrameCoded) {
          const CodedLayout l = coded_layout(c.type, prm.block_log2, c.nblocks, it.n);
          for (uint64_t j = 0; j < l.tail_bytes; ++j) it.dst[l.tail_at + j] = load_byte(it.src + l.nelem * l.esize + j);
          for (uint64_t j = l.tail_at + l.tail_bytes; j < l.payload_at; ++j) it.dst[j] = 0;
        }
      }
    } else if (c.kind == fmt::kFrameRaw) {
      const uint64_t begin = (local - 1) * kCopyChunk;
      const uint64_t end = begin + kCopyChunk < it.n ? begin + kCopyChunk : it.n;
      if (begin < end) cta_copy(cta, it.dst + fmt::kHeaderBytes + begin, it.src + begin, size_t(end - begin));
    }
  }
  // Clear the look-back words and the ticket for the next call (the encode kernel is complete).
  uint64_t* slots = ws_slots(ws);
  for (uint64_t s = uint64_t(cta.block()) * nt + tid; s < prm.total_slots; s += uint64_t(cta.grid()) * nt) slots[s] = 0;
  if (cta.block() == 0 && tid == 0) ws_control(ws)->ticket = 0;

  cta.fence_system();
  cta.sync();
  if (tid == 0) *last_flag = cta.add(&ws_control(ws)->done, 1) == cta.grid() - 1;
  cta.sync();
  if (!*last_flag) return;
  cta.fence();
  for (uint32_t i = uint32_t(tid); i < prm.count; i += uint32_t(nt)) {
    const FrameChoice c = item_choice(cta, prm, i);
    prm.results[i].size = c.size;
    prm.results[i].status = int32_t(Status::kOk);
    prm.results[i].ready = 1;
    if (prm.host_results) {
      prm.host_results[i].size = c.size;
      prm.host_results[i].status = int32_t(Status::kOk);
      cta.fence_system();
      cta.store_volatile32(&prm.host_results[i].ready, 1);
    }
  }
  if (tid == 0) ws_control(ws)->done = 0;
}

// ---- decode -------------------------------------------------------------------------------------
ZIPCCL_HD uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

template <class Cta>
ZIPCCL_HD void decode_body(const Cta& cta, const DecodeParams& prm, uint8_t* smem) {
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem);
  uint8_t* ws = prm.workspace;
  ItemState* st = ws_items(ws);
  const int tid = cta.tid(), nt = cta.size();
  for (uint32_t i = uint32_t(tid); i < prm.count; i += uint32_t(nt)) {
    const DecodeItemParam& it = prm.items[i];
    FrameHeader h{0, 0, 0, 0, 0, 0};
    uint64_t payload_at = 0;
    const int s = check_frame(it.src, it.size, it.cap, &h, &payload_at);
    sh.status[i] = s;
    sh.kind[i] = h.kind, sh.type[i] = h.type, sh.block_log2[i] = h.block_log2, sh.lanes_log2[i] = h.lanes_log2;
    sh.n[i] = h.n, sh.nblocks[i] = h.nblocks, sh.payload_at[i] = payload_at;
    uint64_t units = 0;
    if (s == int(Status::kOk)) units = h.kind == fmt::kFrameCoded ? h.nblocks : ceil_div(h.n, kCopyChunk);
    sh.unit_end[i] = uint32_t(units);
  }
  cta.sync();
  if (tid == 0) {
    for (uint32_t i = 1; i < prm.count; ++i) sh.unit_end[i] += sh.unit_end[i - 1];
  }
  cta.sync();
  const uint32_t total = prm.count ? sh.unit_end[prm.count - 1] : 0;
  for (uint32_t u = cta.block(); u < total; u += cta.grid()) {
    cta.sync();  // the previous unit's readers of sh are done
    const uint32_t i = find_item(prm.count + 1, u, [&](uint32_t j) { return j ? uint64_t(sh.unit_end[j - 1]) : 0; });
    const DecodeItemParam& it = prm.items[i];
    const uint32_t local = u - (i ? sh.unit_end[i - 1] : 0);
    const uint64_t n = sh.n[i];
    const uint8_t* src = it.src;
    if (sh.kind[i] == fmt::kFrameRaw) {
      const uint64_t begin = uint64_t(local) * kCopyChunk, end = begin + kCopyChunk < n ? begin + kCopyChunk : n;
      cta_copy(cta, it.dst + begin, src + fmt::kHeaderBytes + begin, size_t(end - begin));
    } else if (sh.kind[i] == fmt::kFrameConst) {
      const uint32_t es = uint32_t(fmt::type_elem_size(sh.type[i]));
      const uint32_t e = load_elem(src + fmt::kHeaderBytes, es);
      const uint32_t word = es == 4 ? e : es == 2 ? (e | (e << 16)) : e * 0x01010101u;
      const uint64_t begin = uint64_t(local) * kCopyChunk, end = begin + kCopyChunk < n ? begin + kCopyChunk : n;
      uint8_t* d = it.dst + begin;
      uint64_t done = 0;
      if ((uintptr_t(d) & 15) == 0) {
        const Vec16 v{{word, word, word, word}};
        for (uint64_t j = uint64_t(tid); j < (end - begin) / 16; j += uint64_t(nt)) store16_aligned(d + 16 * j, v);
        done = (end - begin) / 16 * 16;
      }
      for (uint64_t j = done + uint64_t(tid); j < end - begin; j += uint64_t(nt)) d[j] = uint8_t(word >> (8 * (j % 4)));
    } else {
      const uint8_t type = sh.type[i];
      const CodedLayout l = coded_layout(type, sh.block_log2[i], sh.nblocks[i], n);
      const uint8_t* index = src + l.index_at;
      const uint64_t payload_bytes = it.size - l.payload_at;
      const uint64_t end = load_elem(index + 4 * uint64_t(local), 4);
      const uint64_t begin = local ? load_elem(index + 4 * uint64_t(local - 1), 4) : 0;
      bool ok = (end & 3) == 0 && end >= begin + 4 && end <= payload_bytes;
      if (ok && local == 0 && tid == 0) {
        for (uint64_t j = l.tail_at + l.tail_bytes; j < l.payload_at; ++j) ok &= load_byte(src + j) == 0;
        for (uint64_t j = 0; j < l.tail_bytes; ++j) it.dst[l.nelem * l.esize + j] = load_byte(src + l.tail_at + j);
      }
      if (local == 0) {  // tail padding verdict of thread 0 to every thread
        if (tid == 0) sh.last = ok ? 1u : 0u;
        cta.sync();
        ok = sh.last != 0;
      }
      if (ok) {
        const uint64_t first = uint64_t(local) * l.block_elems;
        const uint32_t m = uint32_t(l.nelem - first < l.block_elems ? l.nelem - first : l.block_elems);
        ok = decode_block(cta, src + l.payload_at + begin, uint32_t(end - begin), m, type, 1 << sh.lanes_log2[i],
                          it.dst + first * l.esize, sh);
      }
      if (!ok && tid == 0) cta.cas(&st[i].error, 0, uint32_t(Status::kCorrupt));
    }
  }
  cta.fence_system();
  cta.sync();
  if (tid == 0) sh.last = cta.add(&ws_control(ws)->done, 1) == cta.grid() - 1;
  cta.sync();
  if (!sh.last) return;
  cta.fence();
  for (uint32_t i = uint32_t(tid); i < prm.count; i += uint32_t(nt)) {
    int32_t s = sh.status[i];
    if (s == int32_t(Status::kOk) && st[i].error) s = int32_t(st[i].error);
    st[i].error = 0;
    const uint64_t size = s == int32_t(Status::kOk) ? sh.n[i] : 0;
    prm.results[i].size = size;
    prm.results[i].status = s;
    prm.results[i].ready = 1;
    if (prm.host_results) {
      prm.host_results[i].size = size;
      prm.host_results[i].status = s;
      cta.fence_system();
      cta.store_volatile32(&prm.host_results[i].ready, 1);
    }
  }
  if (tid == 0) ws_control(ws)->done = 0;
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
