#include "common/settings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/units.h"

namespace zipccl {
namespace net {
namespace {

// The names of a choice's values, in the enum's order.
template <typename E>
struct ChoiceNames;
template <>
struct ChoiceNames<CompressMode> {
  static constexpr const char* kNames[] = {"auto", "always", "never"};
};
template <>
struct ChoiceNames<DtypeHint> {
  static constexpr const char* kNames[] = {"auto", "bf16", "fp16", "fp32"};
};
template <>
struct ChoiceNames<TransportChoice> {
  static constexpr const char* kNames[] = {"socket", "ib", "auto"};
};
template <>
struct ChoiceNames<GpuMode> {
  static constexpr const char* kNames[] = {"off", "on", "auto"};
};
template <>
struct ChoiceNames<GpuLanding> {
  static constexpr const char* kNames[] = {"ordered", "marked"};
};

template <typename E>
const char* choice_name(E v) {
  const auto i = static_cast<size_t>(v);
  return i < std::size(ChoiceNames<E>::kNames) ? ChoiceNames<E>::kNames[i] : "?";
}

template <typename E>
std::string choice_values() {
  std::string out;
  for (const char* n : ChoiceNames<E>::kNames) out += (out.empty() ? "" : "|") + std::string(n);
  return out;
}

// One setting: its name, what it accepts, its doc line, and how to read and show its field. The
// typed constructors below are the only way to make one, so a field and its parser always agree.
struct Entry {
  const char* name;
  std::string values;  // what it accepts, for doctor and the README
  const char* doc;
  // Sets the field from the environment's text, or returns false with what it accepts ("a size in
  // range") and leaves the field as it was.
  std::function<bool(const char* text, std::string* expected)> parse;
  std::function<std::string()> show;
  const char* default_doc = nullptr;  // the default in words, where it depends on the machine
};

template <typename E>
Entry choice(const char* name, E* field, const char* doc) {
  const std::string values = choice_values<E>();
  return {name, values, doc,
          [field, values](const char* v, std::string* expected) {
            for (size_t i = 0; i < std::size(ChoiceNames<E>::kNames); ++i) {
              if (std::strcmp(v, ChoiceNames<E>::kNames[i]) == 0) {
                *field = static_cast<E>(i);
                return true;
              }
            }
            *expected = "one of " + values;
            return false;
          },
          [field] { return std::string(choice_name(*field)); }};
}

Entry size(const char* name, uint64_t* field, uint64_t lo, uint64_t hi, const char* doc) {
  return {name, "size " + units::format_size(lo) + ".." + units::format_size(hi), doc,
          [=](const char* v, std::string* expected) {
            uint64_t x;
            std::string why;
            if (!units::parse_size(v, &x, &why)) {
              // A malformed number reads as "not a size"; say why only when the number was one.
              *expected = why == "no number" ? "a size in range" : "a size in range (" + why + ")";
              return false;
            }
            if (x < lo || x > hi) {
              *expected = "a size in range";
              return false;
            }
            *field = x;
            return true;
          },
          [field] { return units::format_size(*field); }};
}

bool parse_long(const char* v, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return false;
  *out = x;
  return true;
}

Entry integer(const char* name, int* field, long lo, long hi, const char* doc, const char* default_doc = nullptr) {
  return {name, "integer " + std::to_string(lo) + ".." + std::to_string(hi), doc,
          [=](const char* v, std::string* expected) {
            long x;
            if (!parse_long(v, lo, hi, &x)) {
              *expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
              return false;
            }
            *field = static_cast<int>(x);
            return true;
          },
          [field] { return std::to_string(*field); }, default_doc};
}

// A duration stored in `unit`s (units::kMilliseconds or kSeconds), which a bare number is in; "30s",
// "1.5m" are accepted too.
Entry duration(const char* name, int* field, uint64_t unit, long lo, long hi, const char* doc) {
  const std::string u = unit == units::kSeconds ? "s" : "ms";
  return {name, "duration " + std::to_string(lo) + ".." + std::to_string(hi) + " " + u, doc,
          [=](const char* v, std::string* expected) {
            uint64_t x;
            std::string why;
            if (!units::parse_duration(v, unit, &x, &why) || x < static_cast<uint64_t>(lo) ||
                x > static_cast<uint64_t>(hi)) {
              *expected = "a duration in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] " + u;
              return false;
            }
            *field = static_cast<int>(x);
            return true;
          },
          [field] { return std::to_string(*field); }};
}
Entry millis(const char* name, int* field, long lo, long hi, const char* doc) {
  return duration(name, field, units::kMilliseconds, lo, hi, doc);
}
// Whole seconds ("1.5s" is refused: not a whole number of seconds).
Entry seconds(const char* name, int* field, long lo, long hi, const char* doc) {
  return duration(name, field, units::kSeconds, lo, hi, doc);
}

Entry number(const char* name, double* field, const char* doc) {
  return {name, "number >= 0", doc,
          [field](const char* v, std::string* expected) {
            char* end = nullptr;
            const double x = std::strtod(v, &end);
            if (end == v || *end || !(x >= 0)) {
              *expected = "a non-negative number";
              return false;
            }
            *field = x;
            return true;
          },
          [field] {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%g", *field);
            return std::string(buf);
          }};
}

Entry text(const char* name, std::string* field, const char* doc, const char* default_doc = nullptr) {
  return {name, "string", doc,
          [field](const char* v, std::string*) {
            *field = v;
            return true;
          },
          [field] { return *field; }, default_doc};
}

// A thread or socket count as NCCL reads NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD: "auto" (or
// NCCL's -2) or a count; counts above NCCL's caps are accepted and capped where the streams are
// planned, with NCCL's WARN (socket/socket_plan.h).
std::string socket_count_text(int v) {
  if (v == kSocketAuto) return "auto";
  if (v == kSocketUnset) return "unset";
  return std::to_string(v);
}

Entry socket_count(const char* name, int* field, const char* doc) {
  return {name, "auto|integer 0.." + std::to_string(kSocketCountMax), doc,
          [field](const char* v, std::string* expected) {
            long x;
            if (std::strcmp(v, "auto") == 0 || std::strcmp(v, "-2") == 0) {
              *field = kSocketAuto;
              return true;
            }
            if (!parse_long(v, 0, kSocketCountMax, &x)) {
              *expected = "auto or an integer in [0, " + std::to_string(kSocketCountMax) + "]";
              return false;
            }
            *field = static_cast<int>(x);
            return true;
          },
          [field] { return socket_count_text(*field); }};
}

constexpr const char* kIsaValues = "auto|avx512|avx2|neon|scalar";

Entry isa(const char* name, codec::Isa* field, const char* doc) {
  return {name, kIsaValues, doc,
          [field](const char* v, std::string* expected) {
            if (codec::parse_isa(v, field)) return true;
            *expected = std::string("one of ") + kIsaValues;
            return false;
          },
          [field] { return std::string(codec::isa_name(*field)); }};
}

// Never destroyed, as every object of the plugin that lives as long as the process: NCCL's threads and
// ours go on calling in while the process exits and runs static destructors.
Settings& g_settings = *new Settings;
// Parse warnings, logged once the logger is known.
std::vector<std::string>& g_messages = *new std::vector<std::string>;
std::once_flag g_read_once, g_log_once;
// Setting name -> why its value was rejected.
std::map<std::string, std::string>& g_problems = *new std::map<std::string, std::string>;

// The ZIPCCL_ aliases of NCCL's socket variables (merge_socket_alias), read after the registry.
void apply_socket_alias(const char* nccl_name, int* nccl_field, const char* alias_name, int alias) {
  const char* v = std::getenv(nccl_name);
  const bool nccl_given = v && *v && !g_problems.count(nccl_name);
  std::string warning;
  *nccl_field = merge_socket_alias(nccl_name, nccl_given, *nccl_field, alias_name, alias, &warning);
  if (!warning.empty()) g_messages.push_back(warning);
}

std::vector<Entry> registry(Settings* s) {
  return {
      choice("ZIPCCL_COMPRESS", &s->compress, "auto|always|never: compress host messages"),
      size("ZIPCCL_MIN_BYTES", &s->min_bytes, 0, 1ull << 40, "messages smaller than this always go raw"),
      choice("ZIPCCL_DTYPE", &s->dtype, "auto|bf16|fp16|fp32: element type of the traffic"),
      socket_count("NCCL_SOCKET_NTHREADS", &s->socket_nthreads,
                   "socket: helper threads per connection, as NCCL's (auto: by the NIC's vendor, AWS 2, GCP 4, "
                   "else 0; at most 16)"),
      socket_count("NCCL_NSOCKS_PERTHREAD", &s->nsocks_per_thread,
                   "socket: TCP data streams per helper thread, as NCCL's (auto: AWS 8, else 1; at most 64 "
                   "streams; none gives one stream)"),
      socket_count("ZIPCCL_SOCKET_NTHREADS", &s->socket_nthreads_alias,
                   "alias of NCCL_SOCKET_NTHREADS (which wins where both are set)"),
      socket_count("ZIPCCL_NSOCKS_PERTHREAD", &s->nsocks_per_thread_alias,
                   "alias of NCCL_NSOCKS_PERTHREAD (which wins where both are set)"),
      size("ZIPCCL_MIN_CHUNK_BYTES", &s->min_chunk_bytes, 4096, 1ull << 30,
           "smallest piece a message is split into across streams"),
      size("ZIPCCL_INLINE_BYTES", &s->inline_bytes, 0, 1ull << 20, "payloads up to this size travel on the control stream"),
      integer("ZIPCCL_WORKERS", &s->workers, 1, 64, "codec worker threads (process-wide)", "half the cores, 1..4"),
      isa("ZIPCCL_CODEC_ISA", &s->codec_isa,
          "CPU kernel set of the codec (one the CPU lacks: a WARN and the fastest it has)"),
      size("ZIPCCL_SEGMENT_BYTES", &s->segment_bytes, 0, 1ull << 30,
           "messages larger than this go as several frames so encode, copy and transmit overlap (0: off; 4KiB "
           "multiples; TCP only)"),
      integer("ZIPCCL_MAX_REQUESTS", &s->max_requests, 32, 4096, "requests in flight per comm"),
      text("ZIPCCL_STATS_FILE", &s->stats_file, "append per-connection statistics as JSON lines"),
      text("ZIPCCL_STATS_DIR", &s->stats_dir,
           "folder for live per-process snapshots (zipccl-HOST-PID.json and .prom, rewritten atomically; "
           "`zipccl stats` reads them)", "the folder of ZIPCCL_STATS_FILE, if set"),
      seconds("ZIPCCL_STATS_INTERVAL", &s->stats_interval_s, 0, 86400,
              "seconds between live snapshots (0: only at finalize and exit)"),
      number("ZIPCCL_LINK_GBPS", &s->link_gbps, "link speed for the auto policy in Gbit/s (0: measure)"),
      integer("ZIPCCL_PROBE_INTERVAL", &s->probe_interval, 2, 1 << 20,
              "auto: sample the codec every N raw messages (backs off)"),
      millis("ZIPCCL_CONNECT_TIMEOUT_MS", &s->connect_timeout_ms, 100, 3600000, "connect/accept handshake timeout"),
      millis("ZIPCCL_IO_TIMEOUT_MS", &s->io_timeout_ms, 0, 3600000,
             "fail a transfer that makes no progress this long (0: never)"),
      choice("ZIPCCL_TRANSPORT", &s->transport,
             "socket|ib|auto: auto = the fabric decision (README \"Which fabric?\": wrap the node's net plugin, "
             "TCP, or step aside for NCCL's own IB); socket forces TCP; ib = RDMA verbs, opt-in until validated on "
             "RDMA hardware"),
      text("ZIPCCL_NET_INNER", &s->net_inner,
           "another NCCL net plugin to compress over (name as NCCL_NET_PLUGIN, or a path; a comma-separated "
           "list is tried in order, the first that initialises with a device is used; empty or none: none)"),
      text("ZIPCCL_FABRIC_ROOT", &s->fabric_root,
           "tests: read the node's /sys and /etc/nccl.conf under this folder instead of /"),
      integer("ZIPCCL_IB_QPS", &s->ib_qps, 1, 8, "RC queue pairs per RDMA connection"),
      integer("NCCL_IB_TC", &s->ib_tc, 0, kIbTcMax, "RDMA: traffic class of the queue pairs (GRH)"),
      integer("NCCL_IB_SL", &s->ib_sl, 0, kIbSlMax, "RDMA: service level of the queue pairs"),
      integer("NCCL_IB_TIMEOUT", &s->ib_timeout, kIbTimeoutMin, kIbTimeoutMax,
              "RDMA: ACK timeout, 4.096 us * 2^N per try (0 = infinite: refused)"),
      integer("NCCL_IB_RETRY_CNT", &s->ib_retry_cnt, 0, kIbRetryCntMax, "RDMA: retries before a transport error"),
      choice("ZIPCCL_GPU", &s->gpu,
             "off|on|auto: device buffers (NCCL_PTR_CUDA) through the CUDA codec; opt-in (on) until the "
             "device checks pass on a GPU (auto: on where usable, silently)"),
      integer("ZIPCCL_GPU_MAX_SMS", &s->gpu_max_sms, 0, 4096, "GPU path: SMs the codec kernels may fill (0: all)"),
      choice("ZIPCCL_GPU_LANDING", &s->gpu_landing,
             "ordered|marked: device receives land each 128-byte line flag-last (LL128), all or only NCCL-marked"),
  };
}

void read_all() {
  Settings* s = &g_settings;
  // Default worker count: half the cores (the TCP stack and NCCL need the rest), at most 4.
  unsigned hw = std::thread::hardware_concurrency();
  s->workers = hw >= 4 ? static_cast<int>(hw / 2 > 4 ? 4 : hw / 2) : 1;
  for (const Entry& e : registry(s)) {
    const char* v = std::getenv(e.name);
    if (!v || !*v) continue;
    std::string expected;
    if (!e.parse(v, &expected)) {
      const std::string m =
          std::string(e.name) + "='" + v + "' is not " + expected + "; using " + e.show();
      g_messages.push_back(m);
      g_problems[e.name] = m;
    }
  }
  apply_socket_alias("NCCL_SOCKET_NTHREADS", &s->socket_nthreads, "ZIPCCL_SOCKET_NTHREADS",
                     s->socket_nthreads_alias);
  apply_socket_alias("NCCL_NSOCKS_PERTHREAD", &s->nsocks_per_thread, "ZIPCCL_NSOCKS_PERTHREAD",
                     s->nsocks_per_thread_alias);
}

}  // namespace

const Settings& settings() {
  std::call_once(g_read_once, read_all);
  return g_settings;
}

void settings_inner_role() {
  settings();
  g_settings.compress = CompressMode::kNever;
  g_settings.net_inner.clear();
}

void log_settings_once() {
  settings();
  std::call_once(g_log_once, [] {
    for (const std::string& m : g_messages) ZIPCCL_WARN("%s", m.c_str());
    for (const Entry& e : registry(&g_settings)) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_ENV, "%s=%s (%s)", e.name, e.show().c_str(), e.doc);
    }
  });
}

