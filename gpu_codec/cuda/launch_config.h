// Launch parameters, workspace layout and grid arithmetic of the CUDA codec. Plain host/device code
// with no CUDA runtime calls, so the CPU tests check it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format.h"
#include "zipccl/codec_cuda.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

constexpr int kThreads = 128;          // threads per CTA, encode and decode
constexpr int kMaxBatch = 96;          // messages per launch: the items travel as a kernel parameter
constexpr uint32_t kCopyChunk = 16384; // bytes per unit of RAW copy / CONST fill work
constexpr int kDecodeWindow = 32;      // symbols per lane decoded per round (shared buffer per lane)
constexpr uint8_t kTypeAuto = 255;     // EncodeItemParam::type: detect on the device

// ---- Kernel parameters (passed by value: <= 4 KiB) ----------------------------------------------
struct EncodeItemParam {
  const uint8_t* src;
  uint8_t* dst;
  uint32_t n;
  uint32_t first_slot;  // first look-back slot (one slot per block) in the workspace
  uint32_t first_unit;  // first finalize unit
  uint8_t type;         // fmt::kType* or kTypeAuto
  uint8_t pad[3];
};
struct EncodeParams {
  EncodeItemParam items[kMaxBatch];
  uint32_t count;
  uint32_t total_slots;
  uint32_t total_units;
  uint8_t block_log2;
  uint8_t lanes_log2;
  uint8_t pad[2];
  CodecResult* results;
  CodecResult* host_results;
  uint8_t* workspace;
};
struct DecodeItemParam {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t size;
  uint64_t cap;
};
struct DecodeParams {
  DecodeItemParam items[kMaxBatch];
  uint32_t count;
  uint32_t pad;
  CodecResult* results;
  CodecResult* host_results;
  uint8_t* workspace;
};
static_assert(sizeof(EncodeParams) <= 4096 && sizeof(DecodeParams) <= 4096, "kernel parameter limit");

// ---- Workspace ----------------------------------------------------------------------------------
// Encode: control words, per-message state, then one 64-bit look-back word per block slot.
// Decode: control words and a per-message error word. All zero between calls.
struct Control {
  uint32_t ticket;  // next block slot (encode)
  uint32_t done;    // CTAs finished (the last one publishes results and re-clears the control)
  uint32_t pad[14];
};
struct ItemState {
  uint64_t result;  // look-back word of the message's last block: payload bytes | kNotRepeated
  uint32_t type;    // resolved element type (auto: written by the detection kernel)
  uint32_t error;   // decode: first error status
};
constexpr size_t kControlBytes = sizeof(Control);
constexpr size_t kItemStateOffset = kControlBytes;
constexpr size_t kSlotsOffset = kItemStateOffset + sizeof(ItemState) * kMaxBatch;

// Look-back word: flag in bits 63..62, "some element differs from the message's first" in bit 61,
// byte count in bits 60..0.
constexpr uint64_t kFlagAggregate = uint64_t(1) << 62;
constexpr uint64_t kFlagInclusive = uint64_t(2) << 62;
constexpr uint64_t kFlagMask = uint64_t(3) << 62;
constexpr uint64_t kNotRepeated = uint64_t(1) << 61;
constexpr uint64_t kValueMask = kNotRepeated - 1;

ZIPCCL_HD size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

ZIPCCL_HD size_t encode_workspace_bytes(uint64_t slots) { return round_up(kSlotsOffset + 8 * slots, 256); }
ZIPCCL_HD size_t decode_workspace_bytes() { return round_up(kSlotsOffset, 256); }

ZIPCCL_HD int clamp_block_log2(int block_log2) {
  return block_log2 ? block_log2 : gpu::kDefaultBlockLog2;
}

