#include "datasets.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

namespace zipccl {
namespace tools {

using codec::ElemType;

namespace {

constexpr size_t kChunkElems = size_t{1} << 20;
constexpr double kTwoPi = 6.283185307179586476925;

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256**, with our own transforms: std::normal_distribution differs between standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) w = splitmix64(&seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1): never 0, so log() is safe.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double a = kTwoPi * uniform();
    spare_ = r * std::sin(a);
    have_spare_ = true;
    return r * std::cos(a);
  }
  double laplace() {
    const uint64_t bits = next();
    const double mag = -std::log((static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53);
    return (bits & 1) ? -mag : mag;
  }
  double student_t3() {
    const double z = normal();
    const double a = normal(), b = normal(), c = normal();
    return z / std::sqrt((a * a + b * b + c * c) / 3.0);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double spare_ = 0;
  bool have_spare_ = false;
};

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Fills `count` elements of chunk `chunk` at dst with generator rng.
using FillFn = void (*)(uint8_t* dst, size_t count, uint64_t chunk, Rng& rng);

template <int kSigmaExp10>
void fill_gauss_bf16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  const double sigma = std::pow(10.0, kSigmaExp10);
  for (size_t i = 0; i < count; ++i)
    put16(dst + 2 * i, float_to_bf16(static_cast<float>(sigma * rng.normal())));
}

void fill_laplace_bf16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) put16(dst + 2 * i, float_to_bf16(static_cast<float>(rng.laplace())));
}

void fill_student_bf16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) put16(dst + 2 * i, float_to_bf16(static_cast<float>(rng.student_t3())));
}

// A gradient bucket: tensors of different scales back to back. Each 2^20-element chunk has its own
// scale, log-uniform over two decades (1e-4 .. 1e-2), and Student-t(3) tails.
void fill_bucket_bf16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  const double scale = std::pow(10.0, -4.0 + 2.0 * rng.uniform());
  for (size_t i = 0; i < count; ++i) {
    put16(dst + 2 * i, float_to_bf16(static_cast<float>(scale * rng.student_t3())));
  }
}

void fill_gauss_fp16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) put16(dst + 2 * i, float_to_fp16(static_cast<float>(rng.normal())));
}

void fill_gauss_fp32(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) put32(dst + 4 * i, float_bits(static_cast<float>(rng.normal())));
}

// fp32 gradients out of bf16 matrix products: the low 16 bits are zero in over 99% of values.
void fill_grads_fp32(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) {
    const float f = static_cast<float>(1e-3 * rng.normal());
    const bool full = rng.next() % 200 == 0;  // 0.5% keep fp32 precision (fp32 accumulations)
    put32(dst + 4 * i, full ? float_bits(f) : uint32_t{float_to_bf16(f)} << 16);
  }
}

void fill_random(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  size_t bytes = 2 * count, i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(dst + i, &v, 8);
  }
  for (uint64_t v = rng.next(); i < bytes; ++i, v >>= 8) dst[i] = static_cast<uint8_t>(v);
}

void fill_zeros(uint8_t* dst, size_t count, uint64_t, Rng&) {
  std::memset(dst, 0, 2 * count);
}

// 30% NaN (random sign, every payload), 2% +-Inf, 5% denormals, 3% -0, the rest N(0, 1).
void fill_nan_heavy_bf16(uint8_t* dst, size_t count, uint64_t, Rng& rng) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng.next();
    const uint32_t pick = static_cast<uint32_t>(r % 100);
    const uint16_t sign = (r >> 32) & 1 ? 0x8000 : 0;
    const uint16_t mant = static_cast<uint16_t>((r >> 40) & 0x7F);
    uint16_t v;
    if (pick < 30)
      v = sign | 0x7F80 | (mant ? mant : 1);
    else if (pick < 32)
      v = sign | 0x7F80;
    else if (pick < 37)
      v = sign | (mant ? mant : 1);
    else if (pick < 40)
      v = 0x8000;
    else
      v = float_to_bf16(static_cast<float>(rng.normal()));
    put16(dst + 2 * i, v);
  }
}

