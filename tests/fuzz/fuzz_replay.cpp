// Runs the fuzz entry point over a corpus made of valid frames and their mutations, so every build
// (not only clang's fuzzer build) exercises it.
#include <gtest/gtest.h>

#include <random>

#include "test_data.h"
#include "zipccl/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace zipccl {
namespace codec {
namespace {

TEST(FuzzReplay, ValidFramesAndMutations) {
  std::mt19937 rng(42);
  const std::vector<uint8_t> inputs[] = {testing::gaussian_bf16(3000, 1.0, 1), testing::special_bf16(2001, 2),
                                         testing::gaussian_fp32(1500, 1.0, 3, true), testing::random_bytes(999, 4),
                                         std::vector<uint8_t>(512, 0), testing::gaussian_fp16(2500, 1.0, 5)};
  for (const auto& in : inputs) {
    std::vector<uint8_t> f(max_encoded_size(in.size()));
    size_t n;
    ASSERT_EQ(encode(in.data(), in.size(), f.data(), f.size(), &n), Status::kOk);
    f.resize(n);
    LLVMFuzzerTestOneInput(f.data(), f.size());
    for (int i = 0; i < 500; ++i) {
      auto g = f;
      const int op = int(rng() % 3);
      if (op == 0) g[rng() % g.size()] = uint8_t(rng());
      if (op == 1) g.resize(rng() % g.size());
      if (op == 2) g.insert(g.begin() + long(rng() % g.size()), uint8_t(rng()));
      LLVMFuzzerTestOneInput(g.data(), g.size());
    }
  }
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
