// SIMD kernels against the scalar reference, kernel by kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"
#include "zipccl/codec.h"
#include "test_data.h"

namespace zipccl {
namespace codec {
namespace {

#if defined(__x86_64__)
// Independent of cpu_features.cpp: the compiler's own cpuid reading.
bool cpu_has_avx2_set() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
}
bool cpu_has_avx512_set() {
  return cpu_has_avx2_set() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
}
#endif

// Every SIMD set this CPU runs (the AVX2 one on an AVX-512 CPU too), each tested against scalar.
// kernels_for checks the CPU before it builds a set, so asking for every one is safe anywhere.
std::vector<const Kernels*> variants() {
  std::vector<const Kernels*> v;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
    if (const Kernels* k = kernels_for(isa)) v.push_back(k);
  }
  return v;
}

TEST(Kernels, SimdPathMatchesThePlatform) {
#if defined(__aarch64__)
  EXPECT_STREQ(simd_path(), "neon");
  EXPECT_EQ(kernels_for(Isa::kAvx512), nullptr);
#elif defined(__x86_64__)
  const char* want = cpu_has_avx512_set() ? "avx512" : cpu_has_avx2_set() ? "avx2" : "scalar";
  EXPECT_STREQ(simd_path(), want);
  EXPECT_EQ(kernels_for(Isa::kAvx512) != nullptr, cpu_has_avx512_set());
  EXPECT_EQ(kernels_for(Isa::kAvx2) != nullptr, cpu_has_avx2_set());
  EXPECT_EQ(kernels_for(Isa::kNeon), nullptr);
#endif
  // The qemu stage (tools/qemu_check.sh) reads this line: the set chosen on an emulated CPU.
  std::printf("kernel set: %s (cpu: %s)\n", simd_path(), cpu_features().c_str());
  EXPECT_STREQ(kernels_for(Isa::kAuto)->name, simd_path());
  EXPECT_STREQ(select_kernels(Isa::kScalar).name, "scalar");
}

TEST(Kernels, EachIsaNamesItsSetOrFallsBackToTheFastest) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    SCOPED_TRACE(isa_name(isa));
    Isa parsed;
    ASSERT_TRUE(parse_isa(isa_name(isa), &parsed));
    EXPECT_EQ(parsed, isa);
    if (isa_supported(isa)) {
      EXPECT_EQ(effective_isa(isa), isa);
      EXPECT_STREQ(select_kernels(isa).name, isa_name(isa));
      EXPECT_EQ(isa_missing(isa), "");
    } else {
      EXPECT_EQ(effective_isa(isa), effective_isa(Isa::kAuto));
      EXPECT_STREQ(select_kernels(isa).name, simd_path());
      EXPECT_NE(isa_missing(isa), "");
    }
  }
  EXPECT_EQ(effective_isa(Isa::kAuto), effective_isa(effective_isa(Isa::kAuto)));
  Isa parsed;
  EXPECT_FALSE(parse_isa("AVX2", &parsed));
  EXPECT_FALSE(parse_isa("", &parsed));
  EXPECT_FALSE(parse_isa(nullptr, &parsed));
#if defined(__x86_64__)
  if (!cpu_has_avx512_set()) {
    EXPECT_NE(isa_missing(Isa::kAvx512).find("avx512"), std::string::npos);
  }
#endif
}

