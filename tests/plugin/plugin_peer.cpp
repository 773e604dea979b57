// Helper process for the fault tests: a peer that streams 16 MiB messages through the plugin until
// it is killed.  plugin_peer send <hex handle>   |   plugin_peer recv   (prints its handle)
// And a process that exits with traffic in flight:  plugin_peer exit <ms> [<stats dir>]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zipccl/net_client.h"

static void quiet_logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

// A thread of its own sends to and receives from this same process over the plugin, as NCCL's proxy
// thread drives it; the main thread calls exit() <ms> after the first message arrived, without closing
// anything, as a rank does that ends without destroying its communicators. Static destructors then run
// while that thread, and the plugin's own threads, are still inside the plugin. Exit status 0 when the
// process ended cleanly; the thread's failures exit with 20+ (a failure before the first message is
// the test's, not the exit's).
int exit_in_flight(zipccl::net_client::Net* net, void* ctx, int ms) {
  static std::atomic<int> received{0};
  std::thread pump([net, ctx] {
    const size_t kSize = 1 << 20;
    auto* buf = new std::vector<unsigned char>(2 * kSize);  // never freed: the process exits under it
    // bf16 with a narrow exponent, random sign and mantissa: what the codec compresses, so that its
    // workers are busy on both sides when the process exits.
    uint32_t x = 12345;
    for (size_t i = 0; i + 1 < kSize; i += 2) {
      x = x * 1664525u + 1013904223u;
      const uint16_t v = static_cast<uint16_t>(((x >> 16) & 0x807F) | ((118 + ((x >> 8) & 7)) << 7));
      std::memcpy(buf->data() + i, &v, 2);
    }
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    zipccl::net_client::DeviceHandle* dh = nullptr;
    if (net->listen(ctx, 0, handle, &lc) != ncclSuccess) std::_Exit(20);
    while (!sc || !rc) {
      if (!sc && net->connect(ctx, 0, handle, &sc, &dh) != ncclSuccess) std::_Exit(21);
      if (!rc && net->accept(lc, &rc, &dh) != ncclSuccess) std::_Exit(22);
    }
    void *smh = nullptr, *rmh = nullptr;
    if (net->reg_mr(sc, buf->data(), kSize, NCCL_PTR_HOST, &smh) != ncclSuccess ||
        net->reg_mr(rc, buf->data() + kSize, kSize, NCCL_PTR_HOST, &rmh) != ncclSuccess)
      std::_Exit(23);
    for (;;) {
      void *sreq = nullptr, *rreq = nullptr;
      while (!sreq || !rreq) {
        if (!sreq && net->isend(sc, buf->data(), kSize, 0, smh, &sreq) != ncclSuccess) std::_Exit(24);
        if (!rreq && net->irecv(rc, buf->data() + kSize, kSize, 0, rmh, &rreq) != ncclSuccess) std::_Exit(25);
      }
      int sdone = 0, rdone = 0;
      while (!sdone || !rdone) {
        // Once the process is exiting, errors are what the plugin may answer; crashing is not.
        if (!sdone && net->test(sreq, &sdone, nullptr) != ncclSuccess) return;
        if (!rdone && net->test(rreq, &rdone, nullptr) != ncclSuccess) return;
      }
      received.fetch_add(1);
    }
  });
  pump.detach();
  for (int waited = 0; received.load() == 0; ++waited) {
    if (waited > 30000) return 26;  // no message within 30 s
    usleep(1000);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::printf("exit after %d messages\n", received.load());
  std::fflush(stdout);
  std::exit(0);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  // exit's live statistics (before the plugin reads its settings): its last snapshot is written at exit.
  if (!std::strcmp(argv[1], "exit") && argc == 4) setenv("ZIPCCL_STATS_DIR", argv[3], 1);
  const char* other = std::getenv("ZIPCCL_TEST_PLUGIN");  // as the tests' plugin_library()
  void* lib = zipccl_net_dlopen(other && *other ? other : ZIPCCL_PLUGIN_PATH, nullptr, 0, nullptr, 0);
  if (!lib) return 3;
  auto net = zipccl::net_client::load_version(lib, 9);
  void* ctx = nullptr;
  if (!net || net->init(&ctx, 0, nullptr, quiet_logger, nullptr) != ncclSuccess) return 4;
  if (!std::strcmp(argv[1], "exit") && (argc == 3 || argc == 4))
    return exit_in_flight(net.get(), ctx, std::atoi(argv[2]));
  const size_t kSize = 16 << 20;
  std::vector<unsigned char> buf(kSize);
  for (size_t i = 0; i < kSize; ++i) buf[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  zipccl::net_client::DeviceHandle* dh = nullptr;
  if (!std::strcmp(argv[1], "send") && argc == 3) {
    if (std::strlen(argv[2]) != 2 * sizeof handle) return 5;
    for (size_t i = 0; i < sizeof handle; ++i) {
      unsigned v;
      std::sscanf(argv[2] + 2 * i, "%2x", &v);
      handle[i] = static_cast<char>(v);
    }
    void* sc = nullptr;
    while (!sc) {
      if (net->connect(ctx, 0, handle, &sc, &dh) != ncclSuccess) return 6;
    }
    // Registered as NCCL registers its buffers: some plugins (aws-ofi-nccl) require a handle.
    void* mh = nullptr;
    if (net->reg_mr(sc, buf.data(), kSize, NCCL_PTR_HOST, &mh) != ncclSuccess) return 10;
    for (int n = 0;; ++n) {
      void* req = nullptr;
      while (!req) {
        if (net->isend(sc, buf.data(), kSize, 0, mh, &req) != ncclSuccess) return 7;
      }
      int done = 0;
      while (!done) {
        if (net->test(req, &done, nullptr) != ncclSuccess) return 8;
      }
      std::printf("sent %d\n", n);
      std::fflush(stdout);
    }
  }
  if (!std::strcmp(argv[1], "recv")) {
    void* lc = nullptr;
    if (net->listen(ctx, 0, handle, &lc) != ncclSuccess) return 6;
    for (unsigned char c : std::string(handle, sizeof handle)) std::printf("%02x", c);
    std::printf("\n");
    std::fflush(stdout);
    void* rc = nullptr;
    while (!rc) {
      if (net->accept(lc, &rc, &dh) != ncclSuccess) return 7;
    }
    void* mh = nullptr;
    if (net->reg_mr(rc, buf.data(), kSize, NCCL_PTR_HOST, &mh) != ncclSuccess) return 10;
    for (int n = 0;; ++n) {
      void* req = nullptr;
      while (!req) {
        if (net->irecv(rc, buf.data(), kSize, 0, mh, &req) != ncclSuccess) return 8;
      }
      int done = 0;
      while (!done) {
        if (net->test(req, &done, nullptr) != ncclSuccess) return 9;
      }
      std::printf("recv %d\n", n);
      std::fflush(stdout);
    }
  }
  return 2;
}
