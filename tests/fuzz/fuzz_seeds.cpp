// Writes a seed corpus of valid frames (every frame kind, type and plane mode) for fuzz_decode.
#include <cstdio>
#include <string>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"

using namespace zipccl;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::vector<uint8_t> inputs[] = {
      testing::gaussian_bf16(3000, 1.0, 1), testing::special_bf16(1500, 2), testing::gaussian_fp16(2049, 1.0, 3),
      testing::gaussian_fp32(1100, 1.0, 4, true), testing::gaussian_fp32(900, 1.0, 5, false),
      testing::random_bytes(777, 6), std::vector<uint8_t>(256, 0), testing::gaussian_bf16(20000, 1e-3, 7),
      testing::sparse_low16_fp32(1500, 1.0, 8, 10.0)};
  const codec::ElemType types[] = {codec::ElemType::kAuto, codec::ElemType::kBf16, codec::ElemType::kFp32};
  int n = 0;
  for (const auto& in : inputs) {
    for (codec::ElemType t : types) {
      for (int bl : {10, 13}) {
        codec::EncodeOptions o;
        o.type = t;
        o.block_log2 = bl;
        std::vector<uint8_t> f(codec::max_encoded_size(in.size()));
        size_t size = 0;
        if (codec::encode(in.data(), in.size(), f.data(), f.size(), &size, o) != codec::Status::kOk) return 1;
        const std::string path = std::string(argv[1]) + "/seed" + std::to_string(n++);
        FILE* fp = std::fopen(path.c_str(), "wb");
        if (!fp || std::fwrite(f.data(), 1, size, fp) != size) return 1;
        std::fclose(fp);
      }
    }
  }
  std::printf("fuzz_seeds: wrote %d frames to %s\n", n, argv[1]);
  return 0;
}
