// Per-connection statistics: logged at INFO when the comm closes and, with ZIPCCL_STATS_FILE, appended
// as one JSON line per comm. The live snapshots (layer/live_stats.h) read the same counters while the
// comm runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace zipccl {
namespace net {

// A counter written by one thread and read by others. NCCL drives a comm from one thread (its proxy
// thread), so the comm's counters have one writer: a relaxed load and store, no read-modify-write and
// no lock, costs what a plain increment does; the snapshot thread reads them relaxed (each counter is
// exact, the set of them is not a single instant, which a rate over an interval does not need).
class StatCounter {
 public:
  StatCounter& operator+=(uint64_t d) {
    v_.store(v_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
    return *this;
  }
  StatCounter& operator++() { return *this += 1; }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// One comm's statistics. Shared (shared_ptr) between the comm and the live snapshot thread, which
// keeps reading it until it has seen `closed`.
struct ConnStats {
  ConnStats(const char* dir, std::string peer_name) : direction(dir), peer(std::move(peer_name)) {}
  const char* const direction;  // "send" | "recv"
  const std::string peer;       // transport-specific description
  StatCounter messages;
  StatCounter bytes_in;            // uncompressed bytes (what NCCL handed us / we reported)
  StatCounter bytes_wire;          // payload bytes on the wire
  StatCounter compressed;          // messages sent/received as codec frames
  StatCounter raw_small;           // raw: below ZIPCCL_MIN_BYTES or compression off
  StatCounter raw_policy;          // raw: the auto policy predicted raw to be faster
  StatCounter raw_incompressible;  // raw: detector or encoder found nothing to gain
  StatCounter codec_ns;            // worker time spent in the codec
  StatCounter errors;
  StatCounter segmented;        // messages that travelled as several segments (ZIPCCL_SEGMENT_BYTES)
  StatCounter segments;         // the transport messages those took
  StatCounter device_messages;  // messages from/to device buffers (GPU path)
  StatCounter device_codec;     // of those, encoded (send) or decoded (recv) on the device
  std::atomic<double> link_gbps{0};  // the policy's link estimate (send side), updated per message
  double seconds = 0;                // comm lifetime, set at close
  // Set (release) by the comm after its last update; the snapshot thread folds the comm into its
  // closed totals once it sees it (acquire) and lets go of it.
  std::atomic<bool> closed{false};
};

// A comm's statistics, registered with the live snapshots when they are on (ZIPCCL_STATS_DIR). Called
// at connect/accept, never on the data path.
std::shared_ptr<ConnStats> open_conn_stats(const char* direction, const std::string& peer);

// At close: logs the summary, appends the JSON line if configured and marks the stats closed. Never
// fails (errors are WARNed).
void report_stats(ConnStats& s);
std::string stats_json(const ConnStats& s);

}  // namespace net
}  // namespace zipccl