struct Generator {
  DatasetInfo info;
  FillFn fill;
  uint64_t seed;
};

const std::vector<Generator>& generators() {
  static const std::vector<Generator> kGenerators = {
      {{"gauss-bf16-s1e-3", ElemType::kBf16, "N(0, 1e-3^2) as bf16"}, fill_gauss_bf16<-3>, 101},
      {{"gauss-bf16-s1", ElemType::kBf16, "N(0, 1) as bf16"}, fill_gauss_bf16<0>, 102},
      {{"gauss-bf16-s1e3", ElemType::kBf16, "N(0, 1e3^2) as bf16"}, fill_gauss_bf16<3>, 103},
      {{"laplace-bf16", ElemType::kBf16, "Laplace(0, 1) as bf16"}, fill_laplace_bf16, 104},
      {{"student-t3-bf16", ElemType::kBf16, "Student-t, nu=3, as bf16"}, fill_student_bf16, 105},
      {{"bucket-bf16", ElemType::kBf16,
        "mixed-scale bucket: Student-t(3) x scale, scale log-uniform 1e-4..1e-2, new every 2^20 elems"},
       fill_bucket_bf16,
       106},
      {{"gauss-fp16", ElemType::kFp16, "N(0, 1) as fp16"}, fill_gauss_fp16, 107},
      {{"gauss-fp32", ElemType::kFp32, "N(0, 1) as fp32"}, fill_gauss_fp32, 108},
      {{"grads-fp32-lo16zero", ElemType::kFp32,
        "N(0, 1e-3^2) fp32, 99.5% with low 16 bits zero (bf16-autocast matmul outputs)"},
       fill_grads_fp32,
       109},
      {{"random-bytes", ElemType::kBf16, "uniform random bytes (read as bf16)"}, fill_random, 110},
      {{"zeros", ElemType::kBf16, "all zero (read as bf16)"}, fill_zeros, 111},
      {{"nan-heavy-bf16", ElemType::kBf16, "30% NaN (all payloads), 2% Inf, 5% denormal, 3% -0, rest N(0,1)"},
       fill_nan_heavy_bf16,
       112},
  };
  return kGenerators;
}

}  // namespace

uint16_t float_to_bf16(float f) {
  uint32_t b = float_bits(f);
  if ((b & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7FFF + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

uint16_t float_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a >= 0x7F800000) return sign | 0x7C00 | (a > 0x7F800000 ? 0x200 : 0);
  if (a >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds to infinity
  if (a < 0x38800000) {                       // below 2^-14: a denormal half (or zero)
    if (a < 0x33000000) return sign;          // <= 2^-25 rounds to zero
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  const uint32_t r = (a - (112u << 23) + 0xFFF + ((a >> 13) & 1)) >> 13;
  return sign | static_cast<uint16_t>(r);
}

const std::vector<DatasetInfo>& builtin_datasets() {
  static const std::vector<DatasetInfo> kInfos = [] {
    std::vector<DatasetInfo> v;
    for (const Generator& g : generators()) v.push_back(g.info);
    return v;
  }();
  return kInfos;
}

bool make_dataset(const std::string& name, size_t bytes, std::vector<uint8_t>* out, int threads) {
  const Generator* gen = nullptr;
  for (const Generator& g : generators()) {
    if (name == g.info.name) gen = &g;
  }
  if (!gen) return false;
  const size_t es = codec::elem_size(gen->info.type);
  const size_t elems = bytes / es;
  out->assign(elems * es, 0);
  const size_t chunks = (elems + kChunkElems - 1) / kChunkElems;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(chunks, 1)));

  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) {
      Rng rng(gen->seed * 0x9E3779B97F4A7C15ull + c);
      const size_t first = c * kChunkElems;
      gen->fill(out->data() + first * es, std::min(kChunkElems, elems - first), c, rng);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return true;
}

}  // namespace tools
}  // namespace zipccl
