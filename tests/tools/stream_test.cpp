// `zipccl compress` / `decompress` as streams: many frames per file, pipes, the zstd-style command
// line (-o, -f, -k/--rm, -c, default names, terminals), damaged streams, and files of earlier versions
// (one large frame); `zipccl inspect` of a stream. Runs the built binary as a user would.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "zipccl/codec.h"

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN must name the zipccl binary"
#endif

namespace {

using Bytes = std::vector<uint8_t>;
using zipccl::codec::FrameInfo;
using zipccl::codec::Status;
constexpr size_t kMiB = size_t{1} << 20;

// Bytes that look like bf16 gradients (a few exponents, random sign and mantissa), fast to make.
Bytes gradient_like(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  Bytes b(n);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const uint32_t r = gen();
    const uint16_t v = static_cast<uint16_t>((r & 0x807F) | ((118 + (r >> 8) % 4 + (r >> 12) % 4) << 7));
    b[i] = static_cast<uint8_t>(v);
    b[i + 1] = static_cast<uint8_t>(v >> 8);
  }
  if (n % 2) b[n - 1] = 0x5A;
  return b;
}

// The original sizes of a stream's frames, walked with the codec's own header reader.
std::vector<uint64_t> frame_sizes(const Bytes& z) {
  std::vector<uint64_t> sizes;
  for (size_t off = 0; off < z.size();) {
    FrameInfo info{};
    if (zipccl::codec::read_frame_info(z.data() + off, z.size() - off, &info) != Status::kOk) return {};
    sizes.push_back(info.original_size);
    off += info.frame_size;
  }
  return sizes;
}

class Stream : public zipccl_test::TempDirTest {
 protected:
  // Runs `zipccl ARGS` in the temp dir (shell syntax allowed); returns the exit status, keeps stderr.
  int zipccl(const std::string& args) { return run_keeping_stderr("'" ZIPCCL_BIN "' " + args); }
};

// Sizes around the frame (1 MiB here) and the element (2 and 4 bytes): the last frame is short, a
// frame boundary falls at the very end, or an element's bytes would straddle two frames.
TEST_F(Stream, ManyFramesRoundTripAtEverySize) {
  const size_t sizes[] = {0, 1, 3, kMiB - 1, kMiB, 2 * kMiB, 2 * kMiB + 1, 3 * kMiB + 3};
  for (size_t n : sizes) {
    for (const char* t : {"-t bf16", "-t fp32", ""}) {
      SCOPED_TRACE("size " + std::to_string(n) + " " + t);
      const Bytes data = gradient_like(n, static_cast<unsigned>(n) + 1);
      write("in.bin", data);
      ASSERT_EQ(zipccl(std::string("compress -f --frame-mib 1 --threads 2 ") + t + " in.bin -o in.zcc"), 0)
          << stderr_;
      const std::vector<uint64_t> sizes_seen = frame_sizes(read("in.zcc"));
      ASSERT_EQ(sizes_seen.size(), n == 0 ? 1 : (n + kMiB - 1) / kMiB);
      for (size_t i = 0; i + 1 < sizes_seen.size(); ++i) EXPECT_EQ(sizes_seen[i], kMiB);
      ASSERT_EQ(zipccl("decompress -f in.zcc -o out.bin"), 0) << stderr_;
      EXPECT_TRUE(read("out.bin") == data);
    }
  }
}

// A pipe delivers 64 KiB per read: frames must still be whole (1 MiB) and the bytes the same.
TEST_F(Stream, PipesInAndOut) {
  const Bytes data = gradient_like(3 * kMiB + 7, 5);
  write("in.bin", data);
  ASSERT_EQ(zipccl("compress --frame-mib 1 - < in.bin > redirected.zcc"), 0) << stderr_;
  ASSERT_EQ(zipccl("compress --frame-mib 1 -c in.bin | cat > piped.zcc"), 0) << stderr_;
  ASSERT_EQ(run_here("cat in.bin | '" ZIPCCL_BIN "' compress --frame-mib 1 - | cat > both.zcc"), 0);
  const Bytes z = read("redirected.zcc");
  EXPECT_TRUE(read("piped.zcc") == z);
  EXPECT_TRUE(read("both.zcc") == z);
  EXPECT_EQ(frame_sizes(z), (std::vector<uint64_t>{kMiB, kMiB, kMiB, 7}));
  ASSERT_EQ(run_here("cat both.zcc | '" ZIPCCL_BIN "' decompress - | cat > out.bin"), 0);
  EXPECT_TRUE(read("out.bin") == data);
  ASSERT_EQ(zipccl("decompress -c both.zcc > out2.bin"), 0) << stderr_;
  EXPECT_TRUE(read("out2.bin") == data);
}

