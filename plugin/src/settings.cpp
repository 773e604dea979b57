#include "settings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "log.h"
#include "rdma_select.h"  // NCCL_IB_* ranges

namespace zipccl {
namespace net {
namespace {

enum class Kind { kBytes, kInt, kDouble, kString, kCompress, kDtype, kTransport, kGpuMode, kGpuLanding, kCodecIsa };

struct Entry {
  const char* name;
  Kind kind;
  const char* doc;
  void* field;
  long lo, hi;  // kInt / kBytes bounds
  // The default in words, where it depends on the machine.
  const char* default_doc = nullptr;
};

constexpr const char* kIsaValues = "auto|avx512|avx2|neon|scalar";

Settings g_settings;
std::vector<std::string> g_messages;  // parse warnings, logged once the logger is known
std::once_flag g_read_once, g_log_once;
std::map<std::string, std::string> g_problems;  // setting name -> why its value was rejected

std::vector<Entry> registry(Settings* s) {
  return {
      {"ZIPCCL_COMPRESS", Kind::kCompress, "auto|always|never: compress host messages", &s->compress, 0, 0},
      {"ZIPCCL_MIN_BYTES", Kind::kBytes, "messages smaller than this always go raw", &s->min_bytes, 0,
       1L << 40},
      {"ZIPCCL_DTYPE", Kind::kDtype, "auto|bf16|fp16|fp32: element type of the traffic", &s->dtype, 0, 0},
      {"ZIPCCL_SOCKET_NTHREADS", Kind::kInt, "helper threads per connection", &s->socket_nthreads, 1, 16},
      {"ZIPCCL_NSOCKS_PERTHREAD", Kind::kInt, "TCP streams per helper thread", &s->nsocks_per_thread, 1, 16},
      {"ZIPCCL_MIN_CHUNK_BYTES", Kind::kBytes, "smallest piece a message is split into across streams",
       &s->min_chunk_bytes, 4096, 1L << 30},
      {"ZIPCCL_INLINE_BYTES", Kind::kBytes, "payloads up to this size travel on the control stream",
       &s->inline_bytes, 0, 1L << 20},
      {"ZIPCCL_WORKERS", Kind::kInt, "codec worker threads (process-wide)", &s->workers, 1, 64,
       "half the cores, 1..4"},
      {"ZIPCCL_CODEC_ISA", Kind::kCodecIsa,
       "CPU kernel set of the codec (one the CPU lacks: a WARN and the fastest it has)",
       &s->codec_isa, 0, 0},
      {"ZIPCCL_SEGMENT_BYTES", Kind::kBytes,
       "messages larger than this go as several frames so encode, copy and transmit overlap (0: off; 4KiB "
       "multiples; TCP only)",
       &s->segment_bytes, 0, 1L << 30},
      {"ZIPCCL_MAX_REQUESTS", Kind::kInt, "requests in flight per comm", &s->max_requests, 32, 4096},
      {"ZIPCCL_STATS_FILE", Kind::kString, "append per-connection statistics as JSON lines", &s->stats_file,
       0, 0},
      {"ZIPCCL_LINK_GBPS", Kind::kDouble, "link speed for the auto policy in Gbit/s (0: measure)",
       &s->link_gbps, 0, 0},
      {"ZIPCCL_PROBE_INTERVAL", Kind::kInt, "auto: sample the codec every N raw messages (backs off)",
       &s->probe_interval, 2, 1 << 20},
      {"ZIPCCL_CONNECT_TIMEOUT_MS", Kind::kInt, "connect/accept handshake timeout", &s->connect_timeout_ms,
       100, 3600000},
      {"ZIPCCL_IO_TIMEOUT_MS", Kind::kInt, "fail a transfer that makes no progress this long (0: never)",
       &s->io_timeout_ms, 0, 3600000},
      {"ZIPCCL_TRANSPORT", Kind::kTransport,
       "socket|ib|auto: ib = RDMA verbs, opt-in until validated on RDMA hardware (auto: ib when an active "
       "port exists)",
       &s->transport, 0, 0},
      {"ZIPCCL_NET_INNER", Kind::kString,
       "another NCCL net plugin to compress over (name as NCCL_NET_PLUGIN, or a path; empty: none)",
       &s->net_inner, 0, 0},
      {"ZIPCCL_IB_QPS", Kind::kInt, "RC queue pairs per RDMA connection", &s->ib_qps, 1, 8},
      {"NCCL_IB_TC", Kind::kInt, "RDMA: traffic class of the queue pairs (GRH)", &s->ib_tc, 0, kIbTcMax},
      {"NCCL_IB_SL", Kind::kInt, "RDMA: service level of the queue pairs", &s->ib_sl, 0, kIbSlMax},
      {"NCCL_IB_TIMEOUT", Kind::kInt, "RDMA: ACK timeout, 4.096 us * 2^N per try (0 = infinite: refused)",
       &s->ib_timeout, kIbTimeoutMin, kIbTimeoutMax},
      {"NCCL_IB_RETRY_CNT", Kind::kInt, "RDMA: retries before a transport error", &s->ib_retry_cnt, 0,
       kIbRetryCntMax},
      {"ZIPCCL_GPU", Kind::kGpuMode,
       "off|on|auto|emulate: device buffers (NCCL_PTR_CUDA) through the CUDA codec; opt-in (on) until the "
       "device checks pass on a GPU (auto: on where usable, silently; emulate: tests only)",
       &s->gpu, 0, 0},
      {"ZIPCCL_GPU_MAX_SMS", Kind::kInt, "GPU path: SMs the codec kernels may fill (0: all)", &s->gpu_max_sms,
       0, 4096},
      {"ZIPCCL_GPU_LANDING", Kind::kGpuLanding,
       "ordered|marked: device receives land each 128-byte line flag-last (LL128), all or only NCCL-marked",
       &s->gpu_landing, 0, 0},
      {"ZIPCCL_GPU_EMULATE_DELAY_US", Kind::kInt, "tests: delay of each emulated device operation",
       &s->gpu_emulate_delay_us, 0, 1000000},
      {"ZIPCCL_GPU_EMULATE_FAIL_EVERY", Kind::kInt, "tests: every Nth emulated encode/decode fails (0: none)",
       &s->gpu_emulate_fail_every, 0, 1 << 30},
  };
}

std::string value_string(const Entry& e) {
  char buf[64];
  switch (e.kind) {
    case Kind::kBytes:
      return format_bytes(*static_cast<uint64_t*>(e.field));
    case Kind::kInt:
      std::snprintf(buf, sizeof buf, "%d", *static_cast<int*>(e.field));
      return buf;
    case Kind::kDouble:
      std::snprintf(buf, sizeof buf, "%g", *static_cast<double*>(e.field));
      return buf;
    case Kind::kString:
    case Kind::kTransport:
    case Kind::kGpuMode:
    case Kind::kGpuLanding:
      return *static_cast<std::string*>(e.field);
    case Kind::kCompress:
      return compress_mode_name(*static_cast<CompressMode*>(e.field));
    case Kind::kCodecIsa:
      return codec::isa_name(*static_cast<codec::Isa*>(e.field));
    case Kind::kDtype: {
      static const char* kNames[] = {"auto", "bf16", "fp16", "fp32"};
      return kNames[static_cast<int>(*static_cast<DtypeHint*>(e.field))];
    }
  }
  return "?";
}

void warn(const Entry& e, const char* v, const char* what) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s='%s' is not %s; using %s", e.name, v, what, value_string(e).c_str());
  g_messages.push_back(buf);
  g_problems[e.name] = buf;
}

void parse(const Entry& e, const char* v) {
  switch (e.kind) {
    case Kind::kBytes: {
      uint64_t x;
      if (!parse_bytes(v, &x) || x < static_cast<uint64_t>(e.lo) || x > static_cast<uint64_t>(e.hi)) {
        warn(e, v, "a size in range");
      } else {
        *static_cast<uint64_t*>(e.field) = x;
      }
      return;
    }
    case Kind::kInt: {
      char* end = nullptr;
      errno = 0;
      long x = std::strtol(v, &end, 10);
      if (errno || end == v || *end || x < e.lo || x > e.hi) {
        char what[64];
        std::snprintf(what, sizeof what, "an integer in [%ld, %ld]", e.lo, e.hi);
        warn(e, v, what);
      } else {
        *static_cast<int*>(e.field) = static_cast<int>(x);
      }
      return;
    }
    case Kind::kDouble: {
      char* end = nullptr;
      double x = std::strtod(v, &end);
      if (end == v || *end || !(x >= 0)) {
        warn(e, v, "a non-negative number");
      } else {
        *static_cast<double*>(e.field) = x;
      }
      return;
    }
    case Kind::kString:
      *static_cast<std::string*>(e.field) = v;
      return;
    case Kind::kTransport:
      if (!std::strcmp(v, "socket") || !std::strcmp(v, "ib") || !std::strcmp(v, "auto"))
        *static_cast<std::string*>(e.field) = v;
      else
        warn(e, v, "one of socket|ib|auto");
      return;
    case Kind::kGpuMode:
      if (!std::strcmp(v, "auto") || !std::strcmp(v, "off") || !std::strcmp(v, "on") || !std::strcmp(v, "emulate"))
        *static_cast<std::string*>(e.field) = v;
      else
        warn(e, v, "one of off|on|auto|emulate");
      return;
    case Kind::kGpuLanding:
      if (!std::strcmp(v, "ordered") || !std::strcmp(v, "marked"))
        *static_cast<std::string*>(e.field) = v;
      else
        warn(e, v, "one of ordered|marked");
      return;
    case Kind::kCodecIsa:
      if (!codec::parse_isa(v, static_cast<codec::Isa*>(e.field)))
        warn(e, v, (std::string("one of ") + kIsaValues).c_str());
      return;
    case Kind::kCompress: {
      auto* f = static_cast<CompressMode*>(e.field);
      if (!std::strcmp(v, "auto"))
        *f = CompressMode::kAuto;
      else if (!std::strcmp(v, "always"))
        *f = CompressMode::kAlways;
      else if (!std::strcmp(v, "never"))
        *f = CompressMode::kNever;
      else
        warn(e, v, "one of auto|always|never");
      return;
    }
    case Kind::kDtype: {
      auto* f = static_cast<DtypeHint*>(e.field);
      if (!std::strcmp(v, "auto"))
        *f = DtypeHint::kAuto;
      else if (!std::strcmp(v, "bf16"))
        *f = DtypeHint::kBf16;
      else if (!std::strcmp(v, "fp16"))
        *f = DtypeHint::kFp16;
      else if (!std::strcmp(v, "fp32"))
        *f = DtypeHint::kFp32;
      else
        warn(e, v, "one of auto|bf16|fp16|fp32");
      return;
    }
  }
}

void read_all() {
  Settings* s = &g_settings;
  // Default worker count: half the cores (the TCP stack and NCCL need the rest), at most 4.
  unsigned hw = std::thread::hardware_concurrency();
  s->workers = hw >= 4 ? static_cast<int>(hw / 2 > 4 ? 4 : hw / 2) : 1;
  for (const Entry& e : registry(s)) {
    const char* v = std::getenv(e.name);
    if (v && *v) parse(e, v);
  }
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
      ZIPCCL_INFO(NCCL_INIT | NCCL_ENV, "%s=%s (%s)", e.name, value_string(e).c_str(), e.doc);
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
    info.value = value_string(e);
    info.default_value = e.default_doc ? e.default_doc : value_string(def[i]);
    switch (e.kind) {
      case Kind::kBytes:
        info.values = "size " + format_bytes(static_cast<uint64_t>(e.lo)) + ".." +
                      format_bytes(static_cast<uint64_t>(e.hi));
        break;
      case Kind::kInt:
        info.values = "integer " + std::to_string(e.lo) + ".." + std::to_string(e.hi);
        break;
      case Kind::kDouble:
        info.values = "number >= 0";
        break;
      case Kind::kString:
        info.values = "string";
        break;
      case Kind::kCompress:
        info.values = "auto|always|never";
        break;
      case Kind::kDtype:
        info.values = "auto|bf16|fp16|fp32";
        break;
      case Kind::kTransport:
        info.values = "socket|ib|auto";
        break;
      case Kind::kGpuMode:
        info.values = "off|on|auto|emulate";
        break;
      case Kind::kGpuLanding:
        info.values = "ordered|marked";
        break;
      case Kind::kCodecIsa:
        info.values = kIsaValues;
        break;
    }
    const char* v = std::getenv(e.name);
    info.from_env = v && *v;
    auto p = g_problems.find(e.name);
    if (p != g_problems.end()) info.problem = p->second;
    out.push_back(std::move(info));
  }
  return out;
}

std::string format_bytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && n >= 1024 && n % 1024 == 0) {
    n /= 1024;
    ++u;
  }
  return std::to_string(n) + kUnits[u];
}

bool parse_bytes(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  if (!s || !*s || *s == '-') return false;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno || end == s) return false;
  uint64_t mult = 1;
  std::string unit(end);
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mult = 1ull << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1ull << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1ull << 30;
  else
    return false;
  if (x > (~0ull) / mult) return false;
  *out = x * mult;
  return true;
}

codec::Isa codec_isa() {
  static const codec::Isa isa = codec::effective_isa(settings().codec_isa);
  return isa;
}

const char* compress_mode_name(CompressMode m) {
  switch (m) {
    case CompressMode::kAuto:
      return "auto";
    case CompressMode::kAlways:
      return "always";
    case CompressMode::kNever:
      return "never";
  }
  return "?";
}

}  // namespace net
}  // namespace zipccl