// Whatever set a caller asks for, the frames are the same bytes and decode with every set.
TEST(Kernels, FramesAreTheSameWithEveryIsa) {
  const auto in = testing::random_bytes(3 * 16384 * 2 + 77, 5);
  std::vector<uint16_t> bf16(in.size() / 2);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = uint16_t(0x3C00 | (in[2 * i] & 0x3F) << 1 | (in[2 * i + 1] & 1));
  std::vector<uint8_t> ref;
  for (Isa isa : {Isa::kScalar, Isa::kAuto, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    SCOPED_TRACE(isa_name(isa));
    EncodeOptions eo;
    eo.type = ElemType::kBf16;
    eo.isa = isa;
    std::vector<uint8_t> frame(max_encoded_size(bf16.size() * 2));
    size_t n = 0;
    ASSERT_EQ(encode(bf16.data(), bf16.size() * 2, frame.data(), frame.size(), &n, eo), Status::kOk);
    frame.resize(n);
    if (ref.empty()) ref = frame;
    EXPECT_EQ(frame, ref);
    DecodeOptions dopt;
    dopt.isa = isa;
    std::vector<uint16_t> back(bf16.size());
    size_t m = 0;
    ASSERT_EQ(decode(frame.data(), n, back.data(), back.size() * 2, &m, dopt), Status::kOk);
    EXPECT_EQ(back, bf16);
  }
}

TEST(Kernels, Avx512SetRunsWhereTheCpuHasIt) {
#if defined(__x86_64__)
  if (!cpu_has_avx512_set()) GTEST_SKIP() << "this CPU lacks one of AVX-512 F/BW/VL/DQ/VBMI/VBMI2, BMI2";
  ASSERT_NE(kernels_for(Isa::kAvx512), nullptr);
  EXPECT_STREQ(kernels_for(Isa::kAvx512)->name, "avx512");
  EXPECT_EQ(kernels_for(Isa::kAvx512)->table_kind, TableKind::kRegGather);
#else
  GTEST_SKIP() << "AVX-512 is x86-64 only";
#endif
}

TEST(Kernels, SplitMergeMatchScalar) {
  if (variants().empty()) GTEST_SKIP() << "no SIMD kernels on this CPU/build";
  for (const Kernels* v : variants()) {
  SCOPED_TRACE(v->name);
  const Kernels& s = scalar_kernels();
  auto in = testing::random_bytes(4 * 16384, 1);
  for (uint32_t m : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 63u, 64u, 65u, 127u, 1000u, 4096u, 16384u}) {
    std::vector<uint8_t> a[4], b[4];
    for (int p = 0; p < 4; ++p) a[p].assign(m, 0), b[p].assign(m, 1);
    s.split16(in.data(), m, a[0].data(), a[1].data());
    v->split16(in.data(), m, b[0].data(), b[1].data());
    ASSERT_EQ(a[0], b[0]);
    ASSERT_EQ(a[1], b[1]);
    if (v->split16_range) {  // the same planes, and plane 0's range as minmax finds it
      uint32_t lo = 0, hi = 0, want_lo = 0, want_hi = 0;
      for (int p = 0; p < 2; ++p) b[p].assign(m, 1);
      v->split16_range(in.data(), m, b[0].data(), b[1].data(), &lo, &hi);
      ASSERT_EQ(a[0], b[0]);
      ASSERT_EQ(a[1], b[1]);
      s.minmax(a[0].data(), m, &want_lo, &want_hi);
      ASSERT_EQ(lo, want_lo);
      ASSERT_EQ(hi, want_hi);
      // A narrow plane 0 (bytes 0x7E-0x7F) whose largest byte is the last element's (the tail).
      std::vector<uint8_t> narrow(in.begin(), in.begin() + 2 * m);
      for (uint32_t i = 0; i < m; ++i) narrow[2 * i + 1] = 0x3F;
      narrow[2 * m - 1] = 0x41;
      std::vector<uint8_t> c0(m), c1(m);
      s.split16(narrow.data(), m, c0.data(), c1.data());
      s.minmax(c0.data(), m, &want_lo, &want_hi);
      v->split16_range(narrow.data(), m, b[0].data(), b[1].data(), &lo, &hi);
      ASSERT_EQ(b[0], c0);
      ASSERT_EQ(lo, want_lo);
      ASSERT_EQ(hi, want_hi);
    }
    std::vector<uint8_t> o1(2 * m), o2(2 * m);
    s.merge16(a[0].data(), a[1].data(), m, o1.data());
    v->merge16(a[0].data(), a[1].data(), m, o2.data());
    ASSERT_EQ(o1, o2);
    if (v->merge16_stream) {  // every alignment of dst, nothing written outside it
      for (size_t off = 0; off < 66; off += off < 4 ? 1 : 31) {
        std::vector<uint8_t> big(2 * m + 160, 0xA5);
        v->merge16_stream(a[0].data(), a[1].data(), m, big.data() + off);
        ASSERT_TRUE(std::equal(o1.begin(), o1.end(), big.begin() + off)) << "offset " << off;
        for (size_t i = 0; i < off; ++i) ASSERT_EQ(big[i], 0xA5);
        for (size_t i = off + 2 * m; i < big.size(); ++i) ASSERT_EQ(big[i], 0xA5);
      }
    }
    ASSERT_TRUE(std::equal(o1.begin(), o1.end(), in.begin()));
    uint8_t* pa[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    uint8_t* pb[4] = {b[0].data(), b[1].data(), b[2].data(), b[3].data()};
    s.split32(in.data(), m, pa);
    v->split32(in.data(), m, pb);
    for (int p = 0; p < 4; ++p) ASSERT_EQ(a[p], b[p]);
    std::vector<uint8_t> q1(4 * m), q2(4 * m);
    const uint8_t* ca[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    s.merge32(ca, m, q1.data());
    v->merge32(ca, m, q2.data());
    ASSERT_EQ(q1, q2);
    ASSERT_TRUE(std::equal(q1.begin(), q1.end(), in.begin()));
    uint32_t h1[256], h2[256];
    s.histogram(in.data(), m, h1);
    v->histogram(in.data(), m, h2);
    ASSERT_TRUE(std::equal(h1, h1 + 256, h2));
    // Planes of one value but for 1 in 40, 1 in 17 (about the AVX-512 counter's limit) or 1 in 9
    // bytes, starting with that value or not (its fast path counts against the first byte).
    for (uint32_t every : {40u, 17u, 9u}) {
      for (int first : {0, 1}) {
        std::vector<uint8_t> sparse(m, uint8_t(0x3C));
        for (uint32_t i = uint32_t(first); i < m; i += every) sparse[i] = in[i];
        s.histogram(sparse.data(), m, h1);
        v->histogram(sparse.data(), m, h2);
        ASSERT_TRUE(std::equal(h1, h1 + 256, h2)) << "every " << every << " first " << first;
      }
    }
    for (uint32_t off : {0u, 7u}) {  // narrow ranges too: the random bytes, squeezed into [64, 64 + 15]
      std::vector<uint8_t> narrow(in.begin() + off, in.begin() + off + m);
      for (auto& x : narrow) x = uint8_t(64 + (x & 15));
      for (const auto* bytes : {&in, &narrow}) {
        uint32_t lo1, hi1, lo2, hi2;
        s.minmax(bytes->data() + (bytes == &in ? off : 0), m, &lo1, &hi1);
        v->minmax(bytes->data() + (bytes == &in ? off : 0), m, &lo2, &hi2);
        ASSERT_EQ(lo1, lo2);
        ASSERT_EQ(hi1, hi2);
      }
    }
  }
  }
}

// The screen's sample histogram (every 8th byte): narrow spans (counted by compares in the AVX-512
// set, including 0 and 255 at the edges and the tail masks) and wide ones (the increments), on
// both sides of the 64-value switch, at every length class around the 512-byte packing step.
TEST(Kernels, SampleHistogramMatchesScalar) {
  if (variants().empty()) GTEST_SKIP() << "no SIMD kernels on this CPU/build";
  std::mt19937 rng(5);
  const uint32_t sizes[] = {1,    7,    8,    9,    63,   64,   511,  512,   513,  520,
                            1000, 1024, 2040, 2047, 4095, 8191, 8192, 16383, 16384};
  for (uint32_t m : sizes) {
    for (uint32_t span : {1u, 2u, 20u, 63u, 64u, 65u, 256u}) {
      for (uint32_t base : {0u, 100u, 256u - span}) {
        // mode 1: a narrow first 512 bytes, then the full span (the switch after the first step).
        // mode 2: the last sample alone lies outside the span (a rare exponent at the block's end:
        // the samples after the last 512-byte step must widen the range too).
        for (int mode = 0; mode < 3; ++mode) {
          std::vector<uint8_t> in(m);
          for (uint32_t i = 0; i < m; ++i) {
            const uint32_t sp = mode == 1 && i < 512 ? std::min(span, 8u) : span;
            in[i] = uint8_t(base + rng() % sp);
          }
          if (mode == 2) in[8 * ((m - 1) / 8)] = uint8_t(base == 0 ? span % 256 : base - 1);
          uint32_t h1[256], h2[256];
          sample_histogram_scalar(in.data(), m, h1);
          for (const Kernels* v : variants()) {
            SCOPED_TRACE(::testing::Message() << v->name << " m " << m << " span " << span << " base " << base
                                              << " mode " << mode);
            std::fill(h2, h2 + 256, 0xEEEEEEEEu);
            v->sample_histogram(in.data(), m, h2);
            ASSERT_TRUE(std::equal(h1, h1 + 256, h2));
          }
          ASSERT_EQ(scalar_kernels().sample_histogram, &sample_histogram_scalar);
          uint32_t total = 0;
          for (uint32_t c = 0; c < 256; ++c) total += h1[c];
          ASSERT_EQ(total, (m + 7) / 8);
          if (m == 1) break;
        }
      }
    }
  }
}

// The exact counts outside a plane's core (encoder_policy.h sample_core): each set adds what the
// scalar loop adds, for cores at the edges and in the middle, outliers dense or rare, and every
// length class around the 64-byte step.
TEST(Kernels, CountOutsideMatchesScalar) {
  if (variants().empty()) GTEST_SKIP() << "no SIMD kernels on this CPU/build";
  std::mt19937 rng(6);
  for (uint32_t m : {1u, 63u, 64u, 65u, 127u, 1000u, 8192u, 16384u}) {
    for (auto core : {std::pair<uint32_t, uint32_t>{0, 0}, {0, 100}, {90, 130}, {200, 255}, {255, 255}}) {
      for (uint32_t per_mille : {0u, 2u, 100u, 1000u}) {
        std::vector<uint8_t> in(m);
        for (auto& b : in) {
          b = rng() % 1000 < per_mille ? uint8_t(rng())
                                       : uint8_t(core.first + rng() % (core.second - core.first + 1));
        }
        uint32_t h1[256], h2[256];
        std::fill(h1, h1 + 256, 7u);
        count_outside_scalar(in.data(), m, core.first, core.second, h1);
        uint32_t added = 0;
        for (uint32_t c = 0; c < 256; ++c) {
          if (c >= core.first && c <= core.second) {
            ASSERT_EQ(h1[c], 7u);
          }
          added += h1[c] - 7;
        }
        ASSERT_EQ(added, uint32_t(std::count_if(in.begin(), in.end(), [&](uint8_t b) {
                    return b < core.first || b > core.second;
                  })));
        for (const Kernels* v : variants()) {
          SCOPED_TRACE(::testing::Message() << v->name << " m " << m << " core " << core.first << "-"
                                            << core.second << " per mille " << per_mille);
          ASSERT_NE(v->count_outside, nullptr);
          std::fill(h2, h2 + 256, 7u);
          v->count_outside(in.data(), m, core.first, core.second, h2);
          ASSERT_TRUE(std::equal(h1, h1 + 256, h2));
        }
      }
    }
  }
}

TEST(Kernels, HuffmanLanesRoundTripAndRejectBadLengths) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t m = 1 + rng() % 16384;
    const int lanes = 1 << (rng() % 7);
    std::vector<uint8_t> sym(m);
    const int spread = 1 + int(rng() % 200);
    for (auto& x : sym) x = uint8_t(100 + (rng() % spread) * (rng() % 2 ? 1 : -1) / (1 + rng() % 4));
    sym[0] = 0, sym[m - 1] = 255;  // at least two symbols
    uint32_t freq[256];
    scalar_kernels().histogram(sym.data(), m, freq);
    HuffCode code;
    const uint64_t bits = build_huffman(freq, &code);
    std::vector<uint8_t> stream(2 * m + 64);
    uint16_t lane_bytes[fmt::kMaxLanes];
    const size_t total = huff_encode_lanes(sym.data(), m, code, lanes, stream.data(), stream.size(), lane_bytes);
    ASSERT_NE(total, SIZE_MAX);
    ASSERT_LE(total, (bits + 7) / 8 + lanes);
    uint8_t desc[300];
    const size_t d = write_huff_desc(code, desc);
    DecodeTable table;
    uint32_t lo, nsym;
    ASSERT_EQ(read_huff_desc(desc, d, &lo, &nsym, &table), d);
    // Decode with the stream at the very end of the readable range (the padded-copy path) and
    // with slack after it (the fast path).
    for (size_t slack : {size_t(0), size_t(64)}) {
      std::vector<uint8_t> buf(stream.begin(), stream.begin() + total);
      buf.resize(total + slack);
      std::vector<uint8_t> back(m);
      ASSERT_TRUE(huff_decode_lanes(buf.data(), lane_bytes, lanes, table, m, back.data(), buf.data() + buf.size()))
          << "trial " << trial << " lanes " << lanes;
      ASSERT_EQ(back, sym);
      // A lane one byte longer or shorter than its bits: refused.
      int k = int(rng() % lanes);
      while (lane_bytes[k] == 0) k = (k + 1) % lanes;
      uint16_t bad[fmt::kMaxLanes];
      std::copy(lane_bytes, lane_bytes + lanes, bad);
      bad[k]--;
      ASSERT_FALSE(huff_decode_lanes(buf.data(), bad, lanes, table, m, back.data(), buf.data() + buf.size()));
    }
    // Capacity one byte short: overflow reported, nothing written past the cap.
    std::vector<uint8_t> small(total + 8, 0xEE);
    ASSERT_EQ(huff_encode_lanes(sym.data(), m, code, lanes, small.data(), total - 1, lane_bytes), SIZE_MAX);
    for (size_t i = total - 1; i < small.size(); ++i) ASSERT_EQ(small[i], 0xEE);
  }
}

