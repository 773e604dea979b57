// Host emulation of the CUDA codec's launches (codec_cuda.cu): same parameter building, same kernel
// bodies, run on host threads (host_cta.h) against host buffers.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "host_cta.h"
#include "kernel_bodies.h"
#include "zipccl/codec.h"
#include "zipccl/codec_cuda.h"

namespace zipccl {
namespace testing {

namespace gd = codec::gpu::detail;

struct EmuGrid {
  uint32_t grid = 3;  // CTAs per launch (all co-resident)
  int threads = gd::kThreads;
  GridSchedule sched;  // order of each CTA's warps between barriers
};

struct EmuInput {
  std::vector<uint8_t> bytes;
  codec::ElemType type;
  size_t offset = 0;  // start the message this many bytes into its buffer (alignment tests)
};

// Encodes a batch the way encode_batch_async does; returns each frame. Checks that the workspace is
// clear again afterwards and that the host results match the device results.
inline std::vector<std::vector<uint8_t>> emu_encode(const std::vector<EmuInput>& in, int block_log2,
                                                    EmuGrid g = EmuGrid()) {
  std::vector<std::vector<uint8_t>> dst(in.size()), src(in.size());
  std::vector<codec::gpu::EncodeItem> items(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    src[i].assign(in[i].offset, 0x77);
    src[i].insert(src[i].end(), in[i].bytes.begin(), in[i].bytes.end());
    dst[i].assign(codec::max_encoded_size(in[i].bytes.size()) + in[i].offset, 0xEE);
    items[i] = {src[i].data() + in[i].offset, in[i].bytes.size(), dst[i].data() + in[i].offset,
                dst[i].size() - in[i].offset, in[i].type};
  }
  gd::EncodeParams prm;
  int max_planes = 0;
  bool any_auto = false;
  EXPECT_EQ(gd::build_encode_params(items.data(), items.size(), block_log2, &prm, &max_planes, &any_auto),
            codec::gpu::GpuStatus::kOk);
  std::vector<uint8_t> ws(gd::encode_workspace_bytes(prm.total_slots), 0);
  std::vector<codec::gpu::CodecResult> res(in.size()), host_res(in.size());
  prm.workspace = ws.data();
  prm.results = res.data();
  prm.host_results = host_res.data();
  if (any_auto) {
    run_grid(prm.count, g.threads, sizeof(gd::DetectShared),
             [&](const HostCta& cta, uint8_t* smem) { gd::detect_body(cta, prm, smem); }, g.sched);
  }
  if (prm.total_slots) {
    const gd::EncodeSmemLayout lay = gd::encode_smem_layout(max_planes, prm.block_log2);
    run_grid(g.grid, g.threads, lay.total,
             [&](const HostCta& cta, uint8_t* smem) { gd::encode_body(cta, prm, smem, lay); }, g.sched);
  }
  run_grid(g.grid, g.threads, 16, [&](const HostCta& cta, uint8_t* smem) {
    gd::finalize_body(cta, prm, reinterpret_cast<uint32_t*>(smem));
  }, g.sched);
  // The types detected for auto stay in the workspace (rewritten by every call); all else is clear.
  for (size_t b = 0; b < ws.size(); ++b) {
    if (b >= gd::kItemStateOffset && b < gd::kSlotsOffset) continue;
    EXPECT_EQ(ws[b], 0) << "workspace byte " << b << " not cleared";
  }
  std::vector<std::vector<uint8_t>> frames(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(res[i].status, 0);
    EXPECT_EQ(res[i].ready, 1u);
    EXPECT_EQ(host_res[i].size, res[i].size);
    EXPECT_EQ(host_res[i].ready, 1u);
    frames[i].assign(dst[i].begin() + in[i].offset, dst[i].begin() + in[i].offset + res[i].size);
  }
  return frames;
}

struct EmuDecoded {
  std::vector<uint8_t> bytes;
  int status;
};

// Decodes frames the way decode_batch_async does, into buffers of `cap[i]` bytes followed by a guard.
inline std::vector<EmuDecoded> emu_decode_launch(const std::vector<std::vector<uint8_t>>& frames,
                                                 const std::vector<size_t>& cap, EmuGrid g) {
  constexpr size_t kGuard = 64;
  std::vector<std::vector<uint8_t>> dst(frames.size());
  std::vector<codec::gpu::DecodeItem> items(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    dst[i].assign(cap[i] + kGuard, 0x5A);
    items[i] = {frames[i].data(), frames[i].size(), dst[i].data(), cap[i]};
  }
  gd::DecodeParams prm;
  uint64_t bound = 0;
  EXPECT_EQ(gd::build_decode_params(items.data(), items.size(), &prm, &bound), codec::gpu::GpuStatus::kOk);
  std::vector<uint8_t> ws(gd::decode_workspace_bytes(), 0);
  std::vector<codec::gpu::CodecResult> res(frames.size()), host_res(frames.size());
  prm.workspace = ws.data();
  prm.results = res.data();
  prm.host_results = host_res.data();
  run_grid(g.grid, g.threads, sizeof(gd::DecodeShared),
           [&](const HostCta& cta, uint8_t* smem) { gd::decode_body(cta, prm, smem); }, g.sched);
  for (uint8_t b : ws) EXPECT_EQ(b, 0);
  std::vector<EmuDecoded> out(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    for (size_t j = cap[i]; j < cap[i] + kGuard; ++j) EXPECT_EQ(dst[i][j], 0x5A) << "write past dst";
    EXPECT_EQ(res[i].ready, 1u);
    EXPECT_EQ(host_res[i].status, res[i].status);
    out[i].status = res[i].status;
    out[i].bytes.assign(dst[i].begin(), dst[i].begin() + (res[i].status == 0 ? res[i].size : 0));
  }
  return out;
}

// As decode_batch_async: launches of at most kMaxBatch messages.
inline std::vector<EmuDecoded> emu_decode(const std::vector<std::vector<uint8_t>>& frames, const std::vector<size_t>& cap,
                                          EmuGrid g = EmuGrid()) {
  std::vector<EmuDecoded> out;
  for (size_t c0 = 0; c0 < frames.size(); c0 += gd::kMaxBatch) {
    const size_t c1 = std::min(frames.size(), c0 + gd::kMaxBatch);
    const auto part = emu_decode_launch({frames.begin() + c0, frames.begin() + c1}, {cap.begin() + c0, cap.begin() + c1}, g);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

inline std::vector<uint8_t> cpu_encode(const std::vector<uint8_t>& in, codec::ElemType t, int block_log2) {
  std::vector<uint8_t> f(codec::max_encoded_size(in.size()));
  size_t n = 0;
  codec::EncodeOptions o;
  o.type = t;
  o.block_log2 = block_log2;
  EXPECT_EQ(codec::encode(in.data(), in.size(), f.data(), f.size(), &n, o), codec::Status::kOk);
  f.resize(n);
  return f;
}

}  // namespace testing
}  // namespace zipccl
