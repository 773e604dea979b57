// Runs the receive-side fuzz entry point (fuzz_recv.cpp) over what a real SendComm puts on the wire
// and over mutations of it, so that every build (not only clang's fuzzer build) exercises it, under
// ASan and UBSan in CI's sanitizer stage. With ZIPCCL_FUZZ_RECV_SEEDS=DIR it also writes those
// inputs there, as the seeds of a libFuzzer run (docs/notes/plugin.md, "Fuzzing the receive side").
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layer/comm.h"
#include "layer/frame.h"
#include "plugin_data.h"
#include "testing/gpu_emulated.h"
#include "transport.h"

void fuzz_recv_one(const uint8_t* data, size_t size, std::vector<std::vector<uint8_t>>* received);
std::vector<std::pair<size_t, size_t>> fuzz_recv_messages(const uint8_t* data, size_t size);

using namespace zipccl::net;
using zipccl_test::DataKind;
using zipccl_test::make_data;

namespace {

// Every message compressed where it shrinks, however small (the seeds then hold codec frames and raw
// ones). Set before the plugin's settings are read.
const bool g_env = [] {
  setenv("ZIPCCL_COMPRESS", "always", 0);
  setenv("ZIPCCL_MIN_BYTES", "0", 0);
  return true;
}();

struct Captured {
  uint8_t meta[kMetaBytes];
  std::vector<uint8_t> payload;
};

// Keeps every posted message; each op completes at once.
class Capture final : public SendConn {
 public:
  explicit Capture(std::vector<Captured>* out) : out_(out) {}
  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override {
    Captured c;
    std::memcpy(c.meta, meta, kMetaBytes);
    const auto* p = static_cast<const uint8_t*>(payload);
    c.payload.assign(p, p + len);
    out_->push_back(std::move(c));
    *op = 0;
    return ncclSuccess;
  }
  ncclResult_t test(int, bool* done) override {
    *done = true;
    return ncclSuccess;
  }
  void link_progress(uint64_t* d, uint64_t* b) override { *d = *b = 0; }
  bool carries_segments() const override { return true; }

