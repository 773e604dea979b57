// Writes a seed corpus of valid frames for fuzz_decode: every frame kind (RAW, CONST, CODED), element
// type and plane mode (RAW, CONST, HUFF, SPARSE) at every block size, from synthetic inputs and, when
// DATA_DIR holds them, from slices of real bf16 training tensors (*.bf16), whose Huffman tables and
// block layouts are those the decoder meets in training. Frames stay under 64 KiB so that libFuzzer's
// max_len (the largest seed) keeps mutations cheap.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"

using namespace zipccl;

namespace {

class SeedWriter {
 public:
  explicit SeedWriter(std::string dir) : dir_(std::move(dir)) {}

  // Encodes in as type t with blocks of 2^block_log2 elements and writes the frame.
  bool write(const std::vector<uint8_t>& in, codec::ElemType t, int block_log2) {
    codec::EncodeOptions o;
    o.type = t;
    o.block_log2 = block_log2;
    std::vector<uint8_t> f(codec::max_encoded_size(in.size()));
    size_t size = 0;
    if (codec::encode(in.data(), in.size(), f.data(), f.size(), &size, o) != codec::Status::kOk) return false;
    const std::string path = dir_ + "/seed" + std::to_string(count_++);
    FILE* fp = std::fopen(path.c_str(), "wb");
    if (!fp) return false;
    const bool ok = std::fwrite(f.data(), 1, size, fp) == size;
    return std::fclose(fp) == 0 && ok;
  }
  int count() const { return count_; }

 private:
  std::string dir_;
  int count_ = 0;
};

// `len` bytes at `offset` of a file (fewer at its end); empty when it cannot be read.
std::vector<uint8_t> read_slice(const std::string& path, long offset, size_t len) {
  std::vector<uint8_t> v(len);
  FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return {};
  if (std::fseek(fp, offset, SEEK_SET) != 0) v.clear();
  v.resize(std::fread(v.data(), 1, v.size(), fp));
  std::fclose(fp);
  return v;
}

// The real tensors of data_dir, sorted by name (the corpus is the same on every machine that has
// them); none when the directory is absent.
std::vector<std::string> real_tensors(const std::string& data_dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".bf16") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR [DATA_DIR]\n");
    return 2;
  }
  SeedWriter seeds(argv[1]);
  const codec::ElemType types[] = {codec::ElemType::kAuto, codec::ElemType::kBf16, codec::ElemType::kFp16,
                                   codec::ElemType::kFp32};

  // Synthetic: every type and plane mode, including the special values (NaN, Inf, denormals), RAW
  // (random bytes), CONST (zeros), SPARSE (fp32 with rare low halves; bf16 with rare zeros) planes,
  // sizes with a partial last block and a stray tail byte.
  const std::vector<uint8_t> synthetic[] = {testing::gaussian_bf16(3000, 1.0, 1),
                                            testing::special_bf16(1500, 2),
                                            testing::gaussian_fp16(2049, 1.0, 3),
                                            testing::gaussian_fp32(1100, 1.0, 4, true),
                                            testing::gaussian_fp32(900, 1.0, 5, false),
                                            testing::random_bytes(777, 6),
                                            std::vector<uint8_t>(256, 0),
                                            testing::gaussian_bf16(20000, 1e-3, 7),
                                            testing::sparse_low16_fp32(1500, 1.0, 8, 10.0),
                                            testing::sparse_low16_fp32(5000, 1.0, 9, 1.0),
                                            testing::sprinkled_bf16(4097, 1e-2, 10, 2.0),
                                            testing::prescreen_blind_bf16(9000, 0x41, true),
                                            testing::prescreen_blind_bf16(9000, 0x41, true, 0),
                                            std::vector<uint8_t>(5001, 0x3C)};
  for (const auto& in : synthetic) {
    for (codec::ElemType t : types) {
      for (int bl : {10, 13}) {
        if (!seeds.write(in, t, bl)) return 1;
      }
    }
  }

  // Real tensors: slices from the start, the middle and the end of each file (a gradient bucket
  // concatenates tensors of different scales), odd sizes for partial blocks and a stray byte, coded
  // as bf16 and auto at every block size, and reinterpreted as fp16 and fp32 (other plane splits
  // over the same bytes).
  const std::string data_dir = argc == 3 ? argv[2] : "";
  const std::vector<std::string> files =
      data_dir.empty() ? std::vector<std::string>() : real_tensors(data_dir);
  if (!data_dir.empty() && files.empty()) {
    std::printf("fuzz_seeds: no *.bf16 in %s; synthetic seeds only\n", data_dir.c_str());
  }
  const size_t slice_bytes[] = {1030, 6002, 24575, 65536};
  for (size_t f = 0; f < files.size(); ++f) {
    std::error_code ec;
    const long file_size = long(std::filesystem::file_size(files[f], ec));
    if (ec) return 1;
    for (int i = 0; i < 3; ++i) {
      const size_t len = slice_bytes[(f + i) % 4] + size_t(i == 2);
      if (file_size < long(len)) continue;
      const long offset = (i == 0 ? 0 : i == 1 ? file_size / 2 : file_size - long(len)) & ~1L;
      const std::vector<uint8_t> in = read_slice(files[f], offset, len);
      if (in.size() != len) return 1;
      for (int bl = 10; bl <= 14; ++bl) {
        if (!seeds.write(in, codec::ElemType::kBf16, bl) || !seeds.write(in, codec::ElemType::kAuto, bl))
          return 1;
      }
      for (int bl : {10, 12, 14}) {
        if (!seeds.write(in, codec::ElemType::kFp16, bl) || !seeds.write(in, codec::ElemType::kFp32, bl))
          return 1;
      }
    }
  }
  std::printf("fuzz_seeds: wrote %d frames (%zu real tensors) to %s\n", seeds.count(), files.size(), argv[1]);
  return 0;
}
