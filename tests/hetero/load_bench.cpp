// Replica load under each assignment rule, dynamic-resolution batches: the encoder table of
// BENCHMARKS.md section 3 (image tokens per replica) and the LLM's with a combined input (positions
// per replica: text, images and padding), where the balanced rule weighs samples by what the LLM
// computes. A benchmark, not a test: its figures go into BENCHMARKS.md.
//   hetero_load_bench [batches, default 1000] [seed, default 1]
// Each batch: 64 samples of 1-16 images of 64-2,500 tokens (uniform; drawn as
// HeteroAssignment.DynamicResolutionBatchIsBalanced draws them), then per sample a text length,
// uniform in a range, from a second generator (so the image tokens do not depend on the text).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "zipccl/hetero/batch.h"

using namespace zipccl::hetero;

namespace {

constexpr int kSamples = 64;

struct Stats {
  std::vector<double> v;
  std::string text() {
    std::sort(v.begin(), v.end());
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3fx / %.3fx / %.3fx", v[v.size() / 2], v[v.size() * 95 / 100], v.back());
    return buf;
  }
};

// An LLM with tp 4 and sequence parallelism (pad multiple 4) or an encoder with tp 1, dp replicas.
Layout make_layout(int dp) {
  LayoutSpec spec;
  spec.world_size = 4 * dp;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, true, 0, -1};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, -1});
  return Layout(spec);
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 1000;
  const unsigned long long seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const int dps[] = {8, 16, 32};
  struct TextRange {
    const char* name;
    std::int64_t lo, hi;
  };
  const TextRange texts[] = {{"text 64-2,048", 64, 2048}, {"text 64-32,768", 64, 32768}};
  std::printf("%d batches of %d samples, seed %llu; max/mean per replica: median / p95 / worst\n\n", batches,
              kSamples, seed);
  // Encoder: image tokens per replica (1 replica per encoder rank: dp = world).
  std::printf("encoder (image tokens)\n| dp | contiguous | balanced |\n| --- | --- | --- |\n");
  for (int dp : dps) {
    const Layout layout = make_layout(dp / 4 > 0 ? dp / 4 : 1);  // encoder tp 1 over 4 * (dp / 4) ranks
    const Module& enc = layout.encoder(0);
    std::mt19937_64 rng(seed);
    Stats contiguous, balanced;
    for (int b = 0; b < batches; ++b) {
      BoundaryBatch batch(std::vector<std::int64_t>(kSamples, 0), 1, 2);
      for (auto& t : batch.tokens) {
        const int images = 1 + static_cast<int>(rng() % 16);
        for (int k = 0; k < images; ++k) t += 64 + static_cast<std::int64_t>(rng() % (2500 - 64 + 1));
      }
      contiguous.v.push_back(module_load(enc, batch).imbalance());
      batch.encoder_assignment.rule = AssignmentRule::balanced;
      balanced.v.push_back(module_load(enc, batch).imbalance());
    }
    std::printf("| %d | %s | %s |\n", enc.dp(), contiguous.text().c_str(), balanced.text().c_str());
  }
  // LLM: positions per replica; the old rule (balanced by image tokens) through a given map.
  for (SequenceFormat format : {SequenceFormat::thd, SequenceFormat::bshd}) {
    for (const TextRange& text : texts) {
      std::printf("\nLLM %s, %s (positions, tp 4 sp: pad multiple 4)\n", sequence_format_name(format), text.name);
      std::printf("| dp | contiguous | balanced by image tokens (before) | balanced by positions |\n");
      std::printf("| --- | --- | --- | --- |\n");
      for (int dp : dps) {
        const Layout layout = make_layout(dp);
        const Module& llm = layout.llm();
        std::mt19937_64 rng(seed), text_rng(seed ^ 0x38);
        Stats contiguous, by_tokens, by_positions;
        for (int b = 0; b < batches; ++b) {
          BoundaryBatch batch(std::vector<std::int64_t>(kSamples, 0), 1, 2);
          LlmSequence& q = batch.llm_sequence;
          q.format = format;
          for (auto& t : batch.tokens) {
            const int images = 1 + static_cast<int>(rng() % 16);
            std::vector<ImageSpan> spans;
            std::int64_t at = 0;
            for (int k = 0; k < images; ++k) {
              const std::int64_t n = 64 + static_cast<std::int64_t>(rng() % (2500 - 64 + 1));
              spans.push_back(ImageSpan{at, n});
              at += n;
              t += n;
            }
            // The text follows the images (where it sits does not change the load).
            q.length.push_back(at + text.lo + static_cast<std::int64_t>(text_rng() % (text.hi - text.lo + 1)));
            q.images.push_back(std::move(spans));
          }
          validate_batch(batch, llm);
          contiguous.v.push_back(module_load(llm, batch).imbalance());
          batch.llm_assignment =
              SampleAssignment{AssignmentRule::given, assign_replicas(batch.tokens, llm.dp(), {AssignmentRule::balanced, {}})};
          by_tokens.v.push_back(module_load(llm, batch).imbalance());
          batch.llm_assignment = SampleAssignment{AssignmentRule::balanced, {}};
          by_positions.v.push_back(module_load(llm, batch).imbalance());
        }
        std::printf("| %d | %s | %s | %s |\n", llm.dp(), contiguous.text().c_str(), by_tokens.text().c_str(),
                    by_positions.text().c_str());
      }
    }
  }
  return 0;
}