TEST_F(Stream, OutputNamesOverwriteAndRemove) {
  const Bytes data = gradient_like(100001, 6);
  write("a.bin", data);
  ASSERT_EQ(zipccl("compress a.bin"), 0) << stderr_;  // a.bin.zcc, a.bin kept
  EXPECT_TRUE(read("a.bin") == data);
  const Bytes z = read("a.bin.zcc");
  ASSERT_FALSE(z.empty());

  write_text("a.bin.zcc", "precious");
  EXPECT_EQ(zipccl("compress a.bin"), 1);
  EXPECT_NE(stderr_.find("already exists; use -f"), std::string::npos) << stderr_;
  EXPECT_EQ(read_text("a.bin.zcc"), "precious");
  ASSERT_EQ(zipccl("compress -k -f a.bin"), 0) << stderr_;
  EXPECT_TRUE(read("a.bin.zcc") == z);

  EXPECT_EQ(zipccl("decompress a.bin.zcc"), 1);  // a.bin exists
  EXPECT_TRUE(read("a.bin") == data);
  ASSERT_EQ(zipccl("decompress a.bin.zcc -o b.bin"), 0) << stderr_;
  EXPECT_TRUE(read("b.bin") == data);
  ASSERT_EQ(zipccl("compress --rm b.bin"), 0) << stderr_;
  EXPECT_FALSE(exists("b.bin"));
  ASSERT_EQ(zipccl("decompress --rm b.bin.zcc"), 0) << stderr_;  // b.bin again
  EXPECT_FALSE(exists("b.bin.zcc"));
  EXPECT_TRUE(read("b.bin") == data);

  // A failed run removes its partial output and keeps the input, --rm or not.
  write("bad.zcc", Bytes(z.begin(), z.end() - 1));
  EXPECT_EQ(zipccl("decompress --rm bad.zcc"), 1);
  EXPECT_TRUE(exists("bad.zcc"));
  EXPECT_FALSE(exists("bad"));
  EXPECT_EQ(zipccl("decompress -f --rm bad.zcc -o b.bin"), 1);
  EXPECT_FALSE(exists("b.bin"));
  EXPECT_TRUE(exists("bad.zcc"));
}

TEST_F(Stream, CommandLineErrorsExitTwo) {
  write("a.bin", gradient_like(1000, 7));
  EXPECT_EQ(zipccl("decompress a.bin"), 2);  // no .zcc suffix to strip
  EXPECT_NE(stderr_.find(".zcc"), std::string::npos) << stderr_;
  EXPECT_EQ(zipccl("compress a.bin x -o y"), 2);
  EXPECT_EQ(zipccl("compress -o x -o y a.bin"), 2);
  EXPECT_EQ(zipccl("compress --rm - x.zcc < a.bin"), 2);
  EXPECT_EQ(zipccl("compress --rm -c a.bin > /dev/null"), 2);
  EXPECT_EQ(zipccl("compress --frame-mib 0 a.bin"), 2);
  EXPECT_EQ(zipccl("compress --frame-mib 4096 a.bin"), 2);
  EXPECT_EQ(zipccl("decompress --frame-mib 1 a.zcc"), 2);
  EXPECT_FALSE(exists("x.zcc"));
  EXPECT_FALSE(exists("a.bin.zcc"));
}

// Compressed data is not written to (or read from) a terminal unless forced, as zstd does.
TEST_F(Stream, TerminalsAreRefused) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) GTEST_SKIP() << "no pseudo-terminal here (posix_openpt: " << std::strerror(errno) << ")";
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string tty = ptsname(master);
  write("a.bin", gradient_like(1000, 8));
  EXPECT_EQ(zipccl("compress a.bin - > " + tty), 1);
  EXPECT_NE(stderr_.find("terminal"), std::string::npos) << stderr_;
  EXPECT_EQ(zipccl("compress -c a.bin > " + tty), 1);
  EXPECT_EQ(zipccl("decompress - x.bin < " + tty), 1);
  EXPECT_NE(stderr_.find("stdin is a terminal"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("x.bin"));
  EXPECT_EQ(zipccl("compress -f a.bin - > " + tty), 0) << stderr_;
  char buf[4] = {};
  EXPECT_EQ(::read(master, buf, 4), 4);  // the frame reached the terminal
  EXPECT_EQ(std::memcmp(buf, "ZCC1", 4), 0);
  ::close(master);
}

