// `zipccl plan`: the groups and the boundary traffic of a heterogeneous-TP layout (zipccl::hetero),
// compared with the leader+broadcast scheme and with the lower bounds (hetero/traffic.h).
//
// Exit status: 0 printed, 2 bad usage or an invalid layout/batch (the message names the problem),
// 1 anything else.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "common/units.h"
#include "zipccl/hetero/groups.h"
#include "zipccl/hetero/parse.h"
#include "zipccl/hetero/plan.h"
#include "zipccl/hetero/rank_plan.h"
#include "zipccl/hetero/schedule.h"
#include "zipccl/hetero/traffic.h"

namespace zipccl {
namespace tools {
namespace {

using namespace zipccl::hetero;
using Clock = std::chrono::steady_clock;

const char kUsage[] =
    "usage: zipccl plan --world N --llm SPEC --encoder SPEC [--encoder SPEC ...]\n"
    "                   (--samples B --tokens T | --tokens-list LIST) --hidden H [--dtype bf16]\n"
    "                   [--assign contiguous|balanced|LIST] [--llm-assign contiguous|balanced|LIST]\n"
    "                   [--llm-input image-only|thd|bshd --seq-lens LIST (--images LIST | --image-offset N)\n"
    "                    [--pad-multiple N] [--padded-length N]]\n"
    "                   [--strategy direct|scatter-allgather|automatic|both] [--direction "
    "forward|backward|both]\n"
    "                   [--json] [--summary] [--transfers] [--max-groups N] [--max-transfers N] [--rank R]\n"
    "\n"
    "Prints the rank groups of a multimodal layout and, for each encoder, the traffic of the boundary\n"
    "plan that moves its outputs into the LLM (forward) and their gradients back (backward): bytes each\n"
    "rank sends and receives, and the most any rank sends and receives against the leader+broadcast\n"
    "scheme and the lower bounds. Only the LLM's first pipeline stage receives; an encoder's last stage\n"
    "sends.\n"
    "\n"
    "  --world N            number of ranks\n"
    "  --llm SPEC           the LLM, e.g. tp=4,pp=2,ranks=8-39\n"
    "  --encoder SPEC       an encoder (repeat for several), e.g. name=vision,tp=2,dp=4,ranks=0-7\n"
    "      SPEC keys: name=STR tp=N cp=N pp=N dp=N (checked; it is derived) sp (sequence parallel)\n"
    "                 ranks=A-B (default: all ranks, i.e. colocated) order=tp-cp-dp-pp (fastest first)\n"
    "  --samples B          samples in the global micro-batch (with --tokens)\n"
    "  --tokens T           encoder output tokens per sample, the same for all\n"
    "  --tokens-list LIST   tokens per sample, e.g. 576,144x3,0 (COUNTxREPEAT for runs)\n"
    "  --hidden H           elements per token\n"
    "  --dtype D            bf16 (default), fp16, fp32, fp8, int8 or a byte count\n"
    "  --assign A           samples -> encoder replicas: contiguous (default: blocks by count),\n"
    "                       balanced (by load, heaviest sample first onto the replica least loaded\n"
    "                       after taking it), or a replica per sample, e.g. 0,1,1,0 or 3x4\n"
    "                       (COUNTxREPEAT); an encoder's load is its image tokens\n"
    "  --llm-assign A       the same for the LLM's replicas; its load is its image tokens with\n"
    "                       image-only input, its positions with thd (padded sequence lengths) or bshd\n"
    "                       (samples x padded length)\n"
    "  --llm-input F        how the LLM keeps its input: image-only (default: the image tokens alone,\n"
    "                       cut by cp/sp per sample), or the combined text+image sequence, packed (thd:\n"
    "                       samples concatenated, cu_seqlens) or padded (bshd: [b, s]); cp cuts each\n"
    "                       padded sequence into 2*cp chunks (zigzag), sp cuts the local sequence over\n"
    "                       tp; each image row goes to the ranks holding its position\n"
    "  --seq-lens LIST      combined sequence length (text + image tokens) per sample, token-list form;\n"
    "                       one value applies to every sample\n"
    "  --images LIST        each sample's images as OFFSET+TOKENS, comma-separated, samples separated by\n"
    "                       '/', SPEC*N for N equal samples: 3+576,700+576/10+1024*3; images ascending,\n"
    "                       disjoint, at least one token each; an empty spec is a sample without\n"
    "                       images ('' alone: no sample has any); one sample spec applies to every\n"
    "                       sample (of --samples, --tokens-list or --seq-lens); gives the tokens when\n"
    "                       --tokens* is absent\n"
    "  --image-offset N     instead of --images: one image per sample of tokens > 0, at position N\n"
    "  --pad-multiple N     pad each sequence to a multiple of N (default: 2*cp if cp > 1, times tp\n"
    "                       with sp: Megatron-LM's)\n"
    "  --padded-length N    bshd: every sample padded to N, a multiple of the pad multiple (default:\n"
    "                       its replica's longest, rounded up)\n"
    "  --strategy S         direct, scatter-allgather, automatic (the one sending less), or both (default)\n"
    "  --direction D        forward, backward, or both (default)\n"
    "  --json               one JSON document for machines instead of text\n"
    "  --summary            omit the per-rank table (and, with --json, the full group lists)\n"
    "  --transfers          also list every transfer\n"
    "  --max-groups N       groups printed per family in text (default 8; 0: all)\n"
    "  --rank R             also plan rank R alone (per-rank planning) with each strategy: its time,\n"
    "                       and whether it equals R's share of the world plan\n"
    "  --max-transfers N    stop with an error when one plan needs more transfers (default 4194304)\n"
    "\n"
    "Limits: --world up to 1048576 ranks, up to 1048576 samples; byte counts that would overflow\n"
    "64 bits are errors. Options other than --encoder may be given once.\n"
    "\n"
    "example: zipccl plan --world 40 --encoder name=vision,tp=2,dp=4,ranks=0-7 --llm tp=4,pp=2,ranks=8-39 "
    "\\\n"
    "           --samples 8 --tokens 576 --hidden 4096 --dtype bf16\n";

struct UsageError {
  std::string message;
};

struct Options {
  int world = 0;
  std::string llm;
  std::vector<std::string> encoders;
  std::int64_t samples = -1;
  std::int64_t tokens = -1;
  std::string tokens_list;
  std::int64_t hidden = 0;
  std::string dtype = "bf16";
  std::vector<Strategy> strategies{Strategy::direct, Strategy::scatter_allgather};
  std::vector<Direction> directions{Direction::forward, Direction::backward};
  bool json = false;
  bool summary = false;
  bool transfers = false;
  int max_groups = 8;
  int rank = -1;
  std::size_t max_transfers = kDefaultMaxTransfers;
  SampleAssignment encoder_assignment;
  SampleAssignment llm_assignment;
  SequenceFormat llm_input = SequenceFormat::image_only;
  std::string seq_lens;
  std::string images;
  bool images_given = false;  // "" is a sample spec too: a sample without images
  std::int64_t image_offset = -1;
  std::int64_t pad_multiple = 0;
  std::int64_t padded_length = 0;
};

// A number with a limit that says what the limit protects (parse_integer's "outside 1..N" does not).
std::int64_t parse_limited(const std::string& text, std::int64_t min, std::int64_t limit,
                           const std::string& what, const char* why) {
  const std::int64_t v = parse_integer(text, min, INT64_MAX, what);
  if (v > limit) {
    throw UsageError{what + " " + text + " is above the limit of " + std::to_string(limit) + " (" + why + ")"};
  }
  return v;
}

void check_options(const Options& o);

Options parse_options(int argc, char** argv) {
  Options o;
  bool have_world = false, have_llm = false;
  std::vector<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const std::size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    // Only --encoder repeats; a second --world would otherwise silently win.
    if (arg != "--encoder" && std::find(seen.begin(), seen.end(), arg) != seen.end()) {
      throw UsageError{arg + " given twice"};
    }
    seen.push_back(arg);
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError{arg + " needs a value"};
      return argv[++i];
    };
    auto take_nonempty = [&]() -> std::string {
      std::string v = take();
      if (v.empty()) throw UsageError{arg + " is empty (give a module spec, e.g. tp=4)"};
      return v;
    };
    auto take_list = [&]() -> std::string {
      std::string v = take();
      if (v.empty()) throw UsageError{arg + " is empty"};
      return v;
    };
    auto flag = [&] {
      if (inline_value) throw UsageError{arg + " takes no value"};
    };
    if (arg == "--world") {
      o.world = static_cast<int>(parse_limited(take(), 1, kMaxWorldSize, "--world",
                                               "ranks; plans keep tables per rank: kMaxWorldSize"));
      have_world = true;
    } else if (arg == "--llm") {
      o.llm = take_nonempty();
      have_llm = true;
    } else if (arg == "--encoder") {
      o.encoders.push_back(take_nonempty());
    } else if (arg == "--samples") {
      o.samples = parse_limited(take(), 0, kMaxSamples, "--samples", "samples per batch: kMaxSamples");
    } else if (arg == "--max-transfers") {
      o.max_transfers = static_cast<std::size_t>(parse_integer(take(), 1, INT64_MAX, "--max-transfers"));
    } else if (arg == "--tokens") {
      o.tokens = parse_integer(take(), 0, INT64_MAX, "--tokens");
    } else if (arg == "--tokens-list") {
      o.tokens_list = take_list();
    } else if (arg == "--hidden") {
      o.hidden = parse_integer(take(), 1, INT64_MAX, "--hidden");
    } else if (arg == "--assign") {
      o.encoder_assignment = parse_assignment(take());
    } else if (arg == "--llm-assign") {
      o.llm_assignment = parse_assignment(take());
    } else if (arg == "--llm-input") {
      o.llm_input = parse_sequence_format(take());
    } else if (arg == "--seq-lens") {
      o.seq_lens = take_list();
    } else if (arg == "--images") {
      o.images = take();
      o.images_given = true;
    } else if (arg == "--image-offset") {
      o.image_offset = parse_integer(take(), 0, INT64_MAX, "--image-offset");
    } else if (arg == "--pad-multiple") {
      o.pad_multiple = parse_integer(take(), 1, INT64_MAX, "--pad-multiple");
    } else if (arg == "--padded-length") {
      o.padded_length = parse_integer(take(), 1, INT64_MAX, "--padded-length");
    } else if (arg == "--dtype") {
      o.dtype = take();
    } else if (arg == "--strategy") {
      const std::string s = take();
      if (s == "direct") {
        o.strategies = {Strategy::direct};
      } else if (s == "scatter-allgather" || s == "scatter_allgather") {
        o.strategies = {Strategy::scatter_allgather};
      } else if (s == "automatic" || s == "auto") {
        o.strategies = {Strategy::automatic};
      } else if (s == "both") {
        o.strategies = {Strategy::direct, Strategy::scatter_allgather};
      } else {
        throw UsageError{"--strategy must be direct, scatter-allgather, automatic or both (got '" + s + "')"};
      }
    } else if (arg == "--direction") {
      const std::string d = take();
      if (d == "forward") {
        o.directions = {Direction::forward};
      } else if (d == "backward") {
        o.directions = {Direction::backward};
      } else if (d == "both") {
        o.directions = {Direction::forward, Direction::backward};
      } else {
        throw UsageError{"--direction must be forward, backward or both (got '" + d + "')"};
      }
    } else if (arg == "--json") {
      flag();
      o.json = true;
    } else if (arg == "--summary") {
      flag();
      o.summary = true;
    } else if (arg == "--transfers") {
      flag();
      o.transfers = true;
    } else if (arg == "--rank") {
      o.rank = static_cast<int>(parse_integer(take(), 0, INT32_MAX, "--rank"));
    } else if (arg == "--max-groups") {
      o.max_groups = static_cast<int>(parse_integer(take(), 0, 1 << 30, "--max-groups"));
    } else {
      throw UsageError{"unknown option '" + std::string(argv[i]) + "'"};
    }
  }
  if (!have_world) throw UsageError{"--world is required"};
  if (!have_llm) throw UsageError{"--llm is required"};
  check_options(o);
  return o;
}

// What the options say together: the batch given one way, the combined-sequence options together.
void check_options(const Options& o) {
  if (o.encoders.empty()) throw UsageError{"at least one --encoder is required"};
  if (o.hidden == 0) throw UsageError{"--hidden is required"};
  if (o.tokens_list.empty()) {
    if ((o.tokens < 0 || o.samples < 0) && !o.images_given)
      throw UsageError{"give --samples and --tokens, or --tokens-list (or --images)"};
  } else if (o.tokens >= 0) {
    throw UsageError{"give --tokens or --tokens-list, not both"};
  }
  const bool combined = o.llm_input != SequenceFormat::image_only;
  const char* sequence_option = !o.seq_lens.empty()    ? "--seq-lens"
                                : o.images_given        ? "--images"
                                : o.image_offset >= 0   ? "--image-offset"
                                : o.pad_multiple > 0    ? "--pad-multiple"
                                : o.padded_length > 0   ? "--padded-length"
                                                        : nullptr;
  if (!combined && sequence_option != nullptr) {
    throw UsageError{std::string(sequence_option) + " describes the combined sequence: give --llm-input thd or bshd"};
  }
  if (combined) {
    if (o.seq_lens.empty()) throw UsageError{"--llm-input thd/bshd needs --seq-lens"};
    if (o.images_given == (o.image_offset >= 0)) throw UsageError{"--llm-input thd/bshd needs --images or --image-offset (one of them)"};
    if (o.padded_length > 0 && o.llm_input != SequenceFormat::bshd) throw UsageError{"--padded-length is for --llm-input bshd"};
  }
}

// A per-sample list of n entries; one entry stands for every sample.
template <class T>
std::vector<T> per_sample(std::vector<T> list, std::size_t n, const char* option) {
  if (list.size() == 1 && n != 1) return std::vector<T>(n, list[0]);
  if (list.size() != n) {
    throw UsageError{std::string(option) + " has " + std::to_string(list.size()) + " samples, the batch " +
                     std::to_string(n) + ": give one per sample, or one for every sample"};
  }
  return list;
}

// The batch's tokens and (thd/bshd) the LLM's combined sequence from the options.
void fill_batch(const Options& o, BoundaryBatch& batch) {
  std::vector<std::vector<ImageSpan>> images;
  if (o.images_given) images = parse_images(o.images);
  if (!o.tokens_list.empty()) {
    batch.tokens = parse_token_list(o.tokens_list);
    if (o.samples >= 0 && o.samples != static_cast<std::int64_t>(batch.tokens.size())) {
      throw UsageError{"--samples " + std::to_string(o.samples) + " but --tokens-list has " +
                       std::to_string(batch.tokens.size()) + " entries"};
    }
  } else if (o.tokens >= 0) {
    batch.tokens.assign(static_cast<std::size_t>(o.samples), o.tokens);
  } else {
    // The batch size: --samples, or the sample specs, or (one spec for every sample) --seq-lens.
    std::size_t n = images.size();
    if (o.samples >= 0) {
      n = static_cast<std::size_t>(o.samples);
    } else if (n == 1) {
      n = parse_token_list(o.seq_lens).size();
    }
    images = per_sample(std::move(images), n, "--images");
    for (const auto& sample : images) {
      std::int64_t sum = 0;
      for (const ImageSpan& im : sample) sum = detail::checked_add(sum, im.tokens, "image tokens of a sample");
      batch.tokens.push_back(sum);
    }
  }
  if (o.llm_input == SequenceFormat::image_only) return;
  LlmSequence& q = batch.llm_sequence;
  const std::size_t n = batch.tokens.size();
  q.format = o.llm_input;
  q.length = per_sample(parse_token_list(o.seq_lens), n, "--seq-lens");
  if (o.image_offset >= 0) {
    for (std::int64_t t : batch.tokens) {
      q.images.push_back(t > 0 ? std::vector<ImageSpan>{ImageSpan{o.image_offset, t}} : std::vector<ImageSpan>{});
    }
  } else {
    q.images = per_sample(std::move(images), n, "--images");
  }
  q.pad_multiple = o.pad_multiple;
  q.padded_length = o.padded_length;
}

// ---- formatting ----

std::string human_bytes(std::int64_t b) { return units::human_size(static_cast<double>(b)); }

// "0-3,8,10-11": ascending runs compressed; other orders listed as given.
std::string rank_list_text(const RankList& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

std::string span_text(const Module& m) {
  return m.num_ranks() == 1 ? std::to_string(m.first_rank())
                            : std::to_string(m.first_rank()) + "-" + std::to_string(m.end_rank() - 1);
}

// "vision t1 d0 | llm t3 d1 p0": the rank's coordinates in each module that has it.
std::string role_text(const Layout& layout, int rank) {
  std::string s;
  for (const Module& m : layout.modules()) {
    if (!m.contains(rank)) continue;
    const Coords c = m.coords(rank);
    if (!s.empty()) s += " | ";
    s += m.name() + " t" + std::to_string(c.tp);
    if (m.cp() > 1) s += " c" + std::to_string(c.cp);
    s += " d" + std::to_string(c.dp);
    if (m.pp() > 1) s += " p" + std::to_string(c.pp);
  }
  return s;
}

std::string percent_over(std::int64_t value, std::int64_t bound) {
  char buf[32];
  if (bound == 0) return value == 0 ? "+0.00%" : "n/a";
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100.0 * (static_cast<double>(value) - bound) / bound);
  return buf;
}

std::string ratio(std::int64_t a, std::int64_t b) {
  char buf[32];
  if (b == 0) return a == 0 ? "1.00x" : "n/a";
  std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(a) / b);
  return buf;
}

