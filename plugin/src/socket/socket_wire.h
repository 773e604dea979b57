// On-the-wire layouts of the socket transport: the connect handle, the per-socket hello and the
// per-message control header. Little-endian hosts only (x86-64, aarch64); every field arriving from
// the network is validated before use.
#pragma once

#include <cstdint>
#include <cstring>

#include "socket/socket_iface.h"
#include "transport.h"

namespace zipccl {
namespace net {

constexpr uint64_t kHandleMagic = 0x314c43435a50495aull;  // "ZIPCCL1"
constexpr uint32_t kHelloMagic = 0x48435a5au;             // "ZZCH"
constexpr uint32_t kHeaderMagic = 0x54435a5au;            // "ZZCT"
constexpr uint32_t kWireVersion = 2;  // 2: split messages carry their piece map
constexpr uint32_t kMaxStreams = 64;
// A split message is cut into up to kPiecesPerStream pieces per data stream (one where there is one
// stream), so that a faster stream can carry more of it (see assign_pieces).
constexpr uint32_t kPiecesPerStream = 2;
constexpr uint32_t kMaxPieces = kPiecesPerStream * kMaxStreams;

// The handle NCCL exchanges between ranks (NCCL_NET_HANDLE_MAXSIZE bytes). The first part is what the
// listener publishes; `connect_state` is private to the process calling connect: NCCL hands the same
// buffer back on every connect() call, so the state machine's progress lives there.
struct SocketHandle {
  uint64_t magic;
  uint64_t nonce;  // identifies the listener; hellos must carry it
  SocketAddr addr;
  // The listener's stream plan (socket_plan.h), which the connecting side follows, as NCCL's handle
  // carries its listener's nSocks / nThreads.
  uint32_t nstreams;    // data streams, 1..kMaxStreams
  uint32_t per_thread;  // data streams per helper thread, 1..nstreams
  uint8_t reserved[16];
  uint64_t connect_state;  // 0 on the wire; a registered pointer while connecting
};
static_assert(sizeof(SocketHandle) <= 128, "handle must fit NCCL_NET_HANDLE_MAXSIZE");

// First bytes on every TCP socket of a connection, from the connecting side.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t nonce;    // the listener's
  uint64_t conn_id;  // random per connection, groups its sockets
  uint32_t index;    // 0: control stream, 1..nstreams: data streams
  uint32_t nstreams;
};
static_assert(sizeof(Hello) == 32, "hello layout");

// One per message, on the control stream. Inline payloads follow it there; larger payloads are cut
// into pieces of `chunk` bytes (the last one shorter), and the header is followed by the piece map:
// one byte per piece, the data stream (0-based) that carries it. Each data stream carries its pieces in
// the order of messages and, within a message, of pieces.
struct MsgHeader {
  uint32_t magic;
  uint32_t flags;  // kFlagInline
  uint64_t seq;
  uint64_t payload_len;
  uint64_t chunk;
  uint8_t meta[kMetaBytes];
};
static_assert(sizeof(MsgHeader) == 64, "header layout");
constexpr uint32_t kFlagInline = 1;

}  // namespace net
}  // namespace zipccl
