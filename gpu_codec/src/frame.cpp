// Frame level (FORMAT.md "Frame"): header, block index, raw/const/coded choice, threads.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "block.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace {

using namespace fmt;

// Decoded frames of at least this size are written with streaming stores (kernel sets that have
// them): 32 MiB is well past any core's L2 and a fair share of a server's L3.
constexpr uint64_t kStreamOutBytes = uint64_t(32) << 20;

struct Header {
  uint8_t kind, type, block_log2;
  uint64_t n;
  uint32_t nblocks;
  uint8_t lanes_log2;
};

void write_header(uint8_t* dst, const Header& h) {
  store_le32(dst, kMagic);
  dst[4] = kVersion;
  dst[5] = h.kind;
  dst[6] = h.type;
  dst[7] = h.block_log2;
  store_le64(dst + 8, h.n);
  store_le32(dst + 16, h.nblocks);
  store_le32(dst + 20, h.lanes_log2);
}

// Geometry of a coded frame, derived from the header alone.
struct Layout {
  size_t esize;
  uint64_t nelem;
  uint32_t block_elems;
  size_t index_at, tail_at, tail_bytes, payload_at;
};

Layout coded_layout(const Header& h) {
  Layout l;
  l.esize = type_elem_size(h.type);
  l.nelem = h.n / l.esize;
  l.block_elems = 1u << h.block_log2;
  l.index_at = kHeaderBytes;
  l.tail_at = l.index_at + 4 * size_t(h.nblocks);
  l.tail_bytes = size_t(h.n % l.esize);
  l.payload_at = round_up4(l.tail_at + l.tail_bytes);
  return l;
}

uint32_t block_count(uint64_t nelem, int block_log2) {
  return uint32_t((nelem + (uint64_t(1) << block_log2) - 1) >> block_log2);
}

Status write_raw(const uint8_t* src, size_t n, uint8_t* dst, size_t cap, size_t* out) {
  if (cap < kHeaderBytes + n) return Status::kDstTooSmall;
  write_header(dst, {kFrameRaw, kTypeNone, 0, n, 0, 0});
  if (n) std::memcpy(dst + kHeaderBytes, src, n);
  *out = kHeaderBytes + n;
  return Status::kOk;
}

// True if src is one element of esize bytes repeated (n a multiple of esize).
bool is_repeated(const uint8_t* src, size_t n, size_t esize) {
  return n && n % esize == 0 && repeats(src, n, esize);
}

Status write_const(const uint8_t* src, size_t n, uint8_t type, uint8_t* dst, size_t cap, size_t* out) {
  const size_t esize = type_elem_size(type);
  if (cap < kHeaderBytes + esize) return Status::kDstTooSmall;
  write_header(dst, {kFrameConst, type, 0, n, 0, 0});
  std::memcpy(dst + kHeaderBytes, src, esize);
  *out = kHeaderBytes + esize;
  return Status::kOk;
}

// Encodes blocks [b0, b1) contiguously at dst (cap bytes); sizes[b] receives each block's size.
// Returns total bytes or SIZE_MAX if they did not fit.
size_t encode_blocks(const Kernels& k, const uint8_t* src, const Layout& l, uint8_t type, int lanes,
                     uint32_t b0, uint32_t b1, uint8_t* dst, size_t cap, uint8_t* sizes) {
  size_t pos = 0;
  for (uint32_t b = b0; b < b1; ++b) {
    const uint64_t first = uint64_t(b) * l.block_elems;
    const uint32_t m = uint32_t(std::min<uint64_t>(l.block_elems, l.nelem - first));
    // The next block's input, and as many output bytes as this block's input (its size when
    // compressed ~1.5x, plus the start of the next block's).
    Ahead ahead;
    if (b + 1 < b1) {
      ahead.p = src + (first + m) * l.esize;
      ahead.end = ahead.p + size_t(std::min<uint64_t>(l.block_elems, l.nelem - first - m)) * l.esize;
    }
    ahead.w = dst + pos;
    ahead.wend = dst + std::min(cap, pos + size_t(m) * l.esize);
    const size_t bytes = encode_block(k, src + first * l.esize, m, type, lanes, dst + pos, cap - pos, &ahead);
    if (!bytes) return SIZE_MAX;
    store_le32(sizes + 4 * size_t(b), uint32_t(bytes));
    pos += bytes;
  }
  return pos;
}

