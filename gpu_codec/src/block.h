// One block of a coded frame (FORMAT.md "Blocks"): encode and decode, independent of any other
// block so that blocks run in parallel on CPU threads and CUDA thread blocks alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace zipccl {
namespace codec {

// Whether p[i] == p[i - step] for every i in [step, n), i.e. the n bytes repeat their first step
// bytes: the bytes against themselves one step on, one memcmp (which stops at the first difference;
// a byte loop encoded an all-zero 64 MiB buffer at 1.2 GB/s).
inline bool repeats(const uint8_t* p, size_t n, size_t step) {
  return n <= step || std::memcmp(p + step, p, n - step) == 0;
}

// Encodes m elements of `type` (fmt::kType*) from src into dst (at most cap bytes; cap >=
// fmt::block_bound(m, planes) always suffices). Returns the block's size (a multiple of 4), or 0
// when it does not fit in cap. ahead: lines to prefetch meanwhile (kernels.h), or nullptr.
size_t encode_block(const Kernels& k, const uint8_t* src, uint32_t m, uint8_t type, int lanes, uint8_t* dst,
                    size_t cap, Ahead* ahead = nullptr);

// Decodes a block of exactly `size` bytes holding m elements of `type` into dst (m * elem size
// bytes). Bytes up to readable_end (the frame's end) may be read. Returns false if the block is
// malformed; dst may then hold partial output. stream_out: write 16-bit outputs with streaming
// stores where the kernel set has them (outputs much larger than the caches).
bool decode_block(const Kernels& k, const uint8_t* blk, size_t size, uint32_t m, uint8_t type, int lanes,
                  const uint8_t* readable_end, uint8_t* dst, bool stream_out = false, Ahead* ahead = nullptr);

}  // namespace codec
}  // namespace zipccl