// Earlier versions wrote frames of 64 MiB (a single frame for smaller files), and streams may be
// concatenated: frames of any sizes, in any mix, decode.
TEST_F(Stream, SingleLargeFramesAndMixedStreamsDecode) {
  const Bytes data = gradient_like(5 * kMiB + 3, 9);
  Bytes frame(zipccl::codec::max_encoded_size(data.size()));
  size_t n = 0;
  zipccl::codec::EncodeOptions eo;
  eo.type = zipccl::codec::ElemType::kBf16;
  ASSERT_EQ(zipccl::codec::encode(data.data(), data.size(), frame.data(), frame.size(), &n, eo), Status::kOk);
  frame.resize(n);
  write("old.zcc", frame);
  ASSERT_EQ(zipccl("decompress old.zcc"), 0) << stderr_;
  EXPECT_TRUE(read("old") == data);

  write("new.bin", data);
  ASSERT_EQ(zipccl("compress --frame-mib 2 new.bin"), 0) << stderr_;
  Bytes mixed = read("new.bin.zcc");
  mixed.insert(mixed.end(), frame.begin(), frame.end());
  write("mixed.zcc", mixed);
  ASSERT_EQ(zipccl("decompress mixed.zcc"), 0) << stderr_;
  Bytes twice = data;
  twice.insert(twice.end(), data.begin(), data.end());
  EXPECT_TRUE(read("mixed") == twice);
}

// Damage anywhere in a stream of several frames: exit 1 with the frame named, no output left, never
// a crash. Truncations at every frame boundary and inside frames, and random byte changes.
TEST_F(Stream, DamagedStreamsFailCleanly) {
  write("in.bin", gradient_like(3 * kMiB + 5, 10));
  ASSERT_EQ(zipccl("compress --frame-mib 1 -t bf16 in.bin"), 0) << stderr_;
  const Bytes z = read("in.bin.zcc");
  FrameInfo first{};
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data(), z.size(), &first), Status::kOk);

  write("cut.zcc", Bytes(z.begin(), z.begin() + first.frame_size + 10));
  EXPECT_EQ(zipccl("decompress cut.zcc"), 1);
  EXPECT_NE(stderr_.find("frame 1 at byte " + std::to_string(first.frame_size)), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("truncated"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("cut"));

  Bytes garbage(z.begin(), z.begin() + first.frame_size);
  garbage.insert(garbage.end(), 40, 0x33);
  write("garbage.zcc", garbage);
  EXPECT_EQ(zipccl("decompress garbage.zcc"), 1);
  EXPECT_NE(stderr_.find("frame 1"), std::string::npos) << stderr_;
  EXPECT_FALSE(exists("garbage"));

  std::mt19937 gen(11);
  for (int i = 0; i < 40; ++i) {
    Bytes bad = z;
    if (i % 4 == 0) {
      bad.resize(gen() % z.size());
    } else {
      // Headers and block indexes are where lengths live: aim half the changes at frame starts.
      const size_t at = i % 2 ? gen() % z.size() : (gen() % 3) * first.frame_size + gen() % 64;
      bad[std::min(at, z.size() - 1)] ^= static_cast<uint8_t>(1 + gen() % 255);
    }
    write("bad.zcc", bad);
    const int rc = zipccl("decompress -f bad.zcc");
    ASSERT_TRUE(rc == 0 || rc == 1) << "case " << i << ": exit " << rc << " " << stderr_;
    if (rc == 1) {
      EXPECT_FALSE(exists("bad")) << "case " << i;
    }
    EXPECT_TRUE(rc == 1 || zipccl("inspect bad.zcc > /dev/null") == 0) << "case " << i << stderr_;
  }
}

// A frame that fails to decode while the reader waits on a pipe whose writer has stalled: the command
// must report it and exit at once, not when the writer next writes or closes (6 s here).
TEST_F(Stream, AFailureDoesNotWaitForAStalledPipe) {
  write("in.bin", gradient_like(3 * kMiB, 13));
  ASSERT_EQ(zipccl("compress --frame-mib 1 -t bf16 in.bin"), 0) << stderr_;
  Bytes z = read("in.bin.zcc");
  FrameInfo first{};
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data(), z.size(), &first), Status::kOk);
  // Damage frame 1's coded data (its length stays right), and stop inside frame 2.
  for (size_t i = first.frame_size + 2000; i < first.frame_size + 2100; ++i) z[i] ^= 0x5A;
  z.resize(z.size() - 100000);
  write("bad.zcc", z);
  for (int i = 0; i < 4; ++i) {
    const std::string fifo = "stalled" + std::to_string(i);
    ASSERT_EQ(run_here("mkfifo " + fifo), 0);
    const auto t0 = std::chrono::steady_clock::now();
    // The writer holds the pipe open in the background, its other ends away from the test's; the
    // shell waits for zipccl alone.
    const int rc = run_here("{ (cat bad.zcc; sleep 6) > " + fifo + " 2> /dev/null < /dev/null & } ; '" ZIPCCL_BIN
                            "' decompress -f - -o out.bin < " + fifo + " 2> stderr.txt");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stderr_ = read_text("stderr.txt");
    EXPECT_EQ(rc, 1) << stderr_;
    EXPECT_NE(stderr_.find("frame 1 at byte " + std::to_string(first.frame_size)), std::string::npos) << stderr_;
    EXPECT_LT(s, 4.0) << "round " << i;
  }
}

