// Deterministic test inputs for the codec tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace zipccl {
namespace testing {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);  // truncation: any bf16 pattern is as good as another for the codec
}

inline uint16_t float_to_fp16(float f) {  // normal range, overflow to Inf, underflow to +-0
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  if ((u & 0x7F800000u) == 0x7F800000u) return uint16_t(sign | 0x7C00u | ((u & 0x7FFFFFu) ? 0x200u : 0));
  const int e = int((u >> 23) & 0xFF) - 127 + 15;
  if (e <= 0) return uint16_t(sign);
  if (e >= 31) return uint16_t(sign | 0x7C00u);
  return uint16_t(sign | (uint32_t(e) << 10) | ((u >> 13) & 0x3FFu));
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
  for (auto& x : v) x = float_to_fp16(d(rng));  // normal range only: enough for tests
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

// bf16 whose plane `plane` (FORMAT.md section 3: 0 the exponent, 1 sign+mantissa) is the pre-screen's
// blind spot (encoder_policy.h): element i carries byte (i / 32) mod 256 there when i is a multiple
// of 32 (the pre-screen's samples: all different within a block of 8192), `fill` elsewhere (so the
// screen's every-8th-byte sample sees three quarters equal). The other plane is 0x3F throughout. With
// distinct = false every element carries `fill`.
inline std::vector<uint8_t> prescreen_blind_bf16(size_t count, uint8_t fill, bool distinct, int plane = 1) {
  std::vector<uint16_t> v(count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t b = distinct && i % 32 == 0 ? uint8_t(i / 32) : fill;
    const uint8_t p0 = plane == 0 ? b : 0x3F, p1 = plane == 0 ? 0x3F : b;
    v[i] = uint16_t((p1 & 0x80) << 8 | p0 << 7 | (p1 & 0x7F));
  }
  return bytes_of(v.data(), 2 * count);
}

// Gaussian bf16 with a few exact zeros and denormals sprinkled in (per_mille of the elements; dropout
// and masked positions in real gradients): the exponent plane's range then starts at 0x00, far
// below its dense core (encoder_policy.h sample_core).
inline std::vector<uint8_t> sprinkled_bf16(size_t count, double sigma, uint32_t seed, double per_mille) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, float(sigma));
  std::uniform_real_distribution<double> u(0.0, 1000.0);
  std::vector<uint16_t> v(count);
  for (auto& x : v) {
    const double r = u(rng);
    x = r < per_mille / 2 ? 0 : r < per_mille ? uint16_t(1 + rng() % 0x7F) : float_to_bf16(d(rng));
  }
  return bytes_of(v.data(), 2 * count);
}

// A message of random shape, for properties that must hold on any input (frames equal across
// kernel sets and between the CPU and GPU encoders): element kind (0 bf16, 1 fp16, 2 fp32), length
// log-uniform over 1..40000 elements (plus a stray tail byte now and then), scale log-uniform over
// 1e-6..1e3, Gaussian, heavy-tailed or changing scale at a random point, fp32 with zero low halves
// now and then, and a few lone outliers (huge, tiny, denormal, NaN with a payload, Inf, -0) at
// random places, the last element often among them: the rare values a sampled screen can miss.
struct Shape {
  std::vector<uint8_t> bytes;
  int kind;  // 0 bf16, 1 fp16, 2 fp32
};
inline Shape random_shape(uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  Shape s;
  s.kind = int(rng() % 3);
  // A third of the lengths sit just below a multiple of 512 elements: the AVX-512 sample screen's
  // step, where its last samples are gathered one by one.
  const size_t count = rng() % 3 == 0 ? 512 * (1 + rng() % 78) - (1 + rng() % 8)
                                      : size_t(std::exp(u01(rng) * std::log(40000.0))) + (rng() % 2);
  const double sigma = std::pow(10.0, -6.0 + 9.0 * u01(rng));
  const int dist = int(rng() % 3);
  const size_t change_at = count ? size_t(rng() % count) : 0;
  const double change = std::pow(10.0, -2.0 + 4.0 * u01(rng));
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    double x = g(rng) * sigma;
    if (dist == 1) x /= std::sqrt(0.01 + u01(rng));  // heavier tails
    if (dist == 2 && i >= change_at) x *= change;
    v[i] = float(x);
  }
  const float outliers[] = {1e30f,
                            -3e-30f,
                            1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -0.0f,
                            float(sigma * 1e5),
                            float(-sigma * 1e-5),
                            float(sigma * 300)};
  constexpr size_t kOutliers = sizeof(outliers) / sizeof(float);
  const int k = count ? int(rng() % 4) : 0;
  for (int j = 0; j < k; ++j) v[rng() % count] = outliers[rng() % kOutliers];
  // Often one at the last element, or at the last one a stride-8 sample sees.
  if (count && rng() % 2) v[rng() % 2 ? count - 1 : (count - 1) / 8 * 8] = outliers[rng() % kOutliers];
  const bool zero_low16 = s.kind == 2 && rng() % 3 == 0;
  const bool nan = count && rng() % 4 == 0;
  const size_t nan_at = count ? size_t(rng() % count) : 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t w;
    std::memcpy(&w, &v[i], 4);
    if (nan && i == nan_at) w = 0x7FC00000u | uint32_t(0x12345u << 2);  // a payload survives in bf16 too
    if (s.kind == 2) {
      if (zero_low16) w &= 0xFFFF0000u;
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&w);
      s.bytes.insert(s.bytes.end(), b, b + 4);
    } else {
      float f;
      std::memcpy(&f, &w, 4);
      const uint16_t h = s.kind == 0 ? uint16_t(w >> 16) : float_to_fp16(f);
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&h);
      s.bytes.insert(s.bytes.end(), b, b + 2);
    }
  }
  if (rng() % 4 == 0) s.bytes.push_back(uint8_t(rng()));
  return s;
}

}  // namespace testing
}  // namespace zipccl
