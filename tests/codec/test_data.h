// Deterministic test inputs for the codec tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace zipccl {
namespace testing {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);  // truncation: any bf16 pattern is as good as another for the codec
}

inline std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

inline std::vector<uint8_t> gaussian_bf16(size_t count, double sigma, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, float(sigma));
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return bytes_of(v.data(), 2 * count);
}

inline std::vector<uint8_t> gaussian_fp32(size_t count, double sigma, uint32_t seed, bool zero_low16) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, float(sigma));
  std::vector<uint32_t> v(count);
  for (auto& x : v) {
    float f = d(rng);
    std::memcpy(&x, &f, 4);
    if (zero_low16) x &= 0xFFFF0000u;
  }
  return bytes_of(v.data(), 4 * count);
}

inline std::vector<uint8_t> gaussian_fp16(size_t count, double sigma, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, float(sigma));
  std::vector<uint16_t> v(count);
  for (auto& x : v) {
    // fp16 by rounding the float's exponent/mantissa (normal range only; enough for tests).
    float f = d(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    int e = int((u >> 23) & 0xFF) - 127 + 15;
    if (e <= 0) {
      x = uint16_t(sign);
    } else if (e >= 31) {
      x = uint16_t(sign | 0x7C00u);
    } else {
      x = uint16_t(sign | (uint32_t(e) << 10) | ((u >> 13) & 0x3FFu));
    }
  }
  return bytes_of(v.data(), 2 * count);
}

// Gaussian fp32 whose low 16 bits are zero except in about `per_mille` of 1000 elements, where
// they are random and non-zero (fp32 gradients of bf16-autocast matmuls): SPARSE planes 2 and 3.
inline std::vector<uint8_t> sparse_low16_fp32(size_t count, double sigma, uint32_t seed, double per_mille) {
  auto v = gaussian_fp32(count, sigma, seed, true);
  std::mt19937_64 rng(seed ^ 0x5A5Au);
  std::uniform_real_distribution<double> u(0.0, 1000.0);
  for (size_t i = 0; i < count; ++i) {
    if (u(rng) >= per_mille) continue;
    const uint64_t r = rng();
    v[4 * i] = uint8_t(1 + r % 255);
    v[4 * i + 1] = uint8_t(1 + (r >> 8) % 255);
  }
  return v;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// bf16 full of the values that break careless codecs: NaNs with payloads, +-Inf, -0, denormals,
// the largest and smallest normals, mixed into Gaussian values.
inline std::vector<uint8_t> special_bf16(size_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const uint16_t specials[] = {0x7FC0, 0xFFC1, 0x7F81, 0xFFFF, 0x7F80, 0xFF80, 0x8000, 0x0000,
                               0x0001, 0x807F, 0x0040, 0x7F7F, 0xFF7F, 0x0080, 0x8080};
  std::vector<uint16_t> v(count);
  for (auto& x : v) {
    x = (rng() % 3 == 0) ? specials[rng() % (sizeof(specials) / 2)] : float_to_bf16(d(rng));
  }
  return bytes_of(v.data(), 2 * count);
}

}  // namespace testing
}  // namespace zipccl
