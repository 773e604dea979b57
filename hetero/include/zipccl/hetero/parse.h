// Text forms of layouts and batches, as `zipccl plan` takes them on its command line.
//
//   module spec   comma-separated keys: name=STR, tp=N, cp=N, pp=N, dp=N (checked against the derived
//                 value), sp (or sp=on|off|1|0|true|false), ranks=A-B or ranks=A (default: the whole
//                 world, i.e. colocated), order=tp-cp-dp-pp (fastest first).
//                 Example: "name=vision,tp=2,dp=4,ranks=0-7".
//   token list    comma-separated counts, COUNTxREPEAT for runs: "576,144x3" = 576,144,144,144.
//   element size  bf16, fp16, fp32, fp8, int8, or a byte count.
//   assignment    contiguous, balanced, or a replica per sample in token-list form: "0,1,1x2".
//   llm input     image-only, thd or bshd (SequenceFormat).
//   images        each sample's images in its combined sequence as OFFSET+TOKENS, comma-separated;
//                 samples separated by '/'; SPEC*N repeats a sample N times; an empty sample spec is
//                 a sample without images: "3+576,700+576/10+1024*3//0+64" = 6 samples (two images,
//                 three of one, none, one); "" = one sample without images. Offsets and token counts
//                 are checked against the sequence by validate_batch (batch.h), not here.
//
// Every function throws ParseError with the offending text and what was expected.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

struct RankSpan {
  int first = 0;
  int count = 0;
};

inline std::int64_t parse_integer(const std::string& text, std::int64_t min, std::int64_t max,
                                  const std::string& what) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) {
    throw ParseError(what + " '" + text + "' is not an integer");
  }
  if (v < min || v > max) {
    throw ParseError(what + " " + text + " is outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

// "8-39" (inclusive) or "5".
inline RankSpan parse_rank_span(const std::string& text) {
  const std::size_t dash = text.find('-');
  if (dash == std::string::npos) {
    return RankSpan{static_cast<int>(parse_integer(text, 0, INT32_MAX - 1, "rank")), 1};
  }
  const auto a = parse_integer(text.substr(0, dash), 0, INT32_MAX - 1, "first rank");
  const auto b = parse_integer(text.substr(dash + 1), 0, INT32_MAX - 1, "last rank");
  if (b < a) throw ParseError("rank range '" + text + "' ends before it starts");
  return RankSpan{static_cast<int>(a), static_cast<int>(b - a + 1)};
}

inline ModuleSpec parse_module_spec(const std::string& text) {
  ModuleSpec m;
  std::vector<std::string> seen;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      if (text.empty()) break;
      throw ParseError("empty item in module spec '" + text + "'");
    }
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    for (const std::string& k : seen) {
      if (k == key) throw ParseError("key '" + key + "' given twice in module spec '" + text + "'");
    }
    seen.push_back(key);
    if (key != "sp" && eq == std::string::npos) {
      throw ParseError("'" + item + "' in module spec '" + text + "' needs a value (" + key + "=...)");
    }
    const std::string what = "module spec '" + text + "': " + key;
    if (key == "name") {
      if (value.empty()) throw ParseError(what + " is empty");
      m.name = value;
    } else if (key == "tp") {
      m.tp = static_cast<int>(parse_integer(value, 1, 1 << 20, what));
    } else if (key == "cp") {
      m.cp = static_cast<int>(parse_integer(value, 1, 1 << 20, what));
    } else if (key == "pp") {
      m.pp = static_cast<int>(parse_integer(value, 1, 1 << 20, what));
    } else if (key == "dp") {
      m.dp = static_cast<int>(parse_integer(value, 1, 1 << 30, what));
    } else if (key == "sp") {
      if (eq == std::string::npos || value == "on" || value == "1" || value == "true") {
        m.sequence_parallel = true;
      } else if (value == "off" || value == "0" || value == "false") {
        m.sequence_parallel = false;
      } else {
        throw ParseError(what + " must be on or off (got '" + value + "')");
      }
    } else if (key == "ranks") {
      const RankSpan span = parse_rank_span(value);
      m.first_rank = span.first;
      m.num_ranks = span.count;
    } else if (key == "order") {
      try {
        m.order = parse_rank_order(value);
      } catch (const LayoutError& e) {
        throw ParseError(e.what());
      }
    } else {
      throw ParseError("unknown key '" + key + "' in module spec '" + text +
                       "' (keys: name, tp, cp, pp, dp, sp, ranks, order)");
    }
  }
  return m;
}

