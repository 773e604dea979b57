// `zipccl inspect`: the measurements on files whose figures are known by construction, the table, the
// SVG (well-formed, with the expected elements), and the command as a user runs it.
#include "inspect.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "svg.h"
#include "temp_dir.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;
using Bytes = std::vector<uint8_t>;

void put16(Bytes* b, uint16_t v) {
  b->push_back(static_cast<uint8_t>(v));
  b->push_back(static_cast<uint8_t>(v >> 8));
}

// 4096 bf16 values, half 1.0 (exponent field 127) and half 2.0 (128), interleaved; mantissas zero.
Bytes two_exponents_bf16() {
  Bytes b;
  for (int i = 0; i < 4096; ++i) put16(&b, i % 2 ? 0x4000 : 0x3F80);
  return b;
}

Bytes random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  Bytes b(n);
  std::generate(b.begin(), b.end(), [&] { return static_cast<uint8_t>(gen() >> 24); });
  return b;
}

TensorView view(const std::string& name, ElemType t, const Bytes& b) {
  TensorView v;
  v.name = name;
  v.dtype = codec::elem_type_name(t);
  v.type = t;
  v.shape = {b.size() / std::max<size_t>(1, codec::elem_size(t))};
  v.data = b.data();
  v.size = b.size();
  return v;
}

size_t codec_size(const Bytes& b, ElemType t) {
  std::vector<uint8_t> out(codec::max_encoded_size(b.size()));
  codec::EncodeOptions o;
  o.type = t;
  size_t n = 0;
  EXPECT_EQ(codec::encode(b.data(), b.size(), out.data(), out.size(), &n, o), codec::Status::kOk);
  return n;
}