 private:
  std::vector<Captured>* out_;
};

void put32(std::vector<uint8_t>* v, uint32_t x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v->insert(v->end(), p, p + 4);
}

// An input of fuzz_recv.cpp's format: receives of `capacity` bytes, and the transport messages a
// SendComm posts for `msgs` (64 KiB segments: fuzz_recv.cpp sets them).
std::vector<uint8_t> wire_of(const std::vector<std::vector<uint8_t>>& msgs,
                             const std::vector<uint32_t>& capacity) {
  std::vector<Captured> posted;
  {
    DeviceInfo dev;
    dev.name = "seed";
    SendComm send(new Capture(&posted), dev);
    for (size_t k = 0; k < msgs.size(); ++k) {  // message k with tag k: a grouped receive's k-th takes it
      void* req = nullptr;
      while (!req) {
        EXPECT_EQ(send.isend(const_cast<uint8_t*>(msgs[k].data()), msgs[k].size(), static_cast<int>(k), &req),
                  ncclSuccess);
      }
      int done = 0;
      size_t size = 0;
      while (!done) EXPECT_EQ(send.test(req, &done, &size), ncclSuccess);
    }
  }
  std::vector<uint8_t> in{static_cast<uint8_t>(capacity.size() - 1)};
  for (uint32_t c : capacity) put32(&in, c);
  for (const Captured& c : posted) {
    in.insert(in.end(), c.meta, c.meta + kMetaBytes);
    put32(&in, static_cast<uint32_t>(c.payload.size()));
    in.insert(in.end(), c.payload.begin(), c.payload.end());
  }
  return in;
}

using Messages = std::vector<std::vector<uint8_t>>;
struct Seed {
  Messages sent;
  std::vector<uint8_t> input;
};

std::vector<Seed> seeds() {
  const std::pair<Messages, std::vector<uint32_t>> cases[] = {
      {{make_data(DataKind::kBf16Gauss, 200000, 1)}, {200000}},  // 4 codec segments
      {{make_data(DataKind::kRandom, 70000, 2)}, {70000}},       // 2 raw segments
      {{make_data(DataKind::kBf16Gauss, 30000, 3)}, {40000}},    // one whole frame, room to spare
      {{make_data(DataKind::kFp32Gauss, 5000, 4)}, {8192}},
      {{std::vector<uint8_t>()}, {0}},
      {{make_data(DataKind::kBf16Gauss, 100000, 5), make_data(DataKind::kFp16Gauss, 3000, 6)},
       {100000, 3000}},
      {{make_data(DataKind::kFp16Gauss, 9000, 7), make_data(DataKind::kRandom, 300, 8),
        make_data(DataKind::kBf16Gauss, 150000, 9)},
       {9000, 4096, 150000}},
  };
  std::vector<Seed> out;
  for (const auto& c : cases) {
    const Seed seed{c.first, wire_of(c.first, c.second)};
    // Host and device receives, one at a time and, with several, grouped in one irecv.
    for (uint8_t mode : {0x00, 0x80, 0x40, 0xC0}) {
      if ((mode & 0x40) && c.second.size() < 2) continue;
      out.push_back(seed);
      out.back().input[0] |= mode;
    }
  }
  return out;
}

// Offsets of the transport messages' headers in an input.
std::vector<size_t> headers(const std::vector<uint8_t>& in) {
  std::vector<size_t> at;
  for (const auto& m : fuzz_recv_messages(in.data(), in.size())) at.push_back(m.first);
  return at;
}

// The seeds are what the fuzzer starts from: through the entry point each arrives bit-exact, so the
// fuzzer's mutations start inside the receive path, not at its first check.
TEST(FuzzRecvReplay, WhatASenderPostsArrivesBitExact) {
  const auto s = seeds();
  for (size_t i = 0; i < s.size(); ++i) {
    Messages got;
    const uint64_t device_ops = gpu::emulated_data_ops_done();
    fuzz_recv_one(s[i].input.data(), s[i].input.size(), &got);
    EXPECT_EQ(got, s[i].sent) << "seed " << i;
    // Device receives of data went through the GPU path (the emulated stream's copies and decodes).
    if ((s[i].input[0] & 0x80) && !s[i].sent[0].empty()) {
      EXPECT_GT(gpu::emulated_data_ops_done(), device_ops) << "seed " << i;
    }
  }
  // The first seed: 4 segments of 64 KiB (the last shorter), codec frames.
  const std::vector<size_t> at = headers(s[0].input);
  ASSERT_EQ(at.size(), 4u);
  FrameMeta m;
  std::memcpy(&m, &s[0].input[at[0]], sizeof m);
  EXPECT_EQ(m.version, kFrameVersionSegment);
  EXPECT_EQ(m.kind, static_cast<uint8_t>(FrameKind::kCodec));
  if (const char* dir = std::getenv("ZIPCCL_FUZZ_RECV_SEEDS")) {
    for (size_t i = 0; i < s.size(); ++i) {
      const std::string path = std::string(dir) + "/seed" + std::to_string(i);
      FILE* f = std::fopen(path.c_str(), "wb");
      ASSERT_NE(f, nullptr) << path;
      EXPECT_EQ(std::fwrite(s[i].input.data(), 1, s[i].input.size(), f), s[i].input.size());
      std::fclose(f);
    }
  }
}

// Mutations a lying or broken peer makes: a header field set to a value from a list of edges or at
// random, a payload byte flipped, the input cut short, a message's length changed.
TEST(FuzzRecvReplay, MutatedWireIsAnErrorOrArrivesNeverACrash) {
  std::mt19937_64 rng(7);
  const uint64_t edges[] = {
      0, 1, 2, 0xffff, 0x10000, 0x10001, 0x7fffffff, 0xffffffff, 0x100000000ull, ~0ull, ~0ull >> 1};
  size_t intact = 0, other = 0;
  for (const auto& seed : seeds()) {
    const std::vector<size_t> at = headers(seed.input);
    for (int i = 0; i < 150; ++i) {
      std::vector<uint8_t> in = seed.input;
      const int op = static_cast<int>(rng() % 4);
      if (op == 0 && !at.empty()) {  // a header field: offsets of FrameMeta's fields and their widths
        const size_t field[][2] = {{0, 4}, {4, 1}, {5, 1}, {6, 2}, {8, 4}, {12, 4}, {16, 8}, {24, 8}};
        const auto& f = field[rng() % 8];
        const uint64_t v = rng() % 2 ? edges[rng() % (sizeof edges / sizeof edges[0])] : rng();
        std::memcpy(&in[at[rng() % at.size()] + f[0]], &v, f[1]);
      } else if (op == 1) {
        in[rng() % in.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      } else if (op == 2) {
        in.resize(rng() % in.size());
      } else if (!at.empty()) {  // the transport's length of a message (what the stand-in delivers)
        const uint32_t len = static_cast<uint32_t>(rng() % 70000);
        std::memcpy(&in[at[rng() % at.size()] + kMetaBytes], &len, 4);
      }
      Messages got;
      fuzz_recv_one(in.data(), in.size(), &got);  // aborts on a write past a buffer or a hang
      (got == seed.sent ? intact : other) += 1;
    }
  }
  // Both outcomes occur: some mutations leave every message intact (a byte the receiver does not read,
  // a cut after the last one), the others change, stop or fail a receive.
  EXPECT_GT(intact, 0u);
  EXPECT_GT(other, 0u);
}

// Inputs a libFuzzer run of fuzz_recv found, each for a defect fixed since (the entry point aborts
// where it would come back).
TEST(FuzzRecvReplay, WhatTheFuzzerFound) {
  // Four device receives in one grouped irecv (0xff: device, grouped, four), of 8, 0, 0 and 0 bytes:
  // their staging regions together did not fit the arenas the comm's registrations made (twice the
  // largest), so irecv handed back no request, every time: NCCL would have retried for ever. Now an
  // error with a WARN.
  const uint8_t group_larger_than_staging[] = {0xff, 0x08, 0x00, 0x00, 0x00};
  fuzz_recv_one(group_larger_than_staging, sizeof group_larger_than_staging, nullptr);
}

}  // namespace
