// Runs the built `zipccl` binary as a user would: compress, decompress, compare; and the errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "zipccl/codec.h"

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN must name the zipccl binary"
#endif
#ifndef ZIPCCL_PROJECT_VERSION
#error "ZIPCCL_PROJECT_VERSION must be the top-level project(VERSION)"
#endif

namespace {

using Bytes = std::vector<uint8_t>;

class Cli : public zipccl_test::TempDirTest {
 protected:
  // Runs `zipccl ARGS` in the temp dir (shell syntax allowed); returns the exit status, keeps stderr.
  int zipccl(const std::string& args) { return run_keeping_stderr("'" ZIPCCL_BIN "' " + args); }

  void round_trip(const Bytes& data, const std::string& type_flag) {
    write("in.bin", data);
    ASSERT_EQ(zipccl("compress -f " + type_flag + " in.bin c.zc"), 0) << stderr_;
    ASSERT_EQ(zipccl("decompress -f c.zc out.bin"), 0) << stderr_;
    Bytes back = read("out.bin");
    ASSERT_EQ(back.size(), data.size()) << type_flag;
    EXPECT_TRUE(back == data) << "size " << data.size() << " " << type_flag;
  }
};

Bytes gaussian_bf16(size_t bytes, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  Bytes b(bytes);
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    float f = nd(gen);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    b[i] = static_cast<uint8_t>(u >> 16);
    b[i + 1] = static_cast<uint8_t>(u >> 24);
  }
  if (bytes % 2) b[bytes - 1] = 0x5A;
  return b;
}

Bytes random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(gen());
  return b;
}

TEST_F(Cli, RoundTripsEverySizeAndType) {
  const size_t sizes[] = {0, 1, 2, 3, 4095, 8192, 8193, 65537, (size_t{1} << 20) + 3};
  for (size_t n : sizes) {
    for (const char* t : {"", "-t auto", "-t bf16", "-t fp16", "-t fp32"}) {
      round_trip(gaussian_bf16(n, static_cast<unsigned>(n)), t);
      round_trip(random_bytes(n, static_cast<unsigned>(n) + 1), t);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(Cli, CompressesBf16AndWritesAFrame) {
  const Bytes data = gaussian_bf16(1 << 20, 3);
  write("g.bin", data);
  ASSERT_EQ(zipccl("compress -t bf16 --threads 2 g.bin g.zc"), 0) << stderr_;
  Bytes z = read("g.zc");
  EXPECT_LT(z.size(), data.size() * 8 / 10);  // Gaussian bf16 compresses ~1.5x
  zipccl::codec::FrameInfo info{};
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data(), z.size(), &info), zipccl::codec::Status::kOk);
  EXPECT_EQ(info.original_size, data.size());
  EXPECT_EQ(info.frame_size, z.size());
}

TEST_F(Cli, LargeFileBecomesSeveralFrames) {
  const size_t n = (size_t{8} << 20) + 4097;  // the default frame holds 8 MiB
  const Bytes tile = gaussian_bf16(size_t{1} << 20, 9);  // tiled: generating 8 MiB of normals is slow
  Bytes data(n);
  for (size_t i = 0; i < n; ++i) data[i] = tile[i % tile.size()];
  write("big.bin", data);
  ASSERT_EQ(zipccl("compress -t bf16 --threads 2 big.bin big.zc"), 0) << stderr_;
  Bytes z = read("big.zc");
  zipccl::codec::FrameInfo first{};
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data(), z.size(), &first), zipccl::codec::Status::kOk);
  EXPECT_EQ(first.original_size, size_t{8} << 20);
  EXPECT_LT(first.frame_size, z.size());
  ASSERT_EQ(zipccl("decompress --threads 2 big.zc big.out"), 0) << stderr_;
  EXPECT_TRUE(read("big.out") == data);
}

TEST_F(Cli, PipesAndConcatenatedStreams) {
  const Bytes a = gaussian_bf16(100001, 4), b = random_bytes(5000, 5);
  write("a.bin", a);
  write("b.bin", b);
  ASSERT_EQ(zipccl("compress - - < a.bin > a.zc"), 0) << stderr_;
  ASSERT_EQ(zipccl("compress b.bin b.zc"), 0) << stderr_;
  ASSERT_EQ(
      std::system(("cat '" + path("a.zc") + "' '" + path("b.zc") + "' > '" + path("ab.zc") + "'").c_str()),
      0);
  ASSERT_EQ(zipccl("decompress - - < ab.zc > ab.out"), 0) << stderr_;
  Bytes ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_TRUE(read("ab.out") == ab);
}