// Look-back slots of one message. Typed messages: one per block; n smaller than one element: none
// (a RAW frame). Byte messages (type none) and auto (type unknown until the device detects it):
// one per 2 * 2^block_log2 bytes, the most any outcome needs (bf16/fp16: ceil((n/2)/B); fp32 and
// none fewer or equal), so that the host never needs the detected type.
ZIPCCL_HD uint64_t item_slots(uint64_t n, uint8_t type, int block_log2) {
  const uint64_t b = uint64_t(1) << block_log2;
  if (n == 0) return 0;
  if (type == fmt::kTypeNone || type == kTypeAuto) return (n + 2 * b - 1) / (2 * b);
  const uint64_t nelem = n / fmt::type_elem_size(type);
  return (nelem + b - 1) / b;
}
// Blocks a message of a known type actually has (byte messages: check blocks of 2B bytes).
ZIPCCL_HD uint64_t item_blocks(uint64_t n, uint8_t type, int block_log2) {
  const uint64_t b = uint64_t(1) << block_log2;
  if (type == fmt::kTypeNone) return (n + 2 * b - 1) / (2 * b);
  const uint64_t nelem = n / fmt::type_elem_size(type);
  return (nelem + b - 1) / b;
}
// Finalize units: one for the header and result, then RAW-copy chunks (used only if the frame ends
// up RAW).
ZIPCCL_HD uint64_t item_units(uint64_t n) { return 1 + (n + kCopyChunk - 1) / kCopyChunk; }

// CTAs to launch: enough to fill min(max_sms, sms) SMs at the kernel's occupancy, never more than
// there is work for, at least one.
ZIPCCL_HD uint32_t grid_size(uint64_t units, int sms, int blocks_per_sm, int max_sms) {
  const int use_sms = (max_sms > 0 && max_sms < sms) ? max_sms : sms;
  const uint64_t fill = uint64_t(use_sms > 0 ? use_sms : 1) * uint64_t(blocks_per_sm > 0 ? blocks_per_sm : 1);
  const uint64_t g = units < fill ? units : fill;
  return uint32_t(g ? g : 1);
}

// ---- Encode shared memory -----------------------------------------------------------------------
// Fixed part (EncodeShared, device_encode.h) + plane buffers + the block staging buffer, which also
// hosts the Huffman construction scratch when it is large enough (the scratch is dead before the
// block is staged).
struct EncodeSmemLayout {
  uint32_t planes;        // offset of plane 0; plane p at planes + p * plane_stride
  uint32_t plane_stride;
  uint32_t staging;       // block output staging (fmt::block_bound bytes)
  uint32_t scratch;       // per-plane Huffman construction scratch, scratch_stride apart
  uint32_t scratch_stride;
  uint32_t total;
};

// ---- Shared memory budget ------------------------------------------------------------------------
// A CTA's shared memory is the kernel's static part (cudaFuncAttributes::sharedSizeBytes, ptxas's
// "bytes smem") plus the dynamic bytes of the launch. cudaFuncSetAttribute rejects a
// MaxDynamicSharedMemorySize above the device's per-block opt-in less the static part, so a value
// of the whole opt-in fails for any kernel with static shared memory.
enum KernelId : int { kDetectKernel, kEncodeKernel, kFinalizeKernel, kDecodeKernel, kKernelCount };

// The most dynamic shared memory a kernel with `static_bytes` of static shared memory may be given
// on a device whose per-block opt-in is `optin` bytes (0 when the static part alone does not fit).
ZIPCCL_HD size_t dynamic_smem_limit(int optin, size_t static_bytes) {
  return optin > 0 && size_t(optin) > static_bytes ? size_t(optin) - static_bytes : 0;
}

// The MaxDynamicSharedMemorySize set for a kernel whose launches ask for at most `largest_request`
// dynamic bytes: what it asks for, capped at what it may have. Launches above it are refused.
ZIPCCL_HD size_t dynamic_smem_attribute(int optin, size_t static_bytes, size_t largest_request) {
  const size_t limit = dynamic_smem_limit(optin, static_bytes);
  return largest_request < limit ? largest_request : limit;
}