inline std::vector<std::int64_t> parse_token_list(const std::string& text) {
  std::vector<std::int64_t> tokens;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const std::size_t x = item.find('x');
    if (item.empty() || x == 0 || x + 1 == item.size()) {
      throw ParseError("token list item '" + item + "' must be COUNT or COUNTxREPEAT (e.g. 576 or 144x3)");
    }
    const std::int64_t count = parse_integer(item.substr(0, x), 0, INT64_MAX, "token count");
    const std::int64_t repeat =
        x == std::string::npos ? 1 : parse_integer(item.substr(x + 1), 1, kMaxSamples, "repeat");
    if (static_cast<std::int64_t>(tokens.size()) + repeat > kMaxSamples) {
      throw ParseError("token list '" + text.substr(0, 40) + "...' has more than " +
                       std::to_string(kMaxSamples) + " samples (zipccl::hetero::kMaxSamples)");
    }
    tokens.insert(tokens.end(), repeat, count);
  }
  return tokens;
}

// "contiguous", "balanced", or a replica per sample in the token-list form ("0,1,1,0", "1x3").
// Replicas are checked against the module's dp when the plan is made.
inline SampleAssignment parse_assignment(const std::string& text) {
  if (text == "contiguous") return SampleAssignment{};
  if (text == "balanced") return SampleAssignment{AssignmentRule::balanced, {}};
  if (text.empty() || text[0] < '0' || text[0] > '9') {
    throw ParseError("assignment '" + text + "' is not contiguous, balanced or a replica list (e.g. 0,1,1,0)");
  }
  SampleAssignment a{AssignmentRule::given, {}};
  for (std::int64_t r : parse_token_list(text)) {
    if (r > INT32_MAX) throw ParseError("replica " + std::to_string(r) + " in assignment is too large");
    a.replica.push_back(static_cast<int>(r));
  }
  return a;
}

inline SequenceFormat parse_sequence_format(const std::string& text) {
  if (text == "image-only" || text == "image_only") return SequenceFormat::image_only;
  if (text == "thd") return SequenceFormat::thd;
  if (text == "bshd") return SequenceFormat::bshd;
  throw ParseError("LLM input '" + text + "' is not image-only, thd or bshd");
}

inline std::vector<std::vector<ImageSpan>> parse_images(const std::string& text) {
  std::vector<std::vector<ImageSpan>> samples;
  std::int64_t images = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t slash = text.find('/', pos);
    if (slash == std::string::npos) slash = text.size();
    std::string item = text.substr(pos, slash - pos);
    pos = slash + 1;
    std::int64_t repeat = 1;
    const std::size_t star = item.find('*');
    if (star != std::string::npos) {
      repeat = parse_integer(item.substr(star + 1), 1, kMaxSamples, "sample repeat in '" + item + "'");
      item = item.substr(0, star);
    }
    std::vector<ImageSpan> sample;
    std::size_t at = 0;
    while (!item.empty() && at <= item.size()) {
      std::size_t comma = item.find(',', at);
      if (comma == std::string::npos) comma = item.size();
      const std::string image = item.substr(at, comma - at);
      at = comma + 1;
      const std::size_t plus = image.find('+');
      if (plus == std::string::npos) {
        throw ParseError("image '" + image + "' must be OFFSET+TOKENS (e.g. 3+576)");
      }
      sample.push_back(ImageSpan{parse_integer(image.substr(0, plus), 0, INT64_MAX, "image offset"),
                                 parse_integer(image.substr(plus + 1), 0, INT64_MAX, "image tokens")});
    }
    images += repeat * static_cast<std::int64_t>(std::max<std::size_t>(sample.size(), 1));
    if (static_cast<std::int64_t>(samples.size()) + repeat > kMaxSamples || images > kMaxImages) {
      throw ParseError("image list '" + text.substr(0, 40) + "...' has more than " + std::to_string(kMaxSamples) +
                       " samples or " + std::to_string(kMaxImages) + " images");
    }
    samples.insert(samples.end(), static_cast<std::size_t>(repeat), sample);
  }
  return samples;
}

inline std::int64_t parse_element_size(const std::string& text) {
  if (text == "bf16" || text == "fp16") return 2;
  if (text == "fp32") return 4;
  if (text == "fp8" || text == "int8") return 1;
  if (!text.empty() && text[0] >= '0' && text[0] <= '9')
    return parse_integer(text, 1, 1 << 20, "element size");
  throw ParseError("dtype '" + text + "' is not one of bf16, fp16, fp32, fp8, int8 or a byte count");
}

}  // namespace zipccl::hetero
