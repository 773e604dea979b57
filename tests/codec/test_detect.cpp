#include <gtest/gtest.h>

#include "test_data.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace {

TEST(Detect, RecognisesEachType) {
  auto bf = testing::gaussian_bf16(100000, 1.0, 1);
  EXPECT_EQ(detect_elem_type(bf.data(), bf.size()), ElemType::kBf16);
  auto h = testing::gaussian_fp16(100000, 1.0, 2);
  EXPECT_EQ(detect_elem_type(h.data(), h.size()), ElemType::kFp16);
  auto f = testing::gaussian_fp32(100000, 1.0, 3, true);
  EXPECT_EQ(detect_elem_type(f.data(), f.size()), ElemType::kFp32);
  auto r = testing::random_bytes(100000, 4);
  EXPECT_EQ(detect_elem_type(r.data(), r.size()), ElemType::kNone);
  EXPECT_EQ(detect_elem_type(r.data(), 10), ElemType::kNone);
  EXPECT_EQ(detect_elem_type(nullptr, 0), ElemType::kNone);
}

TEST(Names, ParseAndPrint) {
  ElemType t;
  EXPECT_TRUE(parse_elem_type("fp32", &t));
  EXPECT_EQ(t, ElemType::kFp32);
  EXPECT_FALSE(parse_elem_type("float", &t));
  EXPECT_EQ(elem_size(ElemType::kBf16), 2u);
  EXPECT_STREQ(status_string(Status::kCorrupt), "corrupt frame");
}

}  // namespace
}  // namespace codec
}  // namespace zipccl