bool decode_blocks(const Kernels& k, const uint8_t* frame, const uint8_t* frame_end, const Layout& l,
                   uint8_t type, int lanes, uint32_t b0, uint32_t b1, uint8_t* dst, bool stream_out) {
  const uint8_t* index = frame + l.index_at;
  const uint8_t* payload = frame + l.payload_at;
  bool ok = true;
  for (uint32_t b = b0; ok && b < b1; ++b) {
    const uint32_t begin = b ? load_le32(index + 4 * (b - 1)) : 0;
    const uint32_t end = load_le32(index + 4 * b);
    const uint64_t first = uint64_t(b) * l.block_elems;
    const uint32_t m = uint32_t(std::min<uint64_t>(l.block_elems, l.nelem - first));
    // The next block's bytes (the output needs none: streaming stores, or caches that hold it).
    Ahead ahead;
    if (b + 1 < b1) ahead.p = payload + end, ahead.end = payload + load_le32(index + 4 * (b + 1));
    ok = decode_block(k, payload + begin, end - begin, m, type, lanes, frame_end, dst + first * l.esize,
                      stream_out, &ahead);
  }
  // Orders the streaming stores (kernels.h merge16_stream, x86-64 only) before whatever follows,
  // the partial output of a malformed frame included.
#if defined(__x86_64__)
  if (stream_out && k.merge16_stream) _mm_sfence();
#endif
  return ok;
}

// Runs fn(t, b0, b1) over `threads` contiguous block ranges, on the calling thread too.
template <class Fn>
void for_block_ranges(uint32_t nblocks, int threads, Fn fn) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(fn, t, uint32_t(uint64_t(nblocks) * t / threads),
                      uint32_t(uint64_t(nblocks) * (t + 1) / threads));
  }
  fn(0, 0u, uint32_t(uint64_t(nblocks) / threads));
  for (auto& th : pool) th.join();
}

}  // namespace

size_t max_encoded_size(size_t n) {
  // Coded frames: header, 4-byte index entry per block, tail + padding (< 8), and per block at most
  // block_bound() = raw bytes + 4 + 3 per plane. The smallest blocks (2^10 elements of 2 bytes)
  // give the most blocks: 4 + 4 + 2*3 + 4 (index) = 18 <= 20 bytes of overhead per 2 KiB.
  return kHeaderBytes + 8 + n + 20 * (n / 2048 + 1);
}

