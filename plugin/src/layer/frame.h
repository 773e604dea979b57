// The compressing layer's per-message frame header, carried in the transport's metadata. The payload
// that follows is either the message itself (raw) or one zipccl codec frame (gpu_codec/FORMAT.md).
// Everything here arrives from the network: validate_frame() / Assembly::accept() check it before
// anything is written.
//
// Segments (ZIPCCL_SEGMENT_BYTES, docs/notes/plugin.md "Segments"): a message larger than the segment
// size travels as several consecutive transport messages, each with its own header and its own payload
// (raw, or one codec frame of that segment alone). Such headers are version 2 and carry the segment's
// index and a "last" flag; a whole message in one transport message keeps version 1, byte-identical to
// earlier builds. A receiver of an earlier build checks `version == 1` and so rejects the first segment
// with "unsupported frame version" (WARN + error) instead of assembling it as a whole message.
#pragma once

#include <cstdint>
#include <cstring>

#include "transport.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace net {

constexpr uint32_t kFrameMagic = 0x3146435au;  // "ZCF1"
constexpr uint8_t kFrameVersion = 1;           // one message, one transport message
constexpr uint8_t kFrameVersionSegment = 2;    // one segment of a message
constexpr uint16_t kSegLast = 1;               // flags: the message's last segment

enum class FrameKind : uint8_t { kRaw = 0, kCodec = 1 };

struct FrameMeta {
  uint32_t magic;
  uint8_t kind;
  uint8_t version;
  uint16_t flags;  // version 2: kSegLast; version 1: 0
  int32_t tag;
  uint32_t segment;       // version 2: index of the segment within its message; version 1: 0
  uint64_t original_len;  // bytes the receiver reports (version 2: this segment's bytes)
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

// Header of segment `index` of a segmented message.
inline FrameMeta make_segment(FrameKind kind, int tag, uint32_t index, bool last, uint64_t original,
                              uint64_t wire) {
  FrameMeta m = make_frame(kind, tag, original, wire);
  m.version = kFrameVersionSegment;
  m.segment = index;
  m.flags = last ? kSegLast : 0;
  return m;
}

// ---- segment planning (send side) ----
// Segments a `size`-byte message is sent as with segment size `seg` (0 = off): 1 unless size > seg.
// Segment j covers [j * seg, min(size, (j + 1) * seg)).
inline uint64_t segment_count(uint64_t size, uint64_t seg) {
  if (seg == 0 || size <= seg) return 1;
  return (size + seg - 1) / seg;
}
inline uint64_t segment_len(uint64_t size, uint64_t seg, uint64_t j) {
  if (seg == 0 || size <= seg) return size;
  uint64_t off = j * seg;
  return off >= size ? 0 : (size - off < seg ? size - off : seg);
}

// Checks a received whole-message (version 1) header against the transport's payload length and the
// posted receive size. Returns nullptr when acceptable, else what is wrong. `max_wire` bounds a codec
// frame's size for the posted receive (max_encoded_size(posted)).
inline const char* validate_frame(const FrameMeta& m, uint64_t payload_len, uint64_t posted,
                                  uint64_t max_wire) {
  if (m.magic != kFrameMagic) return "bad frame magic";
  if (m.version != kFrameVersion) return "unsupported frame version";
  if (m.flags != 0 || m.segment != 0) return "whole-message frame with segment fields set";
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

// Receive-side assembly of one message from its transport messages: a version 1 header is the whole
// message (only as the first); version 2 headers must come with consecutive indices from 0, each
// segment lands at the sum of the previous segments' lengths, that sum never exceeds the posted
// receive, a segment that is not the last carries at least one byte, and a codec segment is smaller
// than its data (so it fits the segment's own range of any staging laid out like the message).
struct Assembly {
  uint64_t posted = 0;    // the receive's capacity
  uint64_t offset = 0;    // bytes announced by the accepted headers = where the next segment lands
  uint32_t next = 0;      // index expected next
  bool complete = false;  // the last segment (or a version 1 frame) was accepted
  bool segmented = false;

  void reset(uint64_t capacity) {
    *this = Assembly{};
    posted = capacity;
  }
  // Validates the header of the next transport message of this receive and, when acceptable, advances.
  // Returns nullptr, or what is wrong (the receive must fail; nothing has been written).
  const char* accept(const FrameMeta& m, uint64_t payload_len) {
    if (complete) return "a frame for a receive that is already complete";
    if (m.magic != kFrameMagic) return "bad frame magic";
    if (m.version == kFrameVersion) {
      if (next != 0) return "a whole-message frame where the next segment of a message was expected";
      const char* bad = validate_frame(m, payload_len, posted, codec::max_encoded_size(posted));
      if (bad) return bad;
      offset = m.original_len;
      next = 1;
      complete = true;
      return nullptr;
    }
    if (m.version != kFrameVersionSegment) return "unsupported frame version";
    if (m.segment != next) {
      return m.segment == 0 ? "a new message's first segment before the previous message's last segment"
                            : "segment out of sequence";
    }
    if (m.flags & ~kSegLast) return "unknown segment flags";
    if (m.wire_len != payload_len) return "frame length disagrees with the transport";
    if (m.original_len > posted - offset) return "segments add up to more than the posted receive";
    bool last = (m.flags & kSegLast) != 0;
    if (!last && m.original_len == 0) return "empty segment that is not the last";
    if (m.kind == static_cast<uint8_t>(FrameKind::kRaw)) {
      if (m.wire_len != m.original_len) return "raw segment with a wire length different from its size";
    } else if (m.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
      if (m.wire_len >= m.original_len) return "codec segment not smaller than its data";
    } else {
      return "unknown frame kind";
    }
    offset += m.original_len;
    ++next;
    segmented = true;
    complete = last;
    return nullptr;
  }
};

}  // namespace net
}  // namespace zipccl
