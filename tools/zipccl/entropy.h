// Order-0 entropy bounds measured on the codec's own plane model.
//
// The codec splits each element into byte planes and codes every plane of every block on its own
// (raw, constant or with the block's own Huffman code). The lossless bound that model can reach is
// therefore the order-0 entropy of each plane, either over the whole buffer (one code for all) or
// per block (a code per block, table cost ignored). Planes, as the codec cuts them:
//   bf16, fp16: plane 0 = bits 14..7 (the exponent symbol), plane 1 = bit 15 -> bit 7, bits 6..0.
//   fp32:       plane 0 = bits 30..23, plane 1 = bit 31 -> bit 7, bits 22..16, plane 2 = bits 15..8,
//               plane 3 = bits 7..0.
//   none:       one plane, the bytes themselves.
// Trailing bytes that do not fill an element count as 8 bits each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

// Entropy in bits per symbol of a 256-bin histogram holding `total` samples (0 when total is 0).
double order0_entropy(const uint64_t* hist256, uint64_t total);

// Entropy in bits per byte of src[0, n).
double byte_entropy(const uint8_t* src, size_t n);

// Number of byte planes of an element of type t: 2 for bf16/fp16, 4 for fp32, 1 for kNone.
// kAuto has no plane model: 0.
int plane_count(codec::ElemType t);

// Writes the plane symbols of one little-endian element (elem_size(t) bytes at src) to sym[0..planes).
void plane_symbols(codec::ElemType t, const uint8_t* src, uint8_t* sym);

struct PlaneEntropy {
  double whole_bits = 0;  // bits per element, one order-0 code over the whole buffer
  double block_bits = 0;  // bits per element, one order-0 code per block, averaged over elements
};

struct EntropyBound {
  codec::ElemType type = codec::ElemType::kNone;
  size_t bytes = 0;        // input size
  size_t elems = 0;        // whole elements
  size_t block_elems = 0;  // elements per block of the per-block bound
  std::vector<PlaneEntropy> planes;
  double whole_ratio = 1;  // input bits / whole-buffer entropy bits
  double block_ratio = 1;  // input bits / per-block entropy bits
};

// Bounds of src[0, n) read as elements of type t (bf16, fp16, fp32 or kNone), with blocks of
// block_elems elements (the last block may be short). A zero-entropy buffer reports infinity.
EntropyBound entropy_bound(const void* src, size_t n, codec::ElemType t, size_t block_elems = 4096);

}  // namespace tools
}  // namespace zipccl
