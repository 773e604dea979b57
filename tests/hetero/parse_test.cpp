// Text forms used by `zipccl plan`.
#include "zipccl/hetero/parse.h"

#include <gtest/gtest.h>

namespace {

using namespace zipccl::hetero;

std::string error_of(void (*f)()) {
  try {
    f();
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(HeteroParse, ModuleSpecs) {
  ModuleSpec m = parse_module_spec("name=vision,tp=2,dp=4,ranks=0-7,sp,order=pp-dp-cp-tp,cp=3,pp=5");
  EXPECT_EQ(m.name, "vision");
  EXPECT_EQ(m.tp, 2);
  EXPECT_EQ(m.cp, 3);
  EXPECT_EQ(m.pp, 5);
  EXPECT_EQ(m.dp, 4);
  EXPECT_TRUE(m.sequence_parallel);
  EXPECT_EQ(m.first_rank, 0);
  EXPECT_EQ(m.num_ranks, 8);
  EXPECT_EQ(to_string(m.order), "pp-dp-cp-tp");
  m = parse_module_spec("tp=4,sp=off,ranks=9");
  EXPECT_FALSE(m.sequence_parallel);
  EXPECT_EQ(m.first_rank, 9);
  EXPECT_EQ(m.num_ranks, 1);
  m = parse_module_spec("");
  EXPECT_EQ(m.tp, 1);
  EXPECT_EQ(m.num_ranks, -1);
}

TEST(HeteroParse, BadModuleSpecsSayWhy) {
  EXPECT_EQ(error_of([] { parse_module_spec("tp=2,xx=3"); }),
            "unknown key 'xx' in module spec 'tp=2,xx=3' (keys: name, tp, cp, pp, dp, sp, ranks, order)");
  EXPECT_EQ(error_of([] { parse_module_spec("tp=two"); }),
            "module spec 'tp=two': tp 'two' is not an integer");
  EXPECT_EQ(error_of([] { parse_module_spec("tp=0"); }), "module spec 'tp=0': tp 0 is outside 1..1048576");
  EXPECT_EQ(error_of([] { parse_module_spec("tp=2,tp=4"); }),
            "key 'tp' given twice in module spec 'tp=2,tp=4'");
  EXPECT_EQ(error_of([] { parse_module_spec("tp"); }), "'tp' in module spec 'tp' needs a value (tp=...)");
  EXPECT_EQ(error_of([] { parse_module_spec("tp=2,,pp=2"); }), "empty item in module spec 'tp=2,,pp=2'");
  EXPECT_EQ(error_of([] { parse_module_spec("ranks=7-3"); }), "rank range '7-3' ends before it starts");
  EXPECT_EQ(error_of([] { parse_module_spec("sp=maybe"); }),
            "module spec 'sp=maybe': sp must be on or off (got 'maybe')");
  EXPECT_NE(error_of([] { parse_module_spec("order=tp-dp"); }).find("exactly once"), std::string::npos);
}

TEST(HeteroParse, TokenListsAndDtypes) {
  EXPECT_EQ(parse_token_list("576,144x3,0"), (std::vector<std::int64_t>{576, 144, 144, 144, 0}));
  EXPECT_EQ(parse_token_list("7"), (std::vector<std::int64_t>{7}));
  EXPECT_EQ(error_of([] { parse_token_list("5,,6"); }),
            "token list item '' must be COUNT or COUNTxREPEAT (e.g. 576 or 144x3)");
  EXPECT_EQ(error_of([] { parse_token_list("5,x"); }),
            "token list item 'x' must be COUNT or COUNTxREPEAT (e.g. 576 or 144x3)");
  EXPECT_EQ(error_of([] { parse_token_list("5,7x"); }),
            "token list item '7x' must be COUNT or COUNTxREPEAT (e.g. 576 or 144x3)");
  EXPECT_EQ(error_of([] { parse_token_list("5,y"); }), "token count 'y' is not an integer");
  EXPECT_EQ(error_of([] { parse_token_list("5x0"); }), "repeat 0 is outside 1..1048576");
  EXPECT_EQ(error_of([] { parse_token_list("-5"); }), "token count -5 is outside 0..9223372036854775807");
  EXPECT_EQ(parse_element_size("bf16"), 2);
  EXPECT_EQ(parse_element_size("fp32"), 4);
  EXPECT_EQ(parse_element_size("fp8"), 1);
  EXPECT_EQ(parse_element_size("3"), 3);
  EXPECT_EQ(error_of([] { parse_element_size("bf17"); }),
            "dtype 'bf17' is not one of bf16, fp16, fp32, fp8, int8 or a byte count");
}

}  // namespace