Bytes make_safetensors(const std::string& json, const Bytes& data) {
  Bytes f;
  for (int i = 0; i < 8; ++i)
    f.push_back(static_cast<uint8_t>(static_cast<uint64_t>(json.size()) >> (8 * i)));
  f.insert(f.end(), json.begin(), json.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

// A small XML well-formedness check: one root <svg>, every tag closed in order, attributes quoted,
// no stray '<' or '&' in text. Counts the start tags by name.
bool well_formed(const std::string& x, std::map<std::string, int>* counts, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  bool root_seen = false;
  if (x.compare(0, 5, "<?xml") == 0) i = x.find("?>") + 2;
  while (i < x.size()) {
    if (x[i] == '&') {
      size_t semi = x.find(';', i);
      std::string ent = x.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return *why = "bad entity at " + std::to_string(i), false;
      i = semi + 1;
      continue;
    }
    if (x[i] != '<') {
      ++i;
      continue;
    }
    size_t end = x.find('>', i);
    if (end == std::string::npos) return *why = "unclosed tag", false;
    std::string tag = x.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return *why = "empty tag", false;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return *why = "mismatched </" + tag.substr(1) + ">", false;
      stack.pop_back();
      continue;
    }
    bool self = tag.back() == '/';
    if (self) tag.pop_back();
    std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
    if (stack.empty()) {
      if (root_seen || name != "svg") return *why = "root is not one <svg>: " + name, false;
      root_seen = true;
    }
    // Attributes: name="value" pairs with no '<' inside.
    size_t p = name.size();
    while (p < tag.size()) {
      while (p < tag.size() && std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
      if (p >= tag.size()) break;
      size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        return *why = "unquoted attribute in <" + tag + ">", false;
      size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return *why = "unterminated attribute in <" + tag + ">", false;
      p = close + 1;
    }
    ++(*counts)[name];
    if (!self) stack.push_back(name);
  }
  if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
  if (!root_seen) return *why = "no <svg>", false;
  return true;
}

TEST(Inspect, ExponentHistogramOfEachType) {
  Bytes b = two_exponents_bf16();
  ExponentHistogram h = exponent_histogram(b.data(), b.size(), ElemType::kBf16);
  EXPECT_EQ(h.bits, 8);
  EXPECT_EQ(h.total, 4096u);
  EXPECT_EQ(h.counts[127], 2048u);
  EXPECT_EQ(h.counts[128], 2048u);
  EXPECT_EQ(h.distinct(), 2);
  int lo, hi;
  ASSERT_TRUE(h.normal_range(&lo, &hi));
  EXPECT_EQ(lo, 127);
  EXPECT_EQ(hi, 128);
  EXPECT_EQ(exponent_summary(h), "0..1 @@");

  Bytes f16;  // fp16: 0.5 (field 14), 0 (field 0), inf (field 31)
  put16(&f16, 0x3800);
  put16(&f16, 0x0000);
  put16(&f16, 0x7C00);
  put16(&f16, 0x3800);
  h = exponent_histogram(f16.data(), f16.size(), ElemType::kFp16);
  EXPECT_EQ(h.bits, 5);
  EXPECT_EQ(h.counts[14], 2u);
  EXPECT_EQ(h.zero_or_subnormal(), 1u);
  EXPECT_EQ(h.inf_or_nan(), 1u);
  EXPECT_EQ(exponent_summary(h), "-1..-1 @ z25% inf/nan 1");

  Bytes f32(4 * 8, 0);  // fp32 zeros
  h = exponent_histogram(f32.data(), f32.size(), ElemType::kFp32);
  EXPECT_EQ(h.zero_or_subnormal(), 8u);
  EXPECT_FALSE(h.normal_range(&lo, &hi));
  EXPECT_EQ(exponent_summary(h), "no normals z100%");

  h = exponent_histogram(f32.data(), f32.size(), ElemType::kNone);
  EXPECT_EQ(h.bits, 0);
  EXPECT_EQ(exponent_summary(h), "-");
}

TEST(Inspect, WideRangesGroupExponentsPerCharacter) {
  Bytes b;
  for (int f = 1; f <= 100; ++f) put16(&b, static_cast<uint16_t>(f << 7));
  ExponentHistogram h = exponent_histogram(b.data(), b.size(), ElemType::kBf16);
  const std::string s = exponent_summary(h, 25);
  EXPECT_EQ(s, "-126..-27 @@@@@@@@@@@@@@@@@@@@@@@@@ (4/char)");
}

TEST(Inspect, TensorFiguresMatchTheirConstruction) {
  const Bytes b = two_exponents_bf16();
  TensorReport r;
  std::string err;
  ASSERT_TRUE(inspect_tensor(view("w", ElemType::kBf16, b), ElemType::kBf16, 1, &r, &err)) << err;
  EXPECT_EQ(r.type, ElemType::kBf16);
  EXPECT_FALSE(r.type_detected);
  EXPECT_EQ(r.bytes, 8192u);
  EXPECT_DOUBLE_EQ(r.entropy_bits, 1.0);  // one bit of exponent, nothing else varies
  EXPECT_EQ(r.predicted, 512u);           // 4096 elements x 1 bit
  EXPECT_EQ(r.actual, codec_size(b, ElemType::kBf16));
  EXPECT_LT(r.actual, 8192u / 4);
  EXPECT_EQ(r.kind, codec::FrameKind::kCoded);
  EXPECT_DOUBLE_EQ(r.ratio(), 8192.0 / static_cast<double>(r.actual));
  EXPECT_DOUBLE_EQ(r.bound_ratio(), 16.0);

  // Random bytes: about 8 bits of entropy per byte, and no gain.
  const Bytes noise = random_bytes(1 << 16, 7);
  ASSERT_TRUE(inspect_tensor(view("noise", ElemType::kNone, noise), ElemType::kNone, 1, &r, &err)) << err;
  EXPECT_GT(r.entropy_bits, 7.99);
  EXPECT_LE(r.entropy_bits, 8.0);
  EXPECT_GE(r.actual, noise.size());
  EXPECT_LE(r.ratio(), 1.0);

  // A constant tensor: zero entropy, an infinite bound, a tiny constant frame.
  const Bytes zeros(4096, 0);
  ASSERT_TRUE(inspect_tensor(view("zeros", ElemType::kFp32, zeros), ElemType::kFp32, 1, &r, &err)) << err;
  EXPECT_EQ(r.predicted, 0u);
  EXPECT_TRUE(std::isinf(r.bound_ratio()));
  EXPECT_EQ(r.kind, codec::FrameKind::kConst);
  EXPECT_LT(r.actual, 64u);

  // kAuto: the type comes from the bytes and is marked as detected.
  ASSERT_TRUE(inspect_tensor(view("auto", ElemType::kNone, b), ElemType::kAuto, 1, &r, &err)) << err;
  EXPECT_TRUE(r.type_detected);
  EXPECT_EQ(r.type, codec::detect_elem_type(b.data(), b.size()));
}

class InspectFile : public zipccl_test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    // bf16 "w" (the two-exponent tensor), fp32 "z" (zeros), I32 "ids" (random bytes, no float type).
    const Bytes w = two_exponents_bf16(), z(1024, 0), ids = random_bytes(4096, 3);
    Bytes data = w;
    data.insert(data.end(), z.begin(), z.end());
    data.insert(data.end(), ids.begin(), ids.end());
    const std::string json =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"w\":{\"dtype\":\"BF16\",\"shape\":[64,64],\"data_offsets\":[0,8192]},"
        "\"z<&>\":{\"dtype\":\"F32\",\"shape\":[256],\"data_offsets\":[8192,9216]},"
        "\"ids\":{\"dtype\":\"I32\",\"shape\":[1024],\"data_offsets\":[9216,13312]}}";
    write("m.safetensors", make_safetensors(json, data));
  }
  // Runs the zipccl binary; returns its exit status, stdout and stderr in *out.
  int run(const std::string& args, std::string* out) {
    const int st = run_here("'" ZIPCCL_BIN "' " + args + " > out.txt 2>&1");
    *out = read_text("out.txt");
    return st;
  }
};