// Symbol planes that exercise the lane coders' paths: kind 0 random spreads, 1 geometric (code
// lengths up to the 11-bit limit, the exponent shape), 2 uniform bytes (256 values: no byte-permute
// encoder, 8-bit codes from the first window: no register tables), 3 an alphabet spanning exactly
// 64 values, 4 spanning 65, 5 two symbols, 6 a flat 100-value alphabet (7-bit codes reach window
// 1920: register tables refused), 7 Gaussian bf16 exponents, 8 one common value and 63 rare ones
// (6-7 bit codes: octets of codes over 56 bits, coded symbol by symbol by the AVX-512 encoder);
// 9 and 10 are described where they are made.
std::vector<uint8_t> lane_symbols(std::mt19937& rng, uint32_t m, int kind) {
  std::vector<uint8_t> sym(m);
  const uint8_t base = uint8_t(rng() % 150);
  for (uint32_t i = 0; i < m; ++i) {
    uint32_t x = 0;
    switch (kind) {
      case 0: {
        const int spread = 1 + int(rng() % 200);
        x = uint32_t(100 + (int(rng() % spread)) * (rng() % 2 ? 1 : -1) / int(1 + rng() % 4));
        break;
      }
      case 1: while (x < 40 && (rng() & 1)) ++x; x += base; break;
      case 2: x = rng() & 255; break;
      case 3: x = base + (rng() % 4 ? rng() % 8 : rng() % 64); break;
      case 4: x = base + (rng() % 4 ? rng() % 8 : rng() % 65); break;
      case 5: x = base + (rng() % 3 == 0); break;
      case 6: x = base + rng() % 100; break;
      case 8: x = base + (rng() % 5 == 0 ? 0 : 1 + rng() % 63); break;
      // Stretches of one symbol (1-bit code: the AVX-512 decoder's cap of quads per window) between
      // stretches of long codes (windows that hold only two quads).
      case 9:
        x = base + ((i / 97) % 3 == 0 ? 1 + rng() % 64 : 0);
        break;
      // Mostly one symbol, every 16th run of 16 from 63 rare ones (~10-bit codes): lanes average well
      // under 44 bits a 16-symbol group, yet some 16- and 8-symbol groups exceed 56 bits (split, and
      // coded symbol by symbol, by the AVX-512 encoder).
      case 10:
        x = base + ((i / 16) % 16 == 3 ? 1 + rng() % 63 : 0);
        break;
      case 7: {
        const float f = std::normal_distribution<float>(0.0f, 1.0f)(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        x = (u >> 23) & 0xFF;
      }
    }
    sym[i] = uint8_t(x);
  }
  // At least two distinct symbols; the geometric and span cases keep their alphabet.
  if (m >= 2 && sym[0] == sym[m - 1]) sym[m - 1] = uint8_t(sym[0] ^ 1);
  return sym;
}

// n bytes ending exactly at an inaccessible page: a read past the end faults (gathers included,
// which ASan does not check).
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t n) : n_(n) {
    page_ = size_t(sysconf(_SC_PAGESIZE));
    len_ = (n + page_ - 1) / page_ * page_ + page_;
    void* p = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (base_) mprotect(base_ + len_ - page_, page_, PROT_NONE);
  }
  ~GuardedBytes() {
    if (base_) munmap(base_, len_);
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  bool ok() const { return base_ != nullptr; }
  uint8_t* data() { return base_ + len_ - page_ - n_; }
  uint8_t* end() { return base_ + len_ - page_; }

 private:
  uint8_t* base_ = nullptr;
  size_t n_, page_ = 0, len_ = 0;
};