// A named input is mapped; when it shrinks mid-run the command must fail with a clear message, not
// die of SIGBUS. Deterministic: the output is a FIFO that is not read until the file is cut, so the
// writer blocks in frame 0 and frame 2 cannot be coded yet (the two output buffers hold frames 0 and
// 1): what comes out is whole frames of the uncut input, and frame 2 (or 3) is found cut.
TEST_F(Stream, AnInputCutWhileMappedFailsCleanly) {
  const Bytes data = gradient_like(6 * kMiB, 14);
  write("in.bin", data);
  ASSERT_EQ(zipccl("compress --frame-mib 1 -t bf16 in.bin -o in.zcc"), 0) << stderr_;
  const Bytes z = read("in.zcc");
  FrameInfo f0{}, f1{};
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data(), z.size(), &f0), Status::kOk);
  ASSERT_EQ(zipccl::codec::read_frame_info(z.data() + f0.frame_size, z.size() - f0.frame_size, &f1),
            Status::kOk);
  for (const bool compress : {true, false}) {
    ASSERT_EQ(run_here(std::string("cp ") + (compress ? "in.bin" : "in.zcc") +
                       " cut.in && rm -f o.fifo && mkfifo o.fifo"),
              0);
    const std::string cmd = compress ? "compress --frame-mib 1 -t bf16 -c cut.in" : "decompress -c cut.in";
    const int rc = run_here(
        "( { timeout 60 '" ZIPCCL_BIN "' " + cmd + " > o.fifo 2> stderr.txt; echo $? > rc.txt; } & " +
        "exec 3< o.fifo; head -c 1 <&3 > first.bin; truncate -s 100 cut.in; cat <&3 > rest.bin; wait )");
    EXPECT_EQ(rc, 0);
    stderr_ = read_text("stderr.txt");
    EXPECT_EQ(read_text("rc.txt"), "1\n") << cmd << ": " << stderr_;
    EXPECT_NE(stderr_.find("the file shrank while it was read (truncated)"), std::string::npos) << stderr_;
    Bytes out = read("first.bin");
    const Bytes rest = read("rest.bin");
    out.insert(out.end(), rest.begin(), rest.end());
    // Frame 1 too unless the failure (frame 3, once frame 0's slot is free) stopped the writer first.
    const size_t one = compress ? f0.frame_size : kMiB, two = compress ? one + f1.frame_size : 2 * kMiB;
    const Bytes& whole = compress ? z : data;
    EXPECT_TRUE(out == Bytes(whole.begin(), whole.begin() + two) ||
                out == Bytes(whole.begin(), whole.begin() + one))
        << cmd << ": " << out.size() << " bytes out";
  }
}

TEST_F(Stream, InspectListsAndChecksTheFrames) {
  write("in.bin", gradient_like(2 * kMiB + 100, 12));
  ASSERT_EQ(zipccl("compress --frame-mib 1 in.bin"), 0) << stderr_;
  ASSERT_EQ(zipccl("inspect in.bin.zcc > out.txt"), 0) << stderr_;
  const std::string out = read_text("out.txt");
  EXPECT_NE(out.find("a stream of zipccl frames"), std::string::npos) << out;
  EXPECT_NE(out.find("3 frames: " + std::to_string(2 * kMiB + 100) + " bytes"), std::string::npos) << out;
  EXPECT_NE(out.find("coded  bf16"), std::string::npos) << out;

  const Bytes z = read("in.bin.zcc");
  write("cut.zcc", Bytes(z.begin(), z.end() - 1));
  EXPECT_EQ(zipccl("inspect cut.zcc > out.txt"), 1);
  EXPECT_NE(stderr_.find("frame 2"), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("truncated"), std::string::npos) << stderr_;
}

}  // namespace