// ---- Host-side parameter building (no CUDA calls; tested on the CPU) ----------------------------
inline bool valid_block_log2(int block_log2) {
  return block_log2 == 0 || (block_log2 >= fmt::kMinBlockLog2 && block_log2 <= fmt::kMaxBlockLog2);
}

// Encode parameters for items[0, count) (count <= kMaxBatch); workspace, results left null.
// *max_planes: planes the shared memory must hold; *any_auto: the detection kernel is needed.
inline GpuStatus build_encode_params(const EncodeItem* items, size_t count, int block_log2, EncodeParams* prm,
                                     int* max_planes, bool* any_auto) {
  if (!items || count == 0 || count > size_t(kMaxBatch) || !valid_block_log2(block_log2)) return GpuStatus::kInvalidArgument;
  *prm = EncodeParams{};
  prm->count = uint32_t(count);
  prm->block_log2 = uint8_t(clamp_block_log2(block_log2));
  prm->lanes_log2 = uint8_t(fmt::kDefaultLanesLog2);
  *max_planes = 2;
  *any_auto = false;
  uint64_t slots = 0, units = 0;
  for (size_t i = 0; i < count; ++i) {
    const EncodeItem& e = items[i];
    if (e.n > kMaxFrameInput) return GpuStatus::kTooLarge;
    if ((e.n && !e.src) || !e.dst) return GpuStatus::kInvalidArgument;
    if (e.dst_capacity < max_encoded_size(e.n)) return GpuStatus::kDstTooSmall;
    uint8_t t;
    switch (e.type) {
      case ElemType::kNone: t = fmt::kTypeNone; break;
      case ElemType::kBf16: t = fmt::kTypeBf16; break;
      case ElemType::kFp16: t = fmt::kTypeFp16; break;
      case ElemType::kFp32: t = fmt::kTypeFp32; break;
      case ElemType::kAuto: t = e.n < 64 ? fmt::kTypeNone : kTypeAuto; break;  // detect: < 64 bytes is none
      default: return GpuStatus::kInvalidArgument;
    }
    EncodeItemParam& p = prm->items[i];
    p.src = static_cast<const uint8_t*>(e.src);
    p.dst = static_cast<uint8_t*>(e.dst);
    p.n = uint32_t(e.n);
    p.type = t;
    p.first_slot = uint32_t(slots);
    p.first_unit = uint32_t(units);
    slots += item_slots(e.n, t, prm->block_log2);
    units += item_units(e.n);
    if (slots > 0xFFFFFFFFull || units > 0xFFFFFFFFull) return GpuStatus::kTooLarge;
    if (t == fmt::kTypeFp32 || t == kTypeAuto) *max_planes = 4;
    if (t == kTypeAuto) *any_auto = true;
  }
  prm->total_slots = uint32_t(slots);
  prm->total_units = uint32_t(units);
  return GpuStatus::kOk;
}

// Decode parameters; *unit_bound: most work units the batch can have (from the capacities: a
// message decodes to at most dst_capacity bytes, a block holds at least 2 KiB of output).
inline GpuStatus build_decode_params(const DecodeItem* items, size_t count, DecodeParams* prm, uint64_t* unit_bound) {
  if (!items || count == 0 || count > size_t(kMaxBatch)) return GpuStatus::kInvalidArgument;
  *prm = DecodeParams{};
  prm->count = uint32_t(count);
  *unit_bound = 0;
  for (size_t i = 0; i < count; ++i) {
    const DecodeItem& d = items[i];
    if ((d.src_size && !d.src) || (d.dst_capacity && !d.dst)) return GpuStatus::kInvalidArgument;
    prm->items[i] = DecodeItemParam{static_cast<const uint8_t*>(d.src), static_cast<uint8_t*>(d.dst),
                                    uint64_t(d.src_size), uint64_t(d.dst_capacity)};
    const uint64_t min_block_bytes = uint64_t(2) << fmt::kMinBlockLog2;
    *unit_bound += (d.dst_capacity + min_block_bytes - 1) / min_block_bytes;
  }
  return GpuStatus::kOk;
}

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
