// codec_isa_pair [SET [MIB [REPS]]]: one built-in data set (tools/zipccl/datasets.h; default
// gauss-bf16-s1e-3, 64 MiB, 5 repetitions) encoded and decoded on one thread with the scalar, AVX2
// and AVX-512 kernel sets in turn, in one process on the same input, every frame compared with the
// first set's and every output with the input. Prints each set's best GB/s by the thread's CPU time
// and by the wall clock: on a shared machine the wall clock also counts the time other processes
// held the core, the CPU time only this thread's (cache and memory contention still count).
// A benchmark, not a test (BENCHMARKS.md section 1 has its figures); exit 1 on any mismatch.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../tools/zipccl/datasets.h"
#include "zipccl/codec.h"

namespace {

double seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Best CPU and wall seconds of fn over the repetitions so far.
struct Best {
  double cpu = 1e30, wall = 1e30;
  template <class Fn>
  void time(Fn fn) {
    const double c = seconds(CLOCK_THREAD_CPUTIME_ID), w = seconds(CLOCK_MONOTONIC);
    fn();
    cpu = std::min(cpu, seconds(CLOCK_THREAD_CPUTIME_ID) - c);
    wall = std::min(wall, seconds(CLOCK_MONOTONIC) - w);
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace zipccl;
  const std::string set = argc > 1 ? argv[1] : "gauss-bf16-s1e-3";
  const size_t mib = argc > 2 ? size_t(std::atoi(argv[2])) : 64;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<uint8_t> in;
  if (!tools::make_dataset(set, mib << 20, &in, 1) || in.empty()) {
    std::fprintf(stderr, "codec_isa_pair: unknown set '%s'\n", set.c_str());
    return 2;
  }
  const codec::Isa isas[] = {codec::Isa::kScalar, codec::Isa::kAvx2, codec::Isa::kAvx512};
  std::vector<uint8_t> frame(codec::max_encoded_size(in.size())), ref, out(in.size());
  Best enc[3], dec[3];
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      if (!codec::isa_supported(isas[k])) continue;
      codec::EncodeOptions eo;
      eo.isa = isas[k];
      codec::DecodeOptions dopt;
      dopt.isa = isas[k];
      size_t n = 0, m = 0;
      codec::Status se = codec::Status::kOk, sd = codec::Status::kOk;
      enc[k].time([&] { se = codec::encode(in.data(), in.size(), frame.data(), frame.size(), &n, eo); });
      if (se != codec::Status::kOk) return std::fprintf(stderr, "encode failed\n"), 1;
      if (ref.empty()) ref.assign(frame.begin(), frame.begin() + long(n));
      if (n != ref.size() || std::memcmp(frame.data(), ref.data(), n) != 0) {
        std::fprintf(stderr, "codec_isa_pair: %s frame differs from the first set's\n", codec::isa_name(isas[k]));
        return 1;
      }
      dec[k].time([&] { sd = codec::decode(ref.data(), ref.size(), out.data(), out.size(), &m, dopt); });
      if (sd != codec::Status::kOk || m != in.size() || std::memcmp(out.data(), in.data(), m) != 0) {
        std::fprintf(stderr, "codec_isa_pair: %s decode differs from the input\n", codec::isa_name(isas[k]));
        return 1;
      }
    }
  }
  std::printf("%s, %zu MiB, ratio %.3fx, best of %d, one thread, GB/s\n", set.c_str(), mib,
              double(in.size()) / double(ref.size()), reps);
  std::printf("%-8s %9s %9s %10s %10s\n", "set", "enc cpu", "dec cpu", "enc wall", "dec wall");
  const double b = double(in.size()) / 1e9;
  for (int k = 0; k < 3; ++k) {
    if (!codec::isa_supported(isas[k])) continue;
    std::printf("%-8s %9.2f %9.2f %10.2f %10.2f\n", codec::isa_name(isas[k]), b / enc[k].cpu, b / dec[k].cpu,
                b / enc[k].wall, b / dec[k].wall);
  }
  return 0;
}
