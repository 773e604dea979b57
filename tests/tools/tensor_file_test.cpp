#include "tensor_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;
using Bytes = std::vector<uint8_t>;

// A .npy file as numpy writes it: magic, version, header length, dict padded to 64 bytes, data.
Bytes make_npy(const std::string& dict, const Bytes& data, int major = 1) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  while ((10 + len_bytes - 2 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t i = 0; i < len_bytes; ++i) f.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

Bytes counting(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 13 + 1);
  return b;
}

Bytes make_safetensors(const std::string& json, const Bytes& data) {
  Bytes f;
  f.reserve(8 + json.size() + data.size());
  for (int i = 0; i < 8; ++i)
    f.push_back(static_cast<uint8_t>(static_cast<uint64_t>(json.size()) >> (8 * i)));
  f.insert(f.end(), json.begin(), json.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

bool npy_ok(const Bytes& f, TensorView* t, std::string* err) {
  return parse_npy(f.data(), f.size(), t, err);
}

std::string npy_error(const Bytes& f) {
  TensorView t;
  std::string err;
  EXPECT_FALSE(npy_ok(f, &t, &err));
  EXPECT_FALSE(err.empty());
  return err;
}

std::string st_error(const Bytes& f) {
  std::vector<TensorView> ts;
  std::string err;
  EXPECT_FALSE(parse_safetensors(f.data(), f.size(), &ts, &err));
  EXPECT_FALSE(err.empty());
  return err;
}

TEST(Npy, ReadsFloatDtypesAndShape) {
  const Bytes data = counting(3 * 4 * 2);
  Bytes f = make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }", data);
  TensorView t;
  std::string err;
  ASSERT_TRUE(npy_ok(f, &t, &err)) << err;
  EXPECT_EQ(t.type, ElemType::kFp16);
  EXPECT_EQ(t.dtype, "<f2");
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{3, 4}));
  ASSERT_EQ(t.size, data.size());
  EXPECT_EQ(std::memcmp(t.data, data.data(), data.size()), 0);

  const Bytes d32 = counting(5 * 4);
  f = make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (5,), }", d32, 2);  // version 2 header
  ASSERT_TRUE(npy_ok(f, &t, &err)) << err;
  EXPECT_EQ(t.type, ElemType::kFp32);
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{5}));
  EXPECT_EQ(std::memcmp(t.data, d32.data(), d32.size()), 0);
}

TEST(Npy, Bfloat16AsStoredByMlDtypes) {
  const Bytes data = counting(6 * 2);
  TensorView t;
  std::string err;
  for (const char* d : {"<V2", "|V2", "bfloat16"}) {
    Bytes f =
        make_npy(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (2, 3), }", data);
    ASSERT_TRUE(npy_ok(f, &t, &err)) << d << ": " << err;
    EXPECT_EQ(t.type, ElemType::kBf16) << d;
    EXPECT_EQ(t.size, data.size());
  }
}

TEST(Npy, OtherDtypesParseWithoutAnElementType) {
  Bytes f = make_npy("{\"descr\": \"<i2\", \"fortran_order\": False, \"shape\": (4L,)}", counting(8));
  TensorView t;
  std::string err;
  ASSERT_TRUE(npy_ok(f, &t, &err)) << err;
  EXPECT_EQ(t.type, ElemType::kNone);
  EXPECT_EQ(t.size, 8u);
}

TEST(Npy, ScalarAndEmptyShapes) {
  TensorView t;
  std::string err;
  ASSERT_TRUE(
      npy_ok(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", counting(4)), &t, &err));
  EXPECT_TRUE(t.shape.empty());
  EXPECT_EQ(t.size, 4u);
  ASSERT_TRUE(npy_ok(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 7), }", {}), &t, &err));
  EXPECT_EQ(t.size, 0u);
}

TEST(Npy, RejectsMalformedFiles) {
  const std::string ok = "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }";
  Bytes good = make_npy(ok, counting(8));
  Bytes bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_NE(npy_error(bad_magic).find("magic"), std::string::npos);
  Bytes bad_version = good;
  bad_version[6] = 9;
  npy_error(bad_version);
  Bytes long_header = good;
  long_header[8] = 0xFF, long_header[9] = 0xFF;
  EXPECT_NE(npy_error(long_header).find("longer than the file"), std::string::npos);
  npy_error(Bytes(good.begin(), good.begin() + 9));

  // Data shorter and longer than the shape says.
  npy_error(make_npy(ok, counting(7)));
  npy_error(make_npy(ok, counting(10)));
  // dtypes we cannot read.
  EXPECT_NE(npy_error(make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", counting(8)))
                .find("big-endian"),
            std::string::npos);
  npy_error(make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", counting(8)));
  npy_error(make_npy("{'descr': 'zz', 'fortran_order': False, 'shape': (2,), }", counting(8)));
  // Header syntax and content.
  npy_error(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4,)", counting(8)));
  npy_error(make_npy("{'descr': '<f2', 'shape': (4,), }", counting(8)));
  npy_error(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (-4,), }", counting(8)));
  npy_error(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4.5,), }", counting(8)));
  npy_error(make_npy("{'descr': '<f2', 'fortran_order': 'no', 'shape': (4,), }", counting(8)));
  npy_error(
      make_npy("{'descr': '<f2', 'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", counting(8)));
  npy_error(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }",
                     counting(8)));
  npy_error(make_npy("[1, 2]", counting(8)));
  npy_error(make_npy(std::string(100, '['), counting(8)));
}

TEST(Safetensors, ReadsTensorsInDataOrder) {
  // JSON lists the F32 tensor first, but its data comes after the BF16 one.
  const Bytes data = counting(2 * 3 * 2 + 4 * 2 + 3);
  const std::string json =
      "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]},"
      " \"__metadata__\": {\"format\": \"pt\"},"
      " \"g\\u00e9\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
      " \"ids\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [20, 23]}}   ";
  Bytes f = make_safetensors(json, data);
  std::vector<TensorView> ts;
  std::string err;
  ASSERT_TRUE(parse_safetensors(f.data(), f.size(), &ts, &err)) << err;
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts[0].name, "g\xC3\xA9");
  EXPECT_EQ(ts[0].type, ElemType::kBf16);
  EXPECT_EQ(ts[0].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ts[0].size, 12u);
  EXPECT_EQ(std::memcmp(ts[0].data, data.data(), 12), 0);
  EXPECT_EQ(ts[1].name, "w");
  EXPECT_EQ(ts[1].type, ElemType::kFp32);
  EXPECT_EQ(std::memcmp(ts[1].data, data.data() + 12, 8), 0);
  EXPECT_EQ(ts[2].type, ElemType::kNone);
  EXPECT_EQ(ts[2].dtype, "U8");
}