TEST_F(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(zipccl("compress"), 2);
  EXPECT_EQ(zipccl("compress a b c"), 2);
  EXPECT_EQ(zipccl("compress -t bf17 a b"), 2);
  EXPECT_NE(stderr_.find("bf16"), std::string::npos);
  EXPECT_EQ(zipccl("compress --threads 0 a b"), 2);
  EXPECT_EQ(zipccl("compress --block-log2 15 a b"), 2);  // the format's blocks are 2^10..2^14
  EXPECT_NE(stderr_.find("10 to 14"), std::string::npos) << stderr_;
  EXPECT_EQ(zipccl("compress --block-log2 9 a b"), 2);
  EXPECT_EQ(zipccl("compress --frobnicate a b"), 2);
  EXPECT_EQ(zipccl("decompress -t bf16 a b"), 2);  // the frame says its type
  EXPECT_EQ(zipccl("compress --help"), 0);
}

// ZIPCCL_CODEC_ISA forces the tool's kernel set as it does the plugin's; --isa overrides it; a name
// that is no set is a usage error naming the variable. Frames are the same bytes whichever set.
TEST_F(Cli, CodecIsaVariableChoosesTheKernelSet) {
  auto with_isa = [this](const std::string& isa, const std::string& args) {
    return run_keeping_stderr("env ZIPCCL_CODEC_ISA=" + isa + " '" ZIPCCL_BIN "' " + args);
  };
  write("g.bin", gaussian_bf16(300000, 5));
  ASSERT_EQ(zipccl("compress -v g.bin auto.zc"), 0) << stderr_;
  ASSERT_EQ(with_isa("scalar", "compress -v g.bin scalar.zc"), 0) << stderr_;
  EXPECT_NE(stderr_.find("scalar kernels"), std::string::npos) << stderr_;
  EXPECT_TRUE(read("auto.zc") == read("scalar.zc"));
  ASSERT_EQ(with_isa("scalar", "compress -v --isa auto g.bin again.zc"), 0);
  EXPECT_EQ(stderr_.find("scalar kernels"), std::string::npos) << "--isa auto did not override: " << stderr_;
  EXPECT_EQ(with_isa("avx9", "decompress scalar.zc out.bin"), 2);
  EXPECT_NE(stderr_.find("ZIPCCL_CODEC_ISA takes"), std::string::npos) << stderr_;
  EXPECT_EQ(with_isa("avx9", "bench --sets gauss-bf16-s1e-3 --reps 1"), 2);
}