Status encode(const void* src_v, size_t n, void* dst_v, size_t cap, size_t* out, const EncodeOptions& opt) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  uint8_t* dst = static_cast<uint8_t*>(dst_v);
  if (!out || (n && !src) || (cap && !dst)) return Status::kInvalidArgument;
  if (opt.threads < 1 || (opt.block_log2 && (opt.block_log2 < kMinBlockLog2 || opt.block_log2 > kMaxBlockLog2)))
    return Status::kInvalidArgument;
  if (uint64_t(n) > kMaxFrameInput) return Status::kTooLarge;

  ElemType t = opt.type;
  if (t == ElemType::kAuto) t = detect_elem_type(src, n);
  if (t != ElemType::kNone && t != ElemType::kBf16 && t != ElemType::kFp16 && t != ElemType::kFp32)
    return Status::kInvalidArgument;
  const uint8_t type = static_cast<uint8_t>(t);
  const size_t esize = type_elem_size(type);

  if (is_repeated(src, n, esize)) return write_const(src, n, type, dst, cap, out);
  if (type == kTypeNone || n < esize) return write_raw(src, n, dst, cap, out);

  // Default blocks of 16384 elements (FORMAT.md section 6): against 8192, paired on one core, 64 MiB
  // Gaussian bf16 encoded 2-5% and decoded 2-4% faster (half the per-block code building and table
  // setup) at ratio 1.5041x instead of 1.4975x; fp16 +22% / +14%, fp32 with zero low halves +14% / +2%,
  // fp32 -1% / +2%. The CUDA encoder keeps 8192 (codec_cuda.h gpu::kDefaultBlockLog2: shared memory).
  Header h{kFrameCoded, type, uint8_t(opt.block_log2 ? opt.block_log2 : kDefaultBlockLog2),
           n,           0,    uint8_t(kDefaultLanesLog2)};
  const int lanes = 1 << h.lanes_log2;
  const Layout probe = coded_layout(h);
  h.nblocks = block_count(probe.nelem, h.block_log2);
  const Layout l = coded_layout(h);
  const size_t raw_frame = kHeaderBytes + n;
  const Kernels& k = select_kernels(opt.force_scalar ? Isa::kScalar : opt.isa);

  if (cap >= l.payload_at + 4) {
    uint8_t* index = dst + l.index_at;
    uint8_t* payload = dst + l.payload_at;
    const size_t room = cap - l.payload_at;
    // Block sizes go to the index first, then become end offsets in place.
    size_t total = SIZE_MAX;
    const int threads = int(std::min<uint64_t>(opt.threads, h.nblocks / 2 ? h.nblocks / 2 : 1));
    const size_t full_block = block_bound(l.block_elems, type_planes(type));
    if (threads > 1 && room >= size_t(h.nblocks) * full_block) {
      // Each thread writes its range at the range's worst-case offset; then the ranges are moved
      // down to be contiguous (in order, so no range overwrites one not yet moved).
      std::vector<size_t> used(threads), start(threads);
      for_block_ranges(h.nblocks, threads, [&](int ti, uint32_t b0, uint32_t b1) {
        start[ti] = size_t(b0) * full_block;
        used[ti] = encode_blocks(k, src, l, type, lanes, b0, b1, payload + start[ti], size_t(b1 - b0) * full_block, index);
      });
      total = 0;
      for (int ti = 0; ti < threads; ++ti) {
        if (used[ti] == SIZE_MAX) {
          total = SIZE_MAX;
          break;
        }
        std::memmove(payload + total, payload + start[ti], used[ti]);
        total += used[ti];
      }
    } else {
      total = encode_blocks(k, src, l, type, lanes, 0, h.nblocks, payload, room, index);
    }
    if (total != SIZE_MAX && l.payload_at + total < raw_frame && total <= 0xFFFFFFFFu) {
      uint32_t end = 0;
      for (uint32_t b = 0; b < h.nblocks; ++b) {
        end += load_le32(index + 4 * size_t(b));
        store_le32(index + 4 * size_t(b), end);
      }
      std::memcpy(dst + l.tail_at, src + l.nelem * l.esize, l.tail_bytes);
      std::memset(dst + l.tail_at + l.tail_bytes, 0, l.payload_at - l.tail_at - l.tail_bytes);
      write_header(dst, h);
      *out = l.payload_at + total;
      return Status::kOk;
    }
  }
  return write_raw(src, n, dst, cap, out);
}

Status read_frame_info(const void* src_v, size_t size, FrameInfo* info) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  if (!info || (size && !src)) return Status::kInvalidArgument;
  if (size < 4) return Status::kTruncated;
  if (load_le32(src) != kMagic) return Status::kBadMagic;
  if (size < kHeaderBytes) return Status::kTruncated;
  if (src[4] != kVersion) return Status::kBadVersion;
  Header h{src[5], src[6], src[7], load_le64(src + 8), load_le32(src + 16), src[20]};
  if (load_le32(src + 20) >> 8 || h.type > kTypeFp32 || h.n > kMaxFrameInput) return Status::kCorrupt;
  info->kind = static_cast<FrameKind>(h.kind);
  info->type = static_cast<ElemType>(h.type);
  info->original_size = h.n;
  info->num_blocks = 0;
  info->block_elems = 0;
  switch (h.kind) {
    case kFrameRaw:
      if (h.type != kTypeNone || h.block_log2 || h.nblocks || h.lanes_log2) return Status::kCorrupt;
      info->frame_size = kHeaderBytes + h.n;
      break;
    case kFrameConst: {
      const size_t esize = type_elem_size(h.type);
      if (h.block_log2 || h.nblocks || h.lanes_log2 || h.n == 0 || h.n % esize) return Status::kCorrupt;
      info->frame_size = kHeaderBytes + esize;
      break;
    }
    case kFrameCoded: {
      if (h.type == kTypeNone || h.block_log2 < kMinBlockLog2 || h.block_log2 > kMaxBlockLog2 ||
          h.lanes_log2 > kMaxLanesLog2)
        return Status::kCorrupt;
      const uint64_t nelem = h.n / type_elem_size(h.type);
      if (nelem == 0 || h.nblocks != block_count(nelem, h.block_log2)) return Status::kCorrupt;
      const Layout l = coded_layout(h);
      if (size < l.payload_at) return Status::kTruncated;
      const uint32_t payload = load_le32(src + l.index_at + 4 * (size_t(h.nblocks) - 1));
      info->frame_size = l.payload_at + uint64_t(payload);
      info->num_blocks = h.nblocks;
      info->block_elems = l.block_elems;
      break;
    }
    default:
      return Status::kCorrupt;
  }
  return Status::kOk;
}