TEST(Safetensors, EmptyHeaderObject) {
  Bytes f = make_safetensors("{}", {});
  std::vector<TensorView> ts;
  std::string err;
  ASSERT_TRUE(parse_safetensors(f.data(), f.size(), &ts, &err)) << err;
  EXPECT_TRUE(ts.empty());
}

TEST(Safetensors, RejectsMalformedFiles) {
  const Bytes data = counting(8);
  auto one = [&](const std::string& body) { return make_safetensors("{\"t\": " + body + "}", data); };
  EXPECT_NE(st_error(Bytes(5, 0)).find("shorter"), std::string::npos);
  Bytes huge = make_safetensors("{}", data);
  huge[7] = 0x10;  // header length far beyond the file
  EXPECT_NE(st_error(huge).find("exceeds"), std::string::npos);
  st_error(make_safetensors("[1, 2]", data));
  st_error(make_safetensors("{\"t\": {\"dtype\": \"F16\"", data));
  st_error(make_safetensors("{\"t\": 1} trailing", data));
  st_error(one("{\"dtype\": \"F16\", \"shape\": [4]}"));
  st_error(one("{\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0]}"));
  EXPECT_NE(st_error(one("{\"dtype\": \"F16\", \"shape\": [8], \"data_offsets\": [0, 16]}")).find("outside"),
            std::string::npos);
  st_error(one("{\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [6, 2]}"));
  st_error(one("{\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [-1, 8]}"));
  EXPECT_NE(st_error(one("{\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [0, 8]}")).find("disagrees"),
            std::string::npos);
  st_error(one("{\"dtype\": \"F16\", \"shape\": [\"4\"], \"data_offsets\": [0, 8]}"));
  st_error(one("{\"dtype\": 16, \"shape\": [4], \"data_offsets\": [0, 8]}"));
  st_error(
      make_safetensors("{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
                       " \"b\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [2, 6]}}",
                       data));
  st_error(make_safetensors("{\"t\": {\"dtype\": \"F16\", \"dtype\": \"F16\"}}", data));
  st_error(make_safetensors("{\"t\": " + std::string(200, '[') + "}", data));
  st_error(make_safetensors("{\"t\": \"\\u12\"}", data));
}

using TensorFiles = zipccl_test::TempDirTest;

TEST_F(TensorFiles, LoadsByExtension) {
  EXPECT_EQ(format_from_path("a/b.npy"), TensorFormat::kNpy);
  EXPECT_EQ(format_from_path("m.safetensors"), TensorFormat::kSafetensors);
  EXPECT_EQ(format_from_path("x.bf16"), TensorFormat::kRaw);

  const Bytes data = counting(4 * 4);
  TensorFile tf;
  std::string err;
  ASSERT_TRUE(load_tensor_file(
      write("a.npy", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", data)), &tf, &err))
      << err;
  ASSERT_EQ(tf.tensors.size(), 1u);
  EXPECT_EQ(tf.tensors[0].name, "a.npy");
  EXPECT_EQ(tf.tensors[0].type, ElemType::kFp32);
  TensorFile moved = std::move(tf);  // views stay valid across a move
  EXPECT_EQ(std::memcmp(moved.tensors[0].data, data.data(), data.size()), 0);

  ASSERT_TRUE(load_tensor_file(write("r.bin", data), &tf, &err)) << err;
  EXPECT_EQ(tf.format, TensorFormat::kRaw);
  EXPECT_EQ(tf.tensors[0].size, data.size());
  EXPECT_EQ(tf.tensors[0].type, ElemType::kNone);

  ASSERT_TRUE(load_tensor_file(write("empty.bin", {}), &tf, &err)) << err;
  EXPECT_EQ(tf.tensors[0].size, 0u);

  EXPECT_FALSE(load_tensor_file(write("bad.npy", data), &tf, &err));
  EXPECT_NE(err.find("bad.npy"), std::string::npos);
  EXPECT_FALSE(load_tensor_file(dir_ + "/missing.safetensors", &tf, &err));
  EXPECT_NE(err.find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace tools
}  // namespace zipccl
