// Helper process for the fault tests: a peer that streams 16 MiB messages through the plugin until
// it is killed.  plugin_peer send <hex handle>   |   plugin_peer recv   (prints its handle)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "zipccl/net_client.h"

static void quiet_logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* other = std::getenv("ZIPCCL_TEST_PLUGIN");  // as the tests' plugin_library()
  void* lib = zipccl_net_dlopen(other && *other ? other : ZIPCCL_PLUGIN_PATH, nullptr, 0, nullptr, 0);
  if (!lib) return 3;
  auto net = zipccl::net_client::load_version(lib, 9);
  void* ctx = nullptr;
  if (!net || net->init(&ctx, 0, nullptr, quiet_logger, nullptr) != ncclSuccess) return 4;
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
