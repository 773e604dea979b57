// The compressing layer's per-message frame header, carried in the transport's metadata. The payload
// that follows is either the message itself (raw) or one zipccl codec frame (gpu_codec/FORMAT.md).
// Everything here arrives from the network: validate_frame() checks it before anything is written.
#pragma once

#include <cstdint>
#include <cstring>

#include "transport.h"

namespace zipccl {
namespace net {

constexpr uint32_t kFrameMagic = 0x3146435au;  // "ZCF1"
constexpr uint8_t kFrameVersion = 1;

enum class FrameKind : uint8_t { kRaw = 0, kCodec = 1 };

struct FrameMeta {
  uint32_t magic;
  uint8_t kind;
  uint8_t version;
  uint16_t reserved;
  int32_t tag;
  uint32_t reserved2;
  uint64_t original_len;  // bytes the receiver reports
  uint64_t wire_len;      // payload bytes on the wire
};
static_assert(sizeof(FrameMeta) == kMetaBytes, "frame header fills the transport metadata");

inline FrameMeta make_frame(FrameKind kind, int tag, uint64_t original, uint64_t wire) {
  FrameMeta m{};
  m.magic = kFrameMagic;
  m.kind = static_cast<uint8_t>(kind);
  m.version = kFrameVersion;
  m.tag = tag;
  m.original_len = original;
  m.wire_len = wire;
  return m;
}

// Checks a received header against the transport's payload length and the posted receive size.
// Returns nullptr when acceptable, else what is wrong. `max_wire` bounds a codec frame's size for the
// posted receive (max_encoded_size(posted)).
inline const char* validate_frame(const FrameMeta& m, uint64_t payload_len, uint64_t posted,
                                  uint64_t max_wire) {
  if (m.magic != kFrameMagic) return "bad frame magic";
  if (m.version != kFrameVersion) return "unsupported frame version";
  if (m.wire_len != payload_len) return "frame length disagrees with the transport";
  if (m.original_len > posted) return "message larger than the posted receive";
  if (m.kind == static_cast<uint8_t>(FrameKind::kRaw)) {
    if (m.wire_len != m.original_len) return "raw frame with a wire length different from its size";
  } else if (m.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
    if (m.wire_len > max_wire) return "codec frame larger than the bound for the posted receive";
  } else {
    return "unknown frame kind";
  }
  return nullptr;
}

}  // namespace net
}  // namespace zipccl