// Minimal JSON writer: objects and arrays with comma bookkeeping.
class Json {
 public:
  void open(char c) {
    comma();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    out_ += c;
    first_.pop_back();
  }
  void key(const std::string& k) {
    comma();
    string(k);
    out_ += ':';
    after_key_ = true;
  }
  void value(const std::string& v) {
    comma();
    string(v);
  }
  void value(const char* v) { value(std::string(v)); }
  void value(std::int64_t v) {
    comma();
    out_ += std::to_string(v);
  }
  void value(int v) { value(static_cast<std::int64_t>(v)); }
  void value(bool v) {
    comma();
    out_ += v ? "true" : "false";
  }
  void value(double v) {
    comma();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ += buf;
  }
  void ranks(const RankList& r) {
    open('[');
    for (int x : r) value(x);
    close(']');
  }
  template <class T>
  void field(const std::string& k, const T& v) {
    key(k);
    value(v);
  }
  const std::string& text() const { return out_; }

 private:
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void string(const std::string& s) {
    out_ += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ += buf;
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

// ---- the report ----

struct BoundaryReport {
  int encoder;
  Direction direction;
  Strategy strategy;
  BoundaryPlan plan;
  TrafficSummary traffic;
  std::size_t messages = 0;
  double plan_seconds = 0;
};

// --rank: one rank planned alone with one strategy, against its share of the world's plan.
struct RankCheck {
  int rank = -1;  // -1: not asked
  Strategy strategy = Strategy::direct;
  Strategy chosen = Strategy::direct;
  std::size_t transfers = 0;
  double seconds = 0;
  bool matches = false;
};

struct DirectionRefs {
  int encoder;
  Direction direction;
  LowerBounds bounds;
  TrafficSummary leader;
  std::vector<RankCheck> rank_checks;  // one per strategy asked, with --rank
};

RankCheck check_rank(const Options& o, const Layout& layout, const BoundaryBatch& batch, int e, Direction dir,
                     Strategy strategy) {
  RankCheck c;
  c.rank = o.rank;
  c.strategy = strategy;
  PlanOptions options;
  options.strategy = strategy;
  options.max_transfers = o.max_transfers;
  const auto t0 = Clock::now();
  const RankPlan mine = plan_rank(layout, e, batch, dir, o.rank, options);
  c.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  c.transfers = mine.num_transfers();
  c.chosen = mine.strategy;
  const BoundaryPlan world = plan_boundary(layout, e, batch, dir, options);
  c.matches = mine.strategy == world.strategy && mine.source_bytes == world.source_bytes[o.rank] &&
              mine.destination_bytes == world.destination_bytes[o.rank];
  // A rank plan stops after the last phase the rank takes part in (rank_plan.h): later world
  // phases must hold nothing of it.
  for (std::size_t p = 0; c.matches && p < std::max(world.phases.size(), mine.phases.size()); ++p) {
    std::size_t k = 0;
    static const std::vector<Transfer> none;
    const std::vector<Transfer>& have = p < mine.phases.size() ? mine.phases[p] : none;
    for (const Transfer& t : p < world.phases.size() ? world.phases[p] : none) {
      if (t.src != o.rank && t.dst != o.rank) continue;
      c.matches = c.matches && k < have.size() && t == have[k];
      ++k;
    }
    c.matches = c.matches && k == have.size();
  }
  return c;
}

// "direct", or "automatic: direct" when automatic chose.
std::string strategy_label(const BoundaryReport& r) {
  std::string s = strategy_name(r.strategy);
  if (r.strategy == Strategy::automatic) s += std::string(": ") + strategy_name(r.plan.strategy);
  return s;
}

std::size_t count_messages(const BoundaryPlan& plan) {
  std::size_t n = 0;
  for (const RankSchedule& s : make_all_schedules(plan)) {
    for (const PhaseOps& p : s.phases) n += p.sends.size();
  }
  return n;
}

// The batch, the LLM's input and each module's load per replica.
void print_batch(const Layout& layout, const BoundaryBatch& batch) {
  std::int64_t total_tokens = 0;
  for (std::int64_t t : batch.tokens) total_tokens += t;
  std::printf("batch: %d samples, %" PRId64 " tokens, hidden %" PRId64 ", %" PRId64
              " bytes per element: %s per token, %s in all\n",
              batch.num_samples(), total_tokens, batch.hidden, batch.element_size,
              human_bytes(batch.row_bytes()).c_str(), human_bytes(total_tokens * batch.row_bytes()).c_str());
  const LlmSequence& q = batch.llm_sequence;
  if (q.format == SequenceFormat::image_only) {
    std::printf("llm input: image-only (each sample's image tokens, cut by cp and sp on their own)\n");
  } else {
    std::int64_t positions = 0, images = 0;
    for (std::size_t s = 0; s < q.length.size(); ++s) {
      positions += q.length[s];
      images += static_cast<std::int64_t>(q.images[s].size());
    }
    const Module& llm = layout.llm();
    std::printf("llm input: %s (%s), %" PRId64 " images in %" PRId64 " positions (text + image tokens), "
                "padded to a multiple of %" PRId64 "%s\n",
                sequence_format_name(q.format), q.format == SequenceFormat::thd ? "packed" : "padded [b, s]",
                images, positions, sequence_pad_multiple(llm, batch),
                q.padded_length > 0 ? (", every sample to " + std::to_string(q.padded_length)).c_str() : "");
    if (q.format == SequenceFormat::thd && llm.dp() > 0) {
      const std::vector<std::int64_t> cu = thd_cu_seqlens(llm, batch, 0);
      std::printf("  replica 0 cu_seqlens:");
      for (std::size_t i = 0; i < cu.size() && i < 17; ++i) std::printf(" %" PRId64, cu[i]);
      std::printf("%s\n", cu.size() > 17 ? " ..." : "");
    }
  }
  std::printf("load per data-parallel replica (the busiest one sets the step time):\n");
  for (const Module& m : layout.modules()) {
    const ReplicaLoad load = module_load(m, batch);
    std::printf("  %-10s %-10s dp %-5d max %" PRId64 ", mean %.1f, max/mean %.2fx (%s)\n", m.name().c_str(),
                assignment_rule_name(batch.assignment(m).rule), m.dp(), load.max, load.mean, load.imbalance(),
                load.measure);
  }

}

void print_text(const Options& o, const Layout& layout, const BoundaryBatch& batch,
                const std::vector<GroupFamily>& families, const std::vector<BoundaryReport>& reports,
                const std::vector<DirectionRefs>& refs, double total_seconds) {
  std::printf("layout: %d ranks\n", layout.world_size());
  for (const Module& m : layout.modules()) {
    std::string where = m.role() == Role::llm
                            ? ""
                            : (layout.colocated(layout.find_encoder(m.name())) ? "colocated" : "separate");
    std::printf("  %-10s %-7s ranks %-11s tp %-3d cp %-3d pp %-3d dp %-5d sp %-3s order %s%s%s\n",
                m.name().c_str(), m.role() == Role::llm ? "llm" : "encoder", span_text(m).c_str(), m.tp(),
                m.cp(), m.pp(), m.dp(), m.sequence_parallel() ? "on" : "off", to_string(m.order()).c_str(),
                where.empty() ? "" : "  ", where.c_str());
  }
  print_batch(layout, batch);
  std::printf("\ngroups:\n");
  for (const GroupFamily& f : families) {
    const Module& m = layout.modules()[f.module];
    const std::size_t size = f.groups.empty() ? 0 : f.groups[0].size();
    if (f.kind == GroupKind::boundary) {
      std::printf("  %-10s boundary: %zu ranks: %s\n", m.name().c_str(), size,
                  rank_list_text(f.groups[0]).c_str());
      continue;
    }
    std::printf("  %-10s %-14s %zu groups of %zu:", m.name().c_str(), group_kind_name(f.kind),
                f.groups.size(), size);
    const std::size_t shown =
        o.max_groups == 0 ? f.groups.size() : std::min<std::size_t>(o.max_groups, f.groups.size());
    for (std::size_t g = 0; g < shown; ++g) std::printf(" [%s]", rank_list_text(f.groups[g]).c_str());
    if (shown < f.groups.size()) std::printf(" ... (%zu more)", f.groups.size() - shown);
    std::printf("\n");
  }

  for (const DirectionRefs& ref : refs) {
    const std::string enc = layout.encoder(ref.encoder).name();
    const std::string from = ref.direction == Direction::forward ? enc : layout.llm().name();
    const std::string to = ref.direction == Direction::forward ? layout.llm().name() : enc;
    std::printf("\nboundary %s -> %s, %s%s\n", from.c_str(), to.c_str(), direction_name(ref.direction),
                ref.direction == Direction::forward ? " (encoder outputs)" : " (their gradients)");
    for (const BoundaryReport& r : reports) {
      if (r.encoder != ref.encoder || r.direction != ref.direction) continue;
      std::printf("  %s: %zu transfers, %zu messages, %zu phase%s, planned in %.3f ms\n",
                  strategy_label(r).c_str(), r.plan.num_transfers(), r.messages, r.plan.phases.size(),
                  r.plan.phases.size() == 1 ? "" : "s", r.plan_seconds * 1e3);
      if (!o.summary) {
        std::printf("    %-6s %-34s %14s %14s %14s  %s\n", "rank", "role", "sent", "received", "copied",
                    "peers out/in");
        for (int rank = 0; rank < layout.world_size(); ++rank) {
          const RankTraffic& t = r.traffic.ranks[rank];
          if (t.sent == 0 && t.received == 0 && t.copied == 0) continue;
          std::printf("    %-6d %-34s %14s %14s %14s  %d/%d\n", rank, role_text(layout, rank).c_str(),
                      human_bytes(t.sent).c_str(), human_bytes(t.received).c_str(),
                      human_bytes(t.copied).c_str(), t.send_peers, t.recv_peers);
        }
      }
      if (o.transfers) {
        for (std::size_t p = 0; p < r.plan.phases.size(); ++p) {
          for (const Transfer& x : r.plan.phases[p]) {
            std::printf("    phase %zu: %d -> %d sample %d tokens %" PRId64 "-%" PRId64 " %s@%" PRId64
                        " -> @%" PRId64 " %" PRId64 " bytes\n",
                        p, x.src, x.dst, x.sample, x.rows.begin, x.rows.end,
                        x.src_buffer == BufferKind::source ? "src" : "dst", x.src_offset, x.dst_offset,
                        x.bytes);
          }
        }
      }
    }
    for (const RankCheck& c : ref.rank_checks) {
      std::string label = strategy_name(c.strategy);
      if (c.strategy == Strategy::automatic) label += std::string(": ") + strategy_name(c.chosen);
      std::printf("  rank %d alone (plan_rank, %s): %zu transfers in %.3f ms; %s its share of the world plan\n", c.rank,
                  label.c_str(), c.transfers, c.seconds * 1e3, c.matches ? "equals" : "DIFFERS FROM");
    }
    std::printf("  max bytes per rank:\n");
    std::printf("    %-26s %14s %14s %16s %16s\n", "scheme", "sent", "received", "network total",
                "into receiver");
    for (const BoundaryReport& r : reports) {
      if (r.encoder != ref.encoder || r.direction != ref.direction) continue;
      std::printf("    %-26s %14s %14s %16s %16s\n", ("zipccl " + strategy_label(r)).c_str(),
                  human_bytes(r.traffic.max_sent).c_str(), human_bytes(r.traffic.max_received).c_str(),
                  human_bytes(r.traffic.network_bytes).c_str(),
                  human_bytes(r.traffic.boundary_bytes).c_str());
    }
    std::printf("    %-26s %14s %14s %16s %16s\n", "leader+broadcast",
                human_bytes(ref.leader.max_sent).c_str(), human_bytes(ref.leader.max_received).c_str(),
                human_bytes(ref.leader.network_bytes).c_str(),
                human_bytes(ref.leader.boundary_bytes).c_str());
    std::printf("    %-26s %14s %14s\n", "lower bound", human_bytes(ref.bounds.sent).c_str(),
                human_bytes(ref.bounds.received).c_str());
    std::printf("    %-26s %14s\n", "lower bound, holders only",
                human_bytes(ref.bounds.sent_holders_only).c_str());
    for (const BoundaryReport& r : reports) {
      if (r.encoder != ref.encoder || r.direction != ref.direction) continue;
      std::printf(
          "  %s: received %s vs the lower bound, %s of leader+broadcast; sent %s of leader+broadcast\n",
          strategy_label(r).c_str(), percent_over(r.traffic.max_received, ref.bounds.received).c_str(),
          ratio(r.traffic.max_received, ref.leader.max_received).c_str(),
          ratio(r.traffic.max_sent, ref.leader.max_sent).c_str());
    }
  }
  std::printf("\nplanned %d ranks in %.3f ms (layout, groups, plans, bounds, leader model)\n",
              layout.world_size(), total_seconds * 1e3);
}

// The layout of the JSON document, documented in docs/notes/hetero.md; bump on any change that can
// break a reader (renamed or removed keys, changed meaning), not on added keys.
constexpr int kJsonSchemaVersion = 2;

// Per-rank buffer sizes of one boundary (the same for every strategy): what each rank allocates.
void write_buffers(Json& j, const Options& o, const std::vector<BoundaryReport>& reports,
                   const DirectionRefs& ref) {
  const BoundaryPlan* plan = nullptr;
  for (const BoundaryReport& r : reports) {
    if (r.encoder == ref.encoder && r.direction == ref.direction) plan = &r.plan;
  }
  if (plan == nullptr) return;
  std::int64_t max_source = 0, max_destination = 0;
  for (int rank = 0; rank < plan->world_size; ++rank) {
    max_source = std::max(max_source, plan->source_bytes[rank]);
    max_destination = std::max(max_destination, plan->destination_bytes[rank]);
  }
  j.field("max_source_bytes", max_source);
  j.field("max_destination_bytes", max_destination);
  if (o.summary) return;
  j.key("buffers");
  j.open('[');
  for (int rank = 0; rank < plan->world_size; ++rank) {
    if (plan->source_bytes[rank] == 0 && plan->destination_bytes[rank] == 0) continue;
    j.open('{');
    j.field("rank", rank);
    j.field("source_bytes", plan->source_bytes[rank]);
    j.field("destination_bytes", plan->destination_bytes[rank]);
    j.close('}');
  }
  j.close(']');
}

// One plan object of a boundary: its figures, per-rank traffic (unless --summary), transfers.
void write_plan(Json& j, const Options& o, const Layout& layout, const BoundaryReport& r) {
  j.open('{');
  j.field("strategy", strategy_name(r.strategy));
  j.field("chosen", strategy_name(r.plan.strategy));
  j.field("phases", static_cast<std::int64_t>(r.plan.phases.size()));
  j.field("transfer_count", static_cast<std::int64_t>(r.plan.num_transfers()));
  j.field("messages", static_cast<std::int64_t>(r.messages));
  j.field("plan_seconds", r.plan_seconds);
  j.field("max_sent", r.traffic.max_sent);
  j.field("max_received", r.traffic.max_received);
  j.field("network_bytes", r.traffic.network_bytes);
  j.field("into_receiver_bytes", r.traffic.boundary_bytes);
  j.field("copied_bytes", r.traffic.copied_bytes);
  if (!o.summary) {
    j.key("ranks");
    j.open('[');
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      const RankTraffic& t = r.traffic.ranks[rank];
      if (t.sent == 0 && t.received == 0 && t.copied == 0) continue;
      j.open('{');
      j.field("rank", rank);
      j.field("sent", t.sent);
      j.field("received", t.received);
      j.field("copied", t.copied);
      j.field("send_peers", t.send_peers);
      j.field("recv_peers", t.recv_peers);
      j.close('}');
    }
    j.close(']');
  }
  if (o.transfers) {
    j.key("transfers");
    j.open('[');
    for (std::size_t p = 0; p < r.plan.phases.size(); ++p) {
      for (const Transfer& x : r.plan.phases[p]) {
        j.open('{');
        j.field("phase", static_cast<std::int64_t>(p));
        j.field("src", x.src);
        j.field("dst", x.dst);
        j.field("sample", x.sample);
        j.field("token_begin", x.rows.begin);
        j.field("token_end", x.rows.end);
        j.field("src_buffer", x.src_buffer == BufferKind::source ? "source" : "destination");
        j.field("src_offset", x.src_offset);
        j.field("dst_offset", x.dst_offset);
        j.field("bytes", x.bytes);
        j.close('}');
      }
    }
    j.close(']');
  }
  j.close('}');
}

void write_llm_input(Json& j, const Layout& layout, const BoundaryBatch& batch) {
  const LlmSequence& q = batch.llm_sequence;
  j.key("llm_input");
  j.open('{');
  j.field("format", sequence_format_name(q.format));
  if (q.format != SequenceFormat::image_only) {
    j.field("pad_multiple", sequence_pad_multiple(layout.llm(), batch));
    j.field("padded_length", q.padded_length);
    j.key("lengths");
    j.open('[');
    for (std::int64_t n : q.length) j.value(n);
    j.close(']');
    j.key("images");
    j.open('[');
    for (const auto& sample : q.images) {
      j.open('[');
      for (const ImageSpan& im : sample) {
        j.open('[');
        j.value(im.offset);
        j.value(im.tokens);
        j.close(']');
      }
      j.close(']');
    }
    j.close(']');
  }
  j.close('}');
}

void print_json(const Options& o, const Layout& layout, const BoundaryBatch& batch,
                const std::vector<GroupFamily>& families, const std::vector<BoundaryReport>& reports,
                const std::vector<DirectionRefs>& refs, double total_seconds) {
  Json j;
  j.open('{');
  j.field("schema_version", kJsonSchemaVersion);
  j.field("world", layout.world_size());
  j.key("modules");
  j.open('[');
  for (const Module& m : layout.modules()) {
    j.open('{');
    j.field("name", m.name());
    j.field("role", m.role() == Role::llm ? "llm" : "encoder");
    j.field("first_rank", m.first_rank());
    j.field("num_ranks", m.num_ranks());
    j.field("tp", m.tp());
    j.field("cp", m.cp());
    j.field("pp", m.pp());
    j.field("dp", m.dp());
    j.field("sequence_parallel", m.sequence_parallel());
    j.field("order", to_string(m.order()));
    if (m.role() == Role::encoder) j.field("colocated", layout.colocated(layout.find_encoder(m.name())));
    const ReplicaLoad load = module_load(m, batch);
    j.field("assignment", assignment_rule_name(batch.assignment(m).rule));
    j.field("load_measure", load.measure);
    j.field("replica_tokens_max", load.max);
    j.field("replica_tokens_mean", load.mean);
    j.field("load_imbalance", load.imbalance());
    j.close('}');
  }
  j.close(']');
  j.key("batch");
  j.open('{');
  j.key("tokens");
  j.open('[');
  for (std::int64_t t : batch.tokens) j.value(t);
  j.close(']');
  j.field("hidden", batch.hidden);
  j.field("element_size", batch.element_size);
  j.field("row_bytes", batch.row_bytes());
  write_llm_input(j, layout, batch);
  j.close('}');
  j.key("groups");
  j.open('[');
  for (const GroupFamily& f : families) {
    j.open('{');
    j.field("module", layout.modules()[f.module].name());
    j.field("kind", group_kind_name(f.kind));
    j.field("count", static_cast<std::int64_t>(f.groups.size()));
    j.field("size", static_cast<std::int64_t>(f.groups.empty() ? 0 : f.groups[0].size()));
    if (!o.summary) {
      j.key("groups");
      j.open('[');
      for (const RankList& g : f.groups) j.ranks(g);
      j.close(']');
    }
    j.close('}');
  }
  j.close(']');
  j.key("boundaries");
  j.open('[');
  for (const DirectionRefs& ref : refs) {
    j.open('{');
    j.field("encoder", layout.encoder(ref.encoder).name());
    j.field("direction", direction_name(ref.direction));
    j.key("lower_bound");
    j.open('{');
    j.field("max_received", ref.bounds.received);
    j.field("max_sent", ref.bounds.sent);
    j.field("max_sent_holders_only", ref.bounds.sent_holders_only);
    j.close('}');
    j.key("leader_broadcast");
    j.open('{');
    j.field("max_sent", ref.leader.max_sent);
    j.field("max_received", ref.leader.max_received);
    j.field("network_bytes", ref.leader.network_bytes);
    j.field("into_receiver_bytes", ref.leader.boundary_bytes);
    j.close('}');
    write_buffers(j, o, reports, ref);
    if (!ref.rank_checks.empty()) {
      bool all = true;
      for (const RankCheck& c : ref.rank_checks) all = all && c.matches;
      j.key("rank_plan");
      j.open('{');
      j.field("rank", ref.rank_checks[0].rank);
      j.field("matches_world_plan", all);
      j.key("strategies");
      j.open('[');
      for (const RankCheck& c : ref.rank_checks) {
        j.open('{');
        j.field("strategy", strategy_name(c.strategy));
        j.field("chosen", strategy_name(c.chosen));
        j.field("transfer_count", static_cast<std::int64_t>(c.transfers));
        j.field("plan_seconds", c.seconds);
        j.field("matches_world_plan", c.matches);
        j.close('}');
      }
      j.close(']');
      j.close('}');
    }
    j.key("plans");
    j.open('[');
    for (const BoundaryReport& r : reports) {
      if (r.encoder == ref.encoder && r.direction == ref.direction) write_plan(j, o, layout, r);
    }
    j.close(']');
    j.close('}');
  }
  j.close(']');
  j.field("total_seconds", total_seconds);
  j.close('}');
  std::printf("%s\n", j.text().c_str());
}

int run(const Options& o) {
  LayoutSpec spec;
  spec.world_size = o.world;
  spec.llm = parse_module_spec(o.llm);
  if (spec.llm.name.empty()) spec.llm.name = "llm";
  for (const std::string& e : o.encoders) spec.encoders.push_back(parse_module_spec(e));
  BoundaryBatch batch;
  fill_batch(o, batch);
  batch.hidden = o.hidden;
  batch.element_size = parse_element_size(o.dtype);
  batch.encoder_assignment = o.encoder_assignment;
  batch.llm_assignment = o.llm_assignment;
  validate_batch(batch);

  const auto t0 = Clock::now();
  const Layout layout(spec);
  validate_batch(batch, layout.llm());  // what depends on the LLM: a bshd padded length's multiple
  const std::vector<GroupFamily> families = all_group_families(layout);
  std::vector<BoundaryReport> reports;
  std::vector<DirectionRefs> refs;
  for (int e = 0; e < layout.num_encoders(); ++e) {
    for (Direction dir : o.directions) {
      refs.push_back(DirectionRefs{e, dir, lower_bounds(layout, e, batch, dir),
                                   leader_broadcast_traffic(layout, e, batch, dir), {}});
      for (Strategy st : o.strategies) {
        if (o.rank >= 0) refs.back().rank_checks.push_back(check_rank(o, layout, batch, e, dir, st));
      }
      for (Strategy st : o.strategies) {
        const auto p0 = Clock::now();
        PlanOptions options;
        options.strategy = st;
        options.max_transfers = o.max_transfers;
        BoundaryPlan plan = plan_boundary(layout, e, batch, dir, options);
        const double seconds = std::chrono::duration<double>(Clock::now() - p0).count();
        TrafficSummary traffic = summarize(plan, layout);
        const std::size_t messages = count_messages(plan);
        reports.push_back(BoundaryReport{e, dir, st, std::move(plan), std::move(traffic), messages, seconds});
      }
    }
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (o.json) {
    print_json(o, layout, batch, families, reports, refs, total);
  } else {
    print_text(o, layout, batch, families, reports, refs, total);
  }
  return 0;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  try {
    return run(parse_options(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "zipccl plan: %s\n(zipccl plan --help for usage)\n", e.message.c_str());
    return 2;
  } catch (const hetero::ParseError& e) {
    std::fprintf(stderr, "zipccl plan: %s\n(zipccl plan --help for usage)\n", e.what());
    return 2;
  } catch (const hetero::LayoutError& e) {
    std::fprintf(stderr, "zipccl plan: invalid layout: %s\n", e.what());
    return 2;
  } catch (const hetero::BatchError& e) {
    std::fprintf(stderr, "zipccl plan: invalid batch: %s\n", e.what());
    return 2;
  } catch (const hetero::LimitError& e) {
    std::fprintf(stderr, "zipccl plan: too large: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "zipccl plan: out of memory while planning; plan fewer ranks or samples, or lower "
                         "--max-transfers\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zipccl plan: %s\n", e.what());
    return 1;
  }
}

}  // namespace tools
}  // namespace zipccl
