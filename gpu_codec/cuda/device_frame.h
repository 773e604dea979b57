// Frame level on the device (FORMAT.md section 2): header writing and validation, and the element
// type detection of `auto`. Host/device code; the CPU tests compare it with frame.cpp/detect.cpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cta.h"
#include "format.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

struct FrameHeader {
  uint8_t kind, type, block_log2, lanes_log2;
  uint32_t nblocks;
  uint64_t n;
};

// Geometry of a coded frame from its header.
struct CodedLayout {
  uint32_t esize;
  uint64_t nelem;
  uint32_t block_elems;
  uint64_t index_at, tail_at, tail_bytes, payload_at;
};

ZIPCCL_HD CodedLayout coded_layout(uint8_t type, int block_log2, uint32_t nblocks, uint64_t n) {
  CodedLayout l;
  l.esize = uint32_t(fmt::type_elem_size(type));
  l.nelem = n / l.esize;
  l.block_elems = 1u << block_log2;
  l.index_at = fmt::kHeaderBytes;
  l.tail_at = l.index_at + 4 * uint64_t(nblocks);
  l.tail_bytes = n % l.esize;
  l.payload_at = fmt::round_up4(l.tail_at + l.tail_bytes);
  return l;
}

ZIPCCL_HD void write_frame_header(uint8_t* dst, const FrameHeader& h) {
  fmt::store_le32(dst, fmt::kMagic);
  dst[4] = fmt::kVersion;
  dst[5] = h.kind;
  dst[6] = h.type;
  dst[7] = h.block_log2;
  fmt::store_le64(dst + 8, h.n);
  fmt::store_le32(dst + 16, h.nblocks);
  fmt::store_le32(dst + 20, h.lanes_log2);
}

// Validates a frame of `size` bytes at src for decoding into `cap` bytes, as codec::decode does
// before touching any block (read_frame_info, then exact size and capacity). Reads at most the
// header and the last index entry, only inside [src, src + size). Returns a codec::Status value.
ZIPCCL_HD int check_frame(const uint8_t* src, uint64_t size, uint64_t cap, FrameHeader* h, uint64_t* payload_at) {
  uint8_t hdr[fmt::kHeaderBytes];
  const uint64_t have = size < fmt::kHeaderBytes ? size : fmt::kHeaderBytes;
  for (uint64_t i = 0; i < have; ++i) hdr[i] = load_byte(src + i);
  if (size < 4) return int(Status::kTruncated);
  if (fmt::load_le32(hdr) != fmt::kMagic) return int(Status::kBadMagic);
  if (size < fmt::kHeaderBytes) return int(Status::kTruncated);
  if (hdr[4] != fmt::kVersion) return int(Status::kBadVersion);
  h->kind = hdr[5], h->type = hdr[6], h->block_log2 = hdr[7];
  h->n = fmt::load_le64(hdr + 8);
  h->nblocks = fmt::load_le32(hdr + 16);
  h->lanes_log2 = hdr[20];
  if ((fmt::load_le32(hdr + 20) >> 8) || h->type > fmt::kTypeFp32 || h->n > kMaxFrameInput)
    return int(Status::kCorrupt);
  uint64_t frame_size = 0;
  *payload_at = fmt::kHeaderBytes;
  if (h->kind == fmt::kFrameRaw) {
    if (h->type != fmt::kTypeNone || h->block_log2 || h->nblocks || h->lanes_log2) return int(Status::kCorrupt);
    frame_size = fmt::kHeaderBytes + h->n;
  } else if (h->kind == fmt::kFrameConst) {
    const uint64_t esize = fmt::type_elem_size(h->type);
    if (h->block_log2 || h->nblocks || h->lanes_log2 || h->n == 0 || h->n % esize) return int(Status::kCorrupt);
    frame_size = fmt::kHeaderBytes + esize;
  } else if (h->kind == fmt::kFrameCoded) {
    if (h->type == fmt::kTypeNone || h->block_log2 < fmt::kMinBlockLog2 || h->block_log2 > fmt::kMaxBlockLog2 ||
        h->lanes_log2 > fmt::kMaxLanesLog2)
      return int(Status::kCorrupt);
    const uint64_t nelem = h->n / fmt::type_elem_size(h->type);
    const uint64_t blocks = (nelem + (uint64_t(1) << h->block_log2) - 1) >> h->block_log2;
    if (nelem == 0 || h->nblocks != blocks) return int(Status::kCorrupt);
    const CodedLayout l = coded_layout(h->type, h->block_log2, h->nblocks, h->n);
    if (size < l.payload_at) return int(Status::kTruncated);
    uint8_t last[4];
    for (int i = 0; i < 4; ++i) last[i] = load_byte(src + l.index_at + 4 * (uint64_t(h->nblocks) - 1) + i);
    frame_size = l.payload_at + fmt::load_le32(last);
    *payload_at = l.payload_at;
  } else {
    return int(Status::kCorrupt);
  }
  if (frame_size > size) return int(Status::kTruncated);
  if (frame_size < size) return int(Status::kCorrupt);
  if (h->n > cap) return int(Status::kDstTooSmall);
  return int(Status::kOk);
}