TEST_F(Cli, MissingInputFailsCleanly) {
  EXPECT_EQ(zipccl("compress no-such-file out.zc"), 1);
  EXPECT_NE(stderr_.find("No such file"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("out.zc"));
  EXPECT_EQ(zipccl("decompress no-such-file out.bin"), 1);
}

TEST_F(Cli, CorruptStreamsFailAndLeaveNoOutput) {
  write("g.bin", gaussian_bf16(300000, 6));
  ASSERT_EQ(zipccl("compress -t bf16 g.bin g.zc"), 0) << stderr_;
  const Bytes z = read("g.zc");

  write("empty.zc", {});
  EXPECT_EQ(zipccl("decompress empty.zc out.bin"), 1);
  EXPECT_NE(stderr_.find("empty"), std::string::npos) << stderr_;

  write("notzc.zc", random_bytes(1000, 7));
  EXPECT_EQ(zipccl("decompress notzc.zc out.bin"), 1);
  EXPECT_NE(stderr_.find(zipccl::codec::status_string(zipccl::codec::Status::kBadMagic)), std::string::npos)
      << stderr_;
  EXPECT_FALSE(exists("out.bin"));

  write("trunc.zc", Bytes(z.begin(), z.end() - 1));
  EXPECT_EQ(zipccl("decompress trunc.zc out.bin"), 1);
  EXPECT_NE(stderr_.find("truncated"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("out.bin"));

  write("head.zc", Bytes(z.begin(), z.begin() + 3));
  EXPECT_EQ(zipccl("decompress head.zc out.bin"), 1);

  Bytes trailing = z;
  trailing.insert(trailing.end(), {1, 2, 3, 4, 5});
  write("trailing.zc", trailing);
  EXPECT_EQ(zipccl("decompress trailing.zc out.bin"), 1);
  EXPECT_NE(stderr_.find("frame 1"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("out.bin"));

  // Damage in the middle of the coded data: decode must fail or produce different bytes, never crash.
  Bytes flipped = z;
  for (size_t i = z.size() / 2; i < z.size() / 2 + 64; ++i) flipped[i] ^= 0x5A;
  write("flipped.zc", flipped);
  int rc = zipccl("decompress flipped.zc out.bin");
  EXPECT_TRUE(rc == 0 || rc == 1) << rc;
}

TEST_F(Cli, RefusesToOverwriteItsInput) {
  const Bytes data = random_bytes(777, 8);
  write("x.bin", data);
  EXPECT_EQ(zipccl("compress x.bin x.bin"), 1);
  EXPECT_TRUE(read("x.bin") == data);
}

// --gpu runs the CUDA codec. Where it can run (a GPU machine), its files must equal the CPU codec's
// at the GPU's default block size (8192 elements; the CPU's is 16384) and each side must restore the
// other's; elsewhere it must say why, exit 3 and write nothing.
TEST_F(Cli, GpuFlagMatchesTheCpuOrSaysWhyNot) {
  const Bytes data = gaussian_bf16((size_t{3} << 20) + 5, 11);
  write("in.bin", data);
  ASSERT_EQ(zipccl("compress -t bf16 --block-log2 13 in.bin cpu.zc"), 0) << stderr_;
  const int rc = zipccl("compress --gpu -t bf16 in.bin gpu.zc");
  if (rc == 3) {
    EXPECT_NE(stderr_.find("needs a GPU: "), std::string::npos) << stderr_;
    EXPECT_NE(stderr_.find("nothing was written"), std::string::npos) << stderr_;
    EXPECT_FALSE(exists("gpu.zc"));
    EXPECT_EQ(zipccl("decompress --gpu cpu.zc out.bin"), 3);
    EXPECT_FALSE(exists("out.bin"));
    EXPECT_EQ(zipccl("bench --gpu --quick --sets gauss-bf16-s1e-3"), 3);
    EXPECT_NE(stderr_.find("nothing was measured"), std::string::npos) << stderr_;
    return;
  }
  ASSERT_EQ(rc, 0) << stderr_;
  EXPECT_TRUE(read("gpu.zc") == read("cpu.zc"));
  ASSERT_EQ(zipccl("decompress --gpu cpu.zc a.bin"), 0) << stderr_;
  ASSERT_EQ(zipccl("decompress gpu.zc b.bin"), 0) << stderr_;
  EXPECT_TRUE(read("a.bin") == data);
  EXPECT_TRUE(read("b.bin") == data);
}

TEST_F(Cli, GpuFlagRejectsThreads) {
  write("in.bin", random_bytes(100, 2));
  EXPECT_EQ(zipccl("compress --gpu --threads 2 in.bin out.zc"), 2);
  EXPECT_NE(stderr_.find("does not go with --gpu"), std::string::npos) << stderr_;
  EXPECT_EQ(zipccl("bench --gpu --json"), 2);
}

// The version comes from the top-level project(VERSION), the commit from the checkout at build time.
TEST_F(Cli, VersionNamesTheProjectVersion) {
  for (const char* flag : {"--version", "-V"}) {
    ASSERT_EQ(zipccl(std::string(flag) + " > out.txt"), 0) << flag << ": " << stderr_;
    const std::string out = read_text("out.txt");
    const std::string want = "zipccl " ZIPCCL_PROJECT_VERSION;
    ASSERT_EQ(out.compare(0, want.size(), want), 0) << flag << ": " << out;
    const std::string rest = out.substr(want.size());
    EXPECT_TRUE(rest == "\n" || (rest.rfind(" (git ", 0) == 0 && rest.size() > 8 &&
                                 rest.compare(rest.size() - 2, 2, ")\n") == 0))
        << flag << ": " << out;
  }
  EXPECT_EQ(zipccl("--versions"), 2);
}

#ifdef ZIPCCL_CRASH_PLUGIN
// A side that dies by a signal is reported as a crash with the signal's name, at once: not as a hang
// after the run's deadline (2 x 0.2 s + 30 s here).
TEST_F(Cli, PerfReportsACrashedSideBySignal) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_here("ulimit -c 0; '" ZIPCCL_BIN "' perf --plugin '" ZIPCCL_CRASH_PLUGIN
                          "' --modes never --seconds 0.2 > out.txt 2> stderr.txt");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = read_text("out.txt");
  EXPECT_EQ(rc, 1) << out << read_text("stderr.txt");
  // Both sides load the plugin. The second to die has 2 s to do so before perf stops it; on a loaded
  // machine it may not have reached the plugin by then, and is reported as stopped, not as a hang.
  const std::string crashed = "crashed: SIGILL (illegal instruction)";
  const bool recv_crashed = out.find("FAILED never: receiver " + crashed) != std::string::npos;
  const bool send_crashed = out.find("sender " + crashed) != std::string::npos;
  EXPECT_TRUE(recv_crashed || send_crashed) << out;
  EXPECT_TRUE(recv_crashed || out.find("receiver stopped after the sender died") != std::string::npos) << out;
  EXPECT_TRUE(send_crashed || out.find("sender stopped after the receiver died") != std::string::npos) << out;
  EXPECT_EQ(out.find("timed out"), std::string::npos) << out;
  EXPECT_LT(s, 20.0) << out;
}
#endif

}  // namespace
