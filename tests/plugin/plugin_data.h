// Deterministic test data of every kind the plugin sees: bf16/fp16/fp32 training-like tensors, fp32
// with bf16-autocast low halves, constant, zeros, random bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace zipccl_test {

enum class DataKind { kBf16Gauss, kFp16Gauss, kFp32Gauss, kFp32Autocast, kZeros, kConstant, kRandom, kCount };

inline const char* kind_name(DataKind k) {
  static const char* kNames[] = {"bf16", "fp16", "fp32", "fp32_autocast", "zeros", "constant", "random"};
  return kNames[static_cast<int>(k)];
}

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

inline uint16_t to_fp16(float f) {
  // Good enough for test data: normal range only, truncating mantissa.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7bff);
  return static_cast<uint16_t>(sign | (exp << 10) | ((u >> 13) & 0x3ff));
}

inline std::vector<uint8_t> make_data(DataKind kind, size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(kind));
  // Fast approximate N(0,1): sum of four 16-bit uniforms (Irwin-Hall), plenty for test data.
  uint64_t state = rng() | 1;
  auto gauss = [&state](std::mt19937_64&) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    float s = static_cast<float>((state & 0xffff) + ((state >> 16) & 0xffff) + ((state >> 32) & 0xffff) +
                                 (state >> 48));
    return (s / 65536.0f - 2.0f) * 1.7320508f;
  };
  float scale = std::ldexp(1.0f, -10 + static_cast<int>(seed % 8));
  size_t i = 0;
  switch (kind) {
    case DataKind::kBf16Gauss:
      for (; i + 2 <= n; i += 2) {
        uint16_t v = to_bf16(gauss(rng) * scale);
        std::memcpy(&out[i], &v, 2);
      }
      break;
    case DataKind::kFp16Gauss:
      for (; i + 2 <= n; i += 2) {
        uint16_t v = to_fp16(gauss(rng) * 0.05f);
        std::memcpy(&out[i], &v, 2);
      }
      break;
    case DataKind::kFp32Gauss:
      for (; i + 4 <= n; i += 4) {
        float v = gauss(rng) * scale;
        std::memcpy(&out[i], &v, 4);
      }
      break;
    case DataKind::kFp32Autocast:
      for (; i + 4 <= n; i += 4) {
        uint32_t v = static_cast<uint32_t>(to_bf16(gauss(rng) * scale)) << 16;
        std::memcpy(&out[i], &v, 4);
      }
      break;
    case DataKind::kZeros:
      i = n;
      break;
    case DataKind::kConstant:
      for (; i < n; ++i) out[i] = static_cast<uint8_t>(0x3c + (i & 1));
      break;
    case DataKind::kRandom:
    case DataKind::kCount:
      break;
  }
  for (; i < n; ++i) out[i] = static_cast<uint8_t>(rng());  // tails and random bytes
  return out;
}

}  // namespace zipccl_test