// ---- auto: element type detection (detect.cpp, same sample, same arithmetic) --------------------
constexpr int kDetectE5At = 6 * 256;  // bins: h16's 2 planes, h32's 4 planes, then e5's 32
constexpr int kDetectBins = kDetectE5At + 32;

struct DetectShared {
  uint32_t h16[2][256];
  uint32_t h32[4][256];
  uint32_t e5[32];
  double term[kDetectBins];  // p * log2(p) per bin, summed in bin order by one thread
  uint32_t n16, n32;
};

constexpr size_t kDetectChunk = 1024, kDetectChunks = 16;

ZIPCCL_HD size_t detect_chunks(size_t n) {
  return n >= kDetectChunk * kDetectChunks ? kDetectChunks : (n + kDetectChunk - 1) / kDetectChunk;
}
ZIPCCL_HD size_t detect_chunk_at(size_t n, size_t chunks, size_t c) {
  const size_t first = n - (n < kDetectChunk ? n : kDetectChunk);
  return (first * c / (chunks > 1 ? chunks - 1 : 1)) & ~size_t(3);
}

ZIPCCL_HD double entropy_term(uint32_t f, uint32_t total) {
  if (!f || !total) return 0.0;
  const double p = double(f) / total;
  return p * log2(p);  // ::log2: the C library's on the host (as detect.cpp), CUDA's on the device
}
// detect.cpp's entropy_bits: h -= term, in bin order.
ZIPCCL_HD double entropy_sum(const double* term, int bins, uint32_t total) {
  if (!total) return 0.0;
  double h = 0.0;
  for (int s = 0; s < bins; ++s) h -= term[s];
  return h;
}

// Detects the type of src[0, n) with the whole CTA. Result valid in every thread after return.
template <class Cta>
ZIPCCL_HD uint8_t detect_type(const Cta& cta, const uint8_t* src, size_t n, DetectShared& sh) {
  if (!src || n < 64) return fmt::kTypeNone;
  uint32_t* hist = &sh.h16[0][0];
  for (int i = cta.tid(); i < kDetectBins; i += cta.size()) hist[i] = 0;  // h16, h32, e5 are contiguous
  cta.sync();
  const size_t chunks = detect_chunks(n);
  const size_t words_per_chunk = kDetectChunk / 4;
  for (size_t w = size_t(cta.tid()); w < chunks * words_per_chunk; w += size_t(cta.size())) {
    const size_t c = w / words_per_chunk, i = 4 * (w % words_per_chunk);
    const size_t at = detect_chunk_at(n, chunks, c);
    const size_t len = (n - at < kDetectChunk ? n - at : kDetectChunk) & ~size_t(3);
    if (i + 4 > len) continue;
    const uint32_t v = load_elem(src + at + i, 4);
    const uint16_t lo = uint16_t(v), hi = uint16_t(v >> 16);
    cta.add(&sh.h16[0][fmt::split16_p0(lo)], 1), cta.add(&sh.h16[1][fmt::split16_p1(lo)], 1);
    cta.add(&sh.h16[0][fmt::split16_p0(hi)], 1), cta.add(&sh.h16[1][fmt::split16_p1(hi)], 1);
    cta.add(&sh.e5[(lo >> 10) & 31], 1), cta.add(&sh.e5[(hi >> 10) & 31], 1);
    cta.add(&sh.h32[0][fmt::split32_p0(v)], 1), cta.add(&sh.h32[1][fmt::split32_p1(v)], 1);
    cta.add(&sh.h32[2][uint8_t(v >> 8)], 1), cta.add(&sh.h32[3][uint8_t(v)], 1);
  }
  if (cta.tid() == 0) {
    uint32_t n16 = 0;
    for (size_t c = 0; c < chunks; ++c) {
      const size_t at = detect_chunk_at(n, chunks, c);
      n16 += uint32_t(((n - at < kDetectChunk ? n - at : kDetectChunk) & ~size_t(3)) / 4 * 2);
    }
    sh.n16 = n16, sh.n32 = n16 / 2;
  }
  cta.sync();
  for (int i = cta.tid(); i < kDetectBins; i += cta.size()) {
    const uint32_t f = i < 512 ? sh.h16[i / 256][i % 256] : i < kDetectE5At ? sh.h32[(i - 512) / 256][i % 256]
                                                                           : sh.e5[i - kDetectE5At];
    sh.term[i] = entropy_term(f, i < 512 || i >= kDetectE5At ? sh.n16 : sh.n32);
  }
  cta.sync();
  const double p0_16 = entropy_sum(sh.term, 256, sh.n16);
  const double bits16 = p0_16 + entropy_sum(sh.term + 256, 256, sh.n16);
  double bits32 = 0;
  for (int p = 0; p < 4; ++p) bits32 += entropy_sum(sh.term + 512 + 256 * p, 256, sh.n32);
  const double r16 = bits16 / 16, r32 = bits32 / 32;
  if ((r16 < r32 ? r16 : r32) > 0.97) return fmt::kTypeNone;
  if (r32 < r16 * 0.98) return fmt::kTypeFp32;
  const double exp5 = entropy_sum(sh.term + kDetectE5At, 32, sh.n16);
  return p0_16 - exp5 > 2.75 ? fmt::kTypeFp16 : fmt::kTypeBf16;
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
