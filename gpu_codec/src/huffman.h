// Length-limited canonical Huffman codes for one plane of one block (FORMAT.md "Huffman plane").
#pragma once

#include <cstddef>
#include <cstdint>

#include "format.h"

namespace zipccl {
namespace codec {

// A code over the alphabet [lo, lo + nsym). len[i] is the length of symbol lo + i (0 = absent).
struct HuffCode {
  uint32_t lo = 0;
  uint32_t nsym = 0;
  uint8_t len[256];
  // Encoder tables indexed by the symbol value itself (not by i).
  uint16_t code_of[256];
  uint8_t len_of[256];
};

// Builds the length-limited (fmt::kMaxCodeLen) complete prefix code for histogram `freq` (256
// counts). Requires at least two symbols with non-zero counts. Returns the coded size in bits
// of the symbols (sum of freq * length), excluding descriptor and stream padding.
uint64_t build_huffman(const uint32_t* freq, HuffCode* code);

// Decoder tables for one code, indexed by the next 11 bits of a lane (MSB first).
// single[w] = length << 8 | symbol. pair[w] = bits used (bits 0-5) | symbols (1 or 2, bits 8-9) |
// first symbol << 16 | second symbol << 24: two codes whenever both fit in the 11-bit window.
struct DecodeTable {
  alignas(64) uint32_t pair[fmt::kTableSize];
  uint16_t single[fmt::kTableSize + 2];  // + padding for 4-byte loads at the last index
};

// Descriptor bytes (lo, nsym-1, nibbles) without the lane lengths.
size_t write_huff_desc(const HuffCode& code, uint8_t* out);

// Parses and validates a descriptor (lo, nsym-1, nibbles) and builds its decode tables. Returns the
// bytes consumed, or 0 when the descriptor is invalid or does not fit in `avail` bytes.
size_t read_huff_desc(const uint8_t* in, size_t avail, uint32_t* lo, uint32_t* nsym, DecodeTable* table);

}  // namespace codec
}  // namespace zipccl