// The scalar coder's lanes for `sym` under the code built from its own histogram, and the descriptor.
struct ScalarLanes {
  HuffCode code;
  std::vector<uint8_t> bytes;  // exactly the lane streams
  uint16_t lanes[fmt::kMaxLanes];
  uint8_t desc[300];
  size_t desc_bytes = 0;
};
void scalar_lanes(const std::vector<uint8_t>& sym, int lanes, ScalarLanes* out) {
  const uint32_t m = static_cast<uint32_t>(sym.size());
  uint32_t freq[256];
  scalar_kernels().histogram(sym.data(), m, freq);
  build_huffman(freq, &out->code);
  out->bytes.assign(2 * size_t(m) + 64, 0);
  const size_t total =
      huff_encode_lanes(sym.data(), m, out->code, lanes, out->bytes.data(), out->bytes.size(), out->lanes);
  ASSERT_NE(total, SIZE_MAX);
  out->bytes.resize(total);
  out->desc_bytes = write_huff_desc(out->code, out->desc);
}

TEST(Kernels, HuffmanDecodersNeverReadPastTheReadableEnd) {
  std::mt19937 rng(17);
  std::vector<const Kernels*> all = variants();
  all.push_back(&scalar_kernels());
  for (int trial = 0; trial < 60; ++trial) {
    const uint32_t m = trial % 2 ? 8192 : 64 + rng() % 16000;
    const auto sym = lane_symbols(rng, m, trial % 3 == 0 ? 7 : int(rng() % 9));
    ScalarLanes s;
    ASSERT_NO_FATAL_FAILURE(scalar_lanes(sym, 32, &s));
    const std::vector<uint8_t>& ref = s.bytes;
    const uint16_t* lanes_len = s.lanes;
    const uint8_t* desc = s.desc;
    const size_t total = ref.size(), d = s.desc_bytes;
    for (const Kernels* v : all) {
      SCOPED_TRACE(v->name);
      DecodeTable table;
      uint32_t lo, nsym;
      ASSERT_EQ(read_huff_desc(desc, d, &lo, &nsym, &table, v->table_kind), d);
      for (int damage = 0; damage < 4; ++damage) {
        // The stream ends at the guard page, with 0, 5 or 17 readable bytes after it.
        const size_t slack = damage == 0 ? 0 : damage == 1 ? 5 : 17;
        GuardedBytes g(total + slack);
        ASSERT_TRUE(g.ok());
        std::memcpy(g.data(), ref.data(), total);
        std::memset(g.data() + total, 0xFF, slack);
        uint16_t lb[fmt::kMaxLanes];
        std::copy(lanes_len, lanes_len + 32, lb);
        if (damage >= 2) {  // streams that run past their ends: all-ones bytes, lanes shortened
          for (size_t i = 0; i < total; i += 1 + rng() % 7) g.data()[i] = 0xFF;
          const int k = int(rng() % 32);
          if (lb[k] > 1) lb[k] = uint16_t(lb[k] / 2), lb[31] = uint16_t(lb[31] + lanes_len[k] - lb[k]);
        }
        std::vector<uint8_t> back(m);
        const bool ok = v->huff_decode(g.data(), lb, 32, table, m, back.data(), g.end(), nullptr);
        if (damage < 2) {
          ASSERT_TRUE(ok);
          ASSERT_EQ(back, sym);
        }
      }
    }
  }
}