std::vector<SettingInfo> describe_settings() {
  settings();
  Settings defaults;
  std::vector<Entry> def = registry(&defaults);
  std::vector<Entry> cur = registry(&g_settings);
  std::vector<SettingInfo> out;
  for (size_t i = 0; i < cur.size(); ++i) {
    const Entry& e = cur[i];
    SettingInfo info;
    info.name = e.name;
    info.doc = e.doc;
    info.value = e.show();
    info.default_value = e.default_doc ? e.default_doc : def[i].show();
    info.values = e.values;
    const char* v = std::getenv(e.name);
    info.from_env = v && *v;
    auto p = g_problems.find(e.name);
    if (p != g_problems.end()) info.problem = p->second;
    out.push_back(std::move(info));
  }
  return out;
}

std::string format_bytes(uint64_t n) { return units::format_size(n); }

bool parse_bytes(const char* s, uint64_t* out) { return units::parse_size(s, out); }

int merge_socket_alias(const char* nccl_name, bool nccl_given, int nccl_value, const char* alias_name, int alias,
                       std::string* warning) {
  if (alias == kSocketUnset) return nccl_value;
  if (!nccl_given) return alias;
  if (nccl_value != alias) {
    *warning = std::string(alias_name) + "=" + socket_count_text(alias) + " contradicts " + nccl_name + "=" +
               socket_count_text(nccl_value) + "; using " + nccl_name + "'s value (" + alias_name +
               " is its alias)";
  }
  return nccl_value;
}

codec::Isa codec_isa() {
  static const codec::Isa isa = codec::effective_isa(settings().codec_isa);
  return isa;
}

const char* compress_mode_name(CompressMode m) { return choice_name(m); }
const char* transport_name(TransportChoice t) { return choice_name(t); }
const char* gpu_mode_name(GpuMode m) { return choice_name(m); }

}  // namespace net
}  // namespace zipccl
