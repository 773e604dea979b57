// Every ZIPCCL_* setting, declared once in a typed registry, read once (at the first init) and
// logged at INFO with its effective value. The plugin never writes the environment. Enumerations are
// parsed once into enums (a choice); sizes and durations follow one grammar (common/units.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl {
namespace net {

enum class CompressMode { kAuto, kAlways, kNever };
enum class DtypeHint { kAuto, kBf16, kFp16, kFp32 };
// ZIPCCL_TRANSPORT: auto = the fabric decision (fabric/fabric.h); socket or ib forces one.
enum class TransportChoice { kSocket, kIb, kAuto };
// ZIPCCL_GPU: off until the device checks (tests/gpu/run_device_checks.sh) pass on a GPU.
enum class GpuMode { kOff, kOn, kAuto };
// ZIPCCL_GPU_LANDING: which device receives land each 128-byte line flag-last.
enum class GpuLanding { kOrdered, kMarked };

// NCCL_IB_TC: traffic class in the GRH (RoCE / routed IB), 8 bits. NCCL_IB_SL: service level, 4
// bits. NCCL_IB_TIMEOUT: local ACK timeout, 4.096 us * 2^timeout, 5 bits; 0 (infinite: a lost peer
// would never time out) is not accepted. NCCL_IB_RETRY_CNT: transport retries, 3 bits.
constexpr int kIbTcMax = 255;
constexpr int kIbSlMax = 15;
constexpr int kIbTimeoutMin = 1;
constexpr int kIbTimeoutMax = 31;
constexpr int kIbRetryCntMax = 7;

// NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD: NCCL's variables with NCCL's meaning. kSocketAuto is
// NCCL's own default (-2): chosen from the interface's PCI vendor (socket/socket_plan.h).
// kSocketUnset: the ZIPCCL_ alias was not given.
constexpr int kSocketAuto = -2;
constexpr int kSocketUnset = -3;
constexpr int kSocketCountMax = 1024;  // accepted; NCCL's caps (16 threads, 64 sockets) apply after

struct Settings {
  CompressMode compress = CompressMode::kAuto;
  uint64_t min_bytes = 64 << 10;
  DtypeHint dtype = DtypeHint::kAuto;
  int socket_nthreads = kSocketAuto;    // NCCL_SOCKET_NTHREADS: helper threads per connection
  int nsocks_per_thread = kSocketAuto;  // NCCL_NSOCKS_PERTHREAD: TCP data streams per helper thread
  // ZIPCCL_SOCKET_NTHREADS / ZIPCCL_NSOCKS_PERTHREAD: older names, aliases of the NCCL variables
  // (kSocketUnset when not given; the NCCL variable wins, with a WARN, where both disagree).
  int socket_nthreads_alias = kSocketUnset;
  int nsocks_per_thread_alias = kSocketUnset;
  uint64_t min_chunk_bytes = 64 << 10;
  uint64_t inline_bytes = 16 << 10;
  int workers = 1;        // codec worker threads (process-wide pool)
  // CPU kernel set the codec runs as asked; one the CPU lacks falls back to the fastest it has
  // (a WARN at init). codec_isa() gives the one that runs.
  codec::Isa codec_isa = codec::Isa::kAuto;
  int max_requests = 64;  // requests in flight per comm
  // Messages larger than this travel as several segments, each its own frame (0: off). Effective
  // value: rounded down to a multiple of 4 KiB, at least 4 KiB (segment_bytes()).
  uint64_t segment_bytes = 1 << 20;
  std::string stats_file;
  // Live snapshots (layer/live_stats.h): the folder (empty: none) and the period in seconds (0: only
  // at finalize and at exit).
  std::string stats_dir;
  int stats_interval_s = 30;
  double link_gbps = 0;     // 0: measure the link online
  int probe_interval = 16;  // auto: sample the codec every N raw messages (backs off)
  int connect_timeout_ms = 30000;
  int io_timeout_ms = 0;  // 0: none; otherwise a stalled transfer fails after this long
  // auto: the fabric decision (fabric/fabric.h); socket or ib: forced. The verbs path is opt-in until
  // validated on RDMA hardware.
  TransportChoice transport = TransportChoice::kAuto;
  // Another NCCL net plugin to run under the compressing layer (name as NCCL_NET_PLUGIN, or a path; a
  // comma-separated list as NCCL_NET_PLUGIN takes one: inner_plugin_list);
  // empty: none. Takes precedence over `transport` (docs/notes/inner.md).
  std::string net_inner;
  // Tests: a folder standing for / when discovering the fabric (sys/class/..., etc/nccl.conf).
  std::string fabric_root;
  int ib_qps = 2;                   // RC queue pairs per RDMA connection
  // RDMA queue pair attributes, NCCL's variables with NCCL's defaults (ranges above).
  int ib_tc = 0;          // NCCL_IB_TC: GRH traffic class
  int ib_sl = 0;          // NCCL_IB_SL: service level
  int ib_timeout = 20;    // NCCL_IB_TIMEOUT: ACK timeout 4.096 us * 2^n
  int ib_retry_cnt = 7;   // NCCL_IB_RETRY_CNT
  // GPU path (docs/notes/gpu.md).
  GpuMode gpu = GpuMode::kOff;
  int gpu_max_sms = 16;  // bound on the codec kernels' grid, in SMs' worth of blocks
  GpuLanding gpu_landing = GpuLanding::kOrdered;
};

// ZIPCCL_SEGMENT_BYTES as the comms use it: 0 (off), else a multiple of 4 KiB (device receives land
// LL128 lines flag-last per segment, so segments never split a 128-byte line).
inline uint64_t effective_segment_bytes(uint64_t v) {
  if (v == 0) return 0;
  return v < 4096 ? 4096 : v & ~uint64_t{4095};
}

// Reads the registry on first use (thread-safe) and returns it.
const Settings& settings();
// This instance was loaded as the inner plugin of another zipccl (ZIPCCL_NET_INNER naming itself): it
// carries bytes only; the outer instance compresses. Sets compress to never (INFO line).
void settings_inner_role();
// Logs every setting with its effective value (once per process) and any parse warnings.
void log_settings_once();
// Formats a byte count the way the settings are written ("64KiB").
std::string format_bytes(uint64_t n);
// Parses a size as the settings do (common/units.h). False on anything else.
bool parse_bytes(const char* s, uint64_t* out);
// NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD and their ZIPCCL_ alias: the value in force. An alias
// (not kSocketUnset) fills in where the NCCL variable was not given (`nccl_given` false); where both
// were given and disagree the NCCL variable wins and *warning says so.
int merge_socket_alias(const char* nccl_name, bool nccl_given, int nccl_value, const char* alias_name, int alias,
                       std::string* warning);
// The names the settings accept for each choice.
const char* compress_mode_name(CompressMode m);
const char* transport_name(TransportChoice t);
const char* gpu_mode_name(GpuMode m);
// The kernel set every encode and decode of this process runs: ZIPCCL_CODEC_ISA where the CPU has
// it, else the fastest set it has.
codec::Isa codec_isa();

// One row of the registry, for `zipccl doctor` and the README's generated table.
struct SettingInfo {
  std::string name;           // "ZIPCCL_COMPRESS"
  std::string values;         // what it accepts: "auto|always|never", "integer 1..16", "size 0..1TiB", ...
  std::string default_value;  // machine-independent description of the default
  std::string doc;            // one line
  std::string value;          // effective value in this process
  bool from_env = false;      // the environment set it (to a value that was accepted or not)
  std::string problem;        // non-empty when the environment's value was rejected (the default is kept)
};
// Every setting in registry order, with this process's effective values (reads them on first use).
std::vector<SettingInfo> describe_settings();

}  // namespace net
}  // namespace zipccl
