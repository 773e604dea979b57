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
// of the symbols (sum of freq * length), excluding descriptor and stream padding. Counts outside
// [lo, hi] must be zero (only that range is scanned: an exponent plane's few dozen values).
uint64_t build_huffman(const uint32_t* freq, HuffCode* code, uint32_t lo = 0, uint32_t hi = 255);

// CPU decoder table for one code, indexed by the next 11 bits of a lane (MSB first), decoding
// two codes per lookup whenever both fit in the window. Byte fields, so that each is one load
// with no shifting or masking.
struct PairEntry {
  uint8_t bits;   // bits used by the entry's codes
  uint8_t count;  // symbols in the entry: 1 or 2
  uint8_t sym[2];
};
// Register tables (kernel sets with byte permutes: AVX-512 VBMI), 512 bytes in all, built in place
// of the pair table when asked for. With b = short_bits (6 or 7) and S = 2^b: entry i < S is the code
// starting with b-bit prefix i, entry S + j the code of 11-bit window 2048 - S + j, so a window w
// decodes as entry[w >= 2048 - S ? S + (w & (S - 1)) : w >> (11 - b)]. That needs every window
// below 2048 - S to start a code of at most b bits (reg_ok). b = 6 whenever the code allows it (codes
// longer than 6 bits weigh at most 1/32: every exponent plane of the benchmark sets and the sample
// tensors), so that each table is 64 bytes, one single-register permute (vpermb: 1 uop, 3 cycles,
// against 2 uops and 5 for the two-register vpermt2b); else b = 7 (fp16's flatter high bytes, now and
// then). When neither fits, the gather table (below) or the pair table is built instead.
struct RegTables {
  alignas(64) uint8_t len[256];
  alignas(64) uint8_t sym[256];
  uint32_t short_bits = 7;
};
// Where the register tables do not fit (kRegGather), the AVX-512 decoder gathers from a single-symbol
// table instead: for every 11-bit window, the 32-bit entry len | symbol << 24 of the code it starts
// with (fmt::build_decode_table's table, the GPU decoder's, in another layout), built in the pair
// table's place (gather[], gather_ok).
struct DecodeTable {
  union {
    alignas(64) PairEntry pair[fmt::kTableSize];
    alignas(64) uint32_t gather[fmt::kTableSize + 16];  // + 16: build_gather_table's last run
  };
  uint8_t len_of[256];  // code length by symbol, [lo, lo + nsym) (pair tables only: a lane's last symbols)
  RegTables reg;
  bool reg_ok = false;
  bool gather_ok = false;
};
// kPair: the pair table. kReg: the register tables, else the pair table. kRegGather: the register
// tables, else the gather table.
enum class TableKind : uint8_t { kPair = 0, kReg = 1, kRegGather = 2 };

// Descriptor bytes (lo, nsym-1, nibbles) without the lane lengths.
size_t write_huff_desc(const HuffCode& code, uint8_t* out);

// Parses and validates a descriptor (lo, nsym-1, nibbles) and builds its decode tables as `kind`
// asks (TableKind: reg_ok, gather_ok, or else the pair table and len_of). Returns the
// bytes consumed, or 0 when the descriptor is invalid or does not fit in `avail` bytes.
size_t read_huff_desc(const uint8_t* in, size_t avail, uint32_t* lo, uint32_t* nsym, DecodeTable* table,
                      TableKind kind = TableKind::kPair);

}  // namespace codec
}  // namespace zipccl
