// Per-connection statistics: logged at INFO when the comm closes and, with ZIPCCL_STATS_FILE, appended
// as one JSON line per comm.
#pragma once

#include <cstdint>
#include <string>

namespace zipccl {
namespace net {

struct ConnStats {
  const char* direction = "send";  // "send" | "recv"
  std::string peer;                // transport-specific description
  uint64_t messages = 0;
  uint64_t bytes_in = 0;            // uncompressed bytes (what NCCL handed us / we reported)
  uint64_t bytes_wire = 0;          // payload bytes on the wire
  uint64_t compressed = 0;          // messages sent/received as codec frames
  uint64_t raw_small = 0;           // raw: below ZIPCCL_MIN_BYTES or compression off
  uint64_t raw_policy = 0;          // raw: the auto policy predicted raw to be faster
  uint64_t raw_incompressible = 0;  // raw: detector or encoder found nothing to gain
  uint64_t codec_ns = 0;            // worker time spent in the codec
  uint64_t errors = 0;
  uint64_t segmented = 0;        // messages that travelled as several segments (ZIPCCL_SEGMENT_BYTES)
  uint64_t segments = 0;         // the transport messages those took
  uint64_t device_messages = 0;  // messages from/to device buffers (GPU path)
  uint64_t device_codec = 0;     // of those, encoded (send) or decoded (recv) on the device
  double link_gbps = 0;          // the policy's final link estimate (send side)
  double seconds = 0;            // comm lifetime
};

// Logs the summary and appends the JSON line if configured. Never fails (errors are WARNed).
void report_stats(const ConnStats& s);
std::string stats_json(const ConnStats& s);

}  // namespace net
}  // namespace zipccl
