// Built-in synthetic data sets for `zipccl bench`, generated deterministically (fixed seeds).
//
// Sets are generated in chunks of 2^20 elements, each chunk with its own seeded generator, so the
// bytes do not depend on the thread count; they depend only on the name, the size and libm's
// log/cos (which differ at most in the last bit between C libraries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

struct DatasetInfo {
  const char* name;
  codec::ElemType type;  // the element type the set is made of (random bytes and zeros: bf16)
  const char* what;      // one line: distribution and parameters
};

// Every built-in set, in the order the bench runs them.
const std::vector<DatasetInfo>& builtin_datasets();

// Generates the named set into *out, `bytes` rounded down to whole elements, on `threads` threads
// (0: all hardware threads). Returns false for an unknown name.
bool make_dataset(const std::string& name, size_t bytes, std::vector<uint8_t>* out, int threads = 0);

// Round-to-nearest-even conversions of a float to the 16-bit formats (NaN stays NaN, quiet).
uint16_t float_to_bf16(float f);
uint16_t float_to_fp16(float f);

}  // namespace tools
}  // namespace zipccl