Status decode(const void* src_v, size_t size, void* dst_v, size_t cap, size_t* out, const DecodeOptions& opt) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  uint8_t* dst = static_cast<uint8_t*>(dst_v);
  if (!out || (cap && !dst) || opt.threads < 1) return Status::kInvalidArgument;
  FrameInfo info;
  const Status st = read_frame_info(src, size, &info);
  if (st != Status::kOk) return st;
  if (info.frame_size > size) return Status::kTruncated;
  if (info.frame_size < size) return Status::kCorrupt;
  if (info.original_size > cap) return Status::kDstTooSmall;
  const size_t n = size_t(info.original_size);
  const uint8_t type = static_cast<uint8_t>(info.type);
  if (info.kind == FrameKind::kRaw) {
    if (n) std::memcpy(dst, src + kHeaderBytes, n);
  } else if (info.kind == FrameKind::kConst) {
    const size_t esize = type_elem_size(type);
    std::memcpy(dst, src + kHeaderBytes, esize);
    for (size_t filled = esize; filled < n; filled *= 2) std::memcpy(dst + filled, dst, std::min(filled, n - filled));
  } else {
    Header h{src[5], type, src[7], n, info.num_blocks, src[20]};
    const int lanes = 1 << h.lanes_log2;
    const uint8_t* frame_end = src + size;
    const Layout l = coded_layout(h);
    // Offsets: non-decreasing multiples of 4, each block at least 4 bytes (validated before any
    // block is decoded, so threads only see sane ranges). Tail padding must be zero.
    uint32_t prev = 0;
    for (uint32_t b = 0; b < h.nblocks; ++b) {
      const uint32_t end = load_le32(src + l.index_at + 4 * size_t(b));
      if ((end & 3) || end < prev + 4) return Status::kCorrupt;
      prev = end;
    }
    for (size_t i = l.tail_at + l.tail_bytes; i < l.payload_at; ++i) {
      if (src[i]) return Status::kCorrupt;
    }
    const Kernels& k = select_kernels(opt.force_scalar ? Isa::kScalar : opt.isa);
    // Outputs far beyond the caches (L2 is 1-2 MiB a core; a large L3 holds tens of MiB) are
    // written with streaming stores: no read for ownership of lines that would be evicted anyway.
    const bool stream_out = h.n >= kStreamOutBytes || opt.stream_out;
    const int threads = int(std::min<uint64_t>(opt.threads, h.nblocks));
    if (threads == 1) {
      if (!decode_blocks(k, src, frame_end, l, type, lanes, 0, h.nblocks, dst, stream_out)) return Status::kCorrupt;
    } else {
      std::vector<char> ok(threads, 1);
      for_block_ranges(h.nblocks, threads, [&](int ti, uint32_t b0, uint32_t b1) {
        ok[ti] = decode_blocks(k, src, frame_end, l, type, lanes, b0, b1, dst, stream_out);
      });
      for (char o : ok) {
        if (!o) return Status::kCorrupt;
      }
    }
    std::memcpy(dst + l.nelem * l.esize, src + l.tail_at, l.tail_bytes);
  }
  *out = n;
  return Status::kOk;
}

}  // namespace codec
}  // namespace zipccl