TEST(Kernels, HuffmanLanesMatchScalarOnEveryVariant) {
  if (variants().empty()) GTEST_SKIP() << "no SIMD kernels on this CPU/build";
  std::mt19937 rng(11);
  const uint32_t sizes[] = {2, 3, 4, 31, 32, 33, 127, 128, 129, 1000, 384, 4095, 4096, 8191, 8192, 8193, 16383, 16384};
  int cases = 0, reg_tables = 0, reg6 = 0, gather = 0;
  for (int kind = 0; kind < 11; ++kind) {
    for (int trial = 0; trial < 40; ++trial) {
      // Trials 18-20: 32 full lanes of a multiple of 64 symbols (a block of 2048, 4096, 8192 elements).
      const bool full = trial >= 18 && trial < 21;
      const uint32_t m = trial < 18 ? sizes[trial] : full ? 2048u << (trial - 18) : 2 + rng() % 16383;
      const int lanes = trial % 3 == 0 || full ? 32 : 1 << (rng() % 7);
      const auto sym = lane_symbols(rng, m, kind);
      ScalarLanes s;
      ASSERT_NO_FATAL_FAILURE(scalar_lanes(sym, lanes, &s));
      const HuffCode& code = s.code;
      const std::vector<uint8_t>& ref = s.bytes;
      const uint16_t* ref_lanes = s.lanes;
      const uint8_t* desc = s.desc;
      const size_t total = ref.size(), d = s.desc_bytes;
      DecodeTable pair_table;
      uint32_t lo, nsym;
      ASSERT_EQ(read_huff_desc(desc, d, &lo, &nsym, &pair_table), d);
      for (const Kernels* v : variants()) {
        SCOPED_TRACE(::testing::Message() << v->name << " kind " << kind << " trial " << trial << " m " << m
                                          << " lanes " << lanes << " nsym " << code.nsym);
        ++cases;
        // Encode: the same bytes and lane lengths; one byte less room is refused with nothing
        // written past the cap.
        std::vector<uint8_t> got(total + 64, 0xEE);
        uint16_t got_lanes[fmt::kMaxLanes];
        // With prefetch ranges (the same bytes; the cursors advance within their ranges only).
        std::vector<uint8_t> next(2 * m + 64), wr(m + 64);
        Ahead ahead{next.data(), next.data() + 2 * m, wr.data(), wr.data() + m};
        ASSERT_EQ(v->huff_encode(sym.data(), m, code, lanes, got.data(), total, got_lanes, &ahead), total);
        ASSERT_GE(ahead.p, next.data());
        ASSERT_LE(ahead.p, next.data() + 2 * m + 63);
        ASSERT_LE(ahead.w, wr.data() + m + 63);
        ASSERT_TRUE(std::equal(ref.begin(), ref.end(), got.begin()));
        for (size_t i = total; i < got.size(); ++i) ASSERT_EQ(got[i], 0xEE);
        ASSERT_TRUE(std::equal(ref_lanes, ref_lanes + lanes, got_lanes));
        std::fill(got.begin(), got.end(), 0xEE);
        ASSERT_EQ(v->huff_encode(sym.data(), m, code, lanes, got.data(), total - 1, got_lanes, nullptr),
                  SIZE_MAX);
        for (size_t i = total - 1; i < got.size(); ++i) ASSERT_EQ(got[i], 0xEE);
        // Decode with the variant's own tables, stream flush with the readable end and with slack.
        DecodeTable table;
        ASSERT_EQ(read_huff_desc(desc, d, &lo, &nsym, &table, v->table_kind), d);
        reg_tables += table.reg_ok;
        reg6 += table.reg_ok && table.reg.short_bits == 6;
        gather += table.gather_ok;
        for (size_t slack : {size_t(0), size_t(3), size_t(64)}) {
          std::vector<uint8_t> buf(ref);
          buf.resize(total + slack);
          std::vector<uint8_t> back(m, 0xEE);
          Ahead ahead{next.data(), next.data() + m, nullptr, nullptr};
          ASSERT_TRUE(v->huff_decode(buf.data(), ref_lanes, lanes, table, m, back.data(),
                                     buf.data() + buf.size(), &ahead));
          ASSERT_LE(ahead.p, next.data() + m + 63);
          ASSERT_EQ(back, sym);
        }
        // Damaged streams and lane lengths: accepted or refused exactly as the scalar decoder
        // does, with the same symbols when accepted.
        for (int bad = 0; bad < 12; ++bad) {
          std::vector<uint8_t> buf(ref);
          uint16_t lb[fmt::kMaxLanes];
          std::copy(ref_lanes, ref_lanes + lanes, lb);
          if (bad % 3 == 0) {
            const int k = int(rng() % lanes);
            lb[k] = uint16_t(lb[k] + (lb[k] == 0 || rng() % 2 ? 1 : -1));
          } else if (bad % 3 == 1 && lanes > 1) {  // bytes moved between two lanes: same total
            const int k = int(rng() % (lanes - 1));
            if (lb[k] > 0) lb[k]--, lb[k + 1]++;
          } else if (!buf.empty()) {
            for (int f = 0; f < 1 + bad % 4; ++f) buf[rng() % buf.size()] ^= uint8_t(1u << (rng() % 8));
          }
          size_t sum = 0;
          for (int k = 0; k < lanes; ++k) sum += lb[k];
          buf.resize(std::max(sum, buf.size()) + (bad & 1 ? 0 : 16));
          std::vector<uint8_t> a(m), b(m);
          const bool ok_ref = huff_decode_lanes(buf.data(), lb, lanes, pair_table, m, a.data(), buf.data() + buf.size());
          const bool ok =
              v->huff_decode(buf.data(), lb, lanes, table, m, b.data(), buf.data() + buf.size(), nullptr);
          ASSERT_EQ(ok, ok_ref) << "damage " << bad;
          if (ok) {
            ASSERT_EQ(a, b);
          }
        }
      }
    }
  }
  // Every decoder path of the AVX-512 set ran: 6-bit and 7-bit register tables, and the gather table
  // where neither fits.
  if (kernels_for(Isa::kAvx512)) {
    EXPECT_GT(reg6, 0);
    EXPECT_GT(reg_tables, reg6);
    EXPECT_GT(gather, 0);
    EXPECT_LT(reg_tables, cases);
  }
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