TEST_F(InspectFile, ReportAndTable) {
  InspectReport r;
  std::string err;
  ASSERT_TRUE(inspect_file(path("m.safetensors"), ElemType::kNone, 2, &r, &err)) << err;
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0].name, "w");
  EXPECT_EQ(r.tensors[0].type, ElemType::kBf16);
  EXPECT_EQ(r.tensors[1].type, ElemType::kFp32);
  EXPECT_EQ(r.tensors[2].type, ElemType::kNone);  // I32 with untyped = kNone
  EXPECT_EQ(r.total_bytes, 13312u);
  EXPECT_EQ(r.total_actual, r.tensors[0].actual + r.tensors[1].actual + r.tensors[2].actual);
  EXPECT_EQ(r.total_predicted, r.tensors[0].predicted + r.tensors[1].predicted + r.tensors[2].predicted);

  const std::string t = report_table(r);
  // The row of "w": type, shape, bytes, exponent summary, entropy, bound, zipccl size, ratios.
  auto right = [](const std::string& v, size_t w) { return std::string(w - v.size(), ' ') + v; };
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3fx", r.tensors[0].ratio());
  const std::string row = "w       bf16  [64,64]" + std::string(15, ' ') + "8192  0..1 @@" +
                          std::string(36, ' ') + "1.00" + right("512", 12) +
                          right(std::to_string(r.tensors[0].actual), 12) + right(ratio, 9) +
                          right("16.000x", 9) + "\n";
  EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  EXPECT_NE(t.find("no normals z100%"), std::string::npos) << t;
  EXPECT_NE(t.find("inf\n"), std::string::npos) << t;  // the constant tensor's bound
  EXPECT_NE(t.find("3 tensor(s), 13312 bytes (13.00 KiB); zipccl frames " + std::to_string(r.total_actual)),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("on the wire:"), std::string::npos);
}

TEST_F(InspectFile, SvgIsWellFormedWithOneRowPerTensor) {
  InspectReport r;
  std::string err;
  ASSERT_TRUE(inspect_file(path("m.safetensors"), ElemType::kNone, 1, &r, &err)) << err;
  const std::string svg = inspect_svg(r);
  std::map<std::string, int> counts;
  ASSERT_TRUE(well_formed(svg, &counts, &err)) << err;
  EXPECT_EQ(counts["svg"], 1);
  EXPECT_EQ(counts["g"], 3);                                 // one group per tensor
  EXPECT_EQ(counts["title"], 3);                             // with hover text
  EXPECT_NE(svg.find("z&lt;&amp;&gt;"), std::string::npos);  // the name is escaped
  // Bars: w has two exponents, z one zero slot, ids none; plus background, 3 frames, 3 ratio bars, 2
  // stripes and 2 legend swatches (bf16, fp32: the types present).
  EXPECT_EQ(counts["rect"], 1 + 2 + 3 + 2 + 1 + 3 + 2);
  EXPECT_NE(svg.find("no floating-point exponents"), std::string::npos);

  // More tensors than rows: the largest are drawn, and the footnote says so.
  const std::string few = inspect_svg(r, 2);
  counts.clear();
  ASSERT_TRUE(well_formed(few, &counts, &err)) << err;
  EXPECT_EQ(counts["g"], 2);
  EXPECT_NE(few.find("showing the 2 largest of 3 tensors"), std::string::npos);
  EXPECT_EQ(few.find("z&lt;&amp;&gt;"), std::string::npos);  // the smallest tensor is left out
  EXPECT_NE(few.find(">ids<"), std::string::npos);
}

TEST_F(InspectFile, CommandLine) {
  std::string out;
  ASSERT_EQ(run("inspect m.safetensors --svg pic.svg --threads 1", &out), 0) << out;
  EXPECT_NE(out.find("zipccl inspect m.safetensors"), std::string::npos) << out;
  EXPECT_NE(out.find("on the wire:"), std::string::npos) << out;
  EXPECT_NE(out.find("picture: pic.svg"), std::string::npos) << out;
  const std::string svg = read_text("pic.svg");
  std::map<std::string, int> counts;
  std::string err;
  EXPECT_TRUE(well_formed(svg, &counts, &err)) << err;

  // A raw file with -t: one tensor named after the file.
  write("g.bin", two_exponents_bf16());
  ASSERT_EQ(run("inspect -t bf16 g.bin", &out), 0) << out;
  EXPECT_NE(out.find("g.bin"), std::string::npos);
  EXPECT_NE(out.find("0..1 @@"), std::string::npos) << out;

  EXPECT_EQ(run("inspect missing.npy", &out), 1);
  EXPECT_NE(out.find("missing.npy"), std::string::npos) << out;
  EXPECT_EQ(run("inspect -t int8 g.bin", &out), 2);
  EXPECT_EQ(run("inspect", &out), 2);
}

}  // namespace
}  // namespace tools
}  // namespace zipccl
