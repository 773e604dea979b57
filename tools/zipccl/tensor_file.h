// Readers for the tensor files `zipccl bench` takes: raw bytes, NumPy .npy and .safetensors.
//
// The readers are for untrusted files: every length, offset and shape is checked against the file
// size, and a malformed file is an error with a message that says what is wrong, never a crash.
// Data is not copied: views point into the caller's buffer (or into TensorFile::contents).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

struct TensorView {
  std::string name;
  std::string dtype;  // as the file spells it: "<f2", "<V2", "BF16", "raw", ...
  // bf16, fp16 or fp32 when the dtype says so; kNone otherwise (the caller may supply a type).
  codec::ElemType type = codec::ElemType::kNone;
  std::vector<uint64_t> shape;
  const uint8_t* data = nullptr;
  size_t size = 0;  // bytes
};

// Parses a whole .npy file (format versions 1.0, 2.0, 3.0) held in memory. dtypes: '<f2' -> fp16,
// '<f4' -> fp32, '<V2' / '|V2' / 'bfloat16' -> bf16 (ml_dtypes saves bfloat16 as a 2-byte void);
// other little-endian or byte-sized dtypes parse with type kNone. Big-endian multi-byte data and
// structured dtypes are rejected, and so are files whose length disagrees with the header's shape.
bool parse_npy(const uint8_t* file, size_t size, TensorView* out, std::string* error);

// Parses a whole .safetensors file held in memory: an 8-byte little-endian header length, a JSON
// header, the data. dtypes BF16, F16, F32 map to element types; other dtypes parse with type kNone.
// Tensors come back in data order (the order a gradient bucket would hold them). Offsets outside
// the data, overlapping tensors and sizes that disagree with shape and dtype are rejected.
bool parse_safetensors(const uint8_t* file, size_t size, std::vector<TensorView>* out, std::string* error);

enum class TensorFormat { kRaw, kNpy, kSafetensors };

// By file name extension: ".npy", ".safetensors"; anything else is raw.
TensorFormat format_from_path(const std::string& path);

bool read_whole_file(const std::string& path, std::vector<uint8_t>* out, std::string* error);

// A file read into memory with views of its tensors. Movable (views stay valid), not copyable.
struct TensorFile {
  TensorFormat format = TensorFormat::kRaw;
  std::vector<uint8_t> contents;
  std::vector<TensorView> tensors;

  TensorFile() = default;
  TensorFile(TensorFile&&) = default;
  TensorFile& operator=(TensorFile&&) = default;
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;
};

// Reads and parses a file by its extension. A raw file is one tensor of dtype "raw", type kNone,
// named after the file.
bool load_tensor_file(const std::string& path, TensorFile* out, std::string* error);

}  // namespace tools
}  // namespace zipccl
