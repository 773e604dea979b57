// The input side of `zipccl compress` / `decompress` (tools/zipccl/stream_io.h): a regular file is mapped and
// read in place, a pipe is read into a buffer, and a mapped file that shrinks under the reader gives
// lost bytes (zeros and InputBytes::lost), never a SIGBUS that ends the process. The shrinking is
// made deterministic by truncating the file between taking its bytes and using them.
#include "stream_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "frame_stream.h"
#include "temp_dir.h"
#include "zipccl/codec.h"

namespace {

using zipccl::tools::FrameReader;
using zipccl::tools::InputBytes;
using zipccl::tools::InputFile;
using Bytes = std::vector<uint8_t>;
constexpr size_t kMiB = size_t{1} << 20;

Bytes random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(gen() % 7);  // compressible, so frames are coded
  return b;
}

// One bf16 frame of p[0, n); empty if the encoder fails.
Bytes encode_bf16(const uint8_t* p, size_t n) {
  Bytes frame(zipccl::codec::max_encoded_size(n));
  size_t used = 0;
  zipccl::codec::EncodeOptions opt;
  opt.type = zipccl::codec::ElemType::kBf16;
  if (zipccl::codec::encode(p, n, frame.data(), frame.size(), &used, opt) != zipccl::codec::Status::kOk)
    return {};
  frame.resize(used);
  return frame;
}

class StreamIo : public zipccl_test::TempDirTest {
 protected:
  void open(InputFile* in, const std::string& name) {
    std::string why;
    ASSERT_TRUE(in->open(path(name), &why)) << why;
  }
  // Writes `frame` to in.zcc and takes it with FrameReader, as decompress does.
  void take_frame(const Bytes& frame, InputFile* in, InputBytes* f) {
    ASSERT_FALSE(frame.empty());
    write("in.zcc", frame);
    open(in, "in.zcc");
    FrameReader reader(in);
    zipccl::codec::FrameInfo info{};
    std::string why;
    ASSERT_TRUE(reader.next(f, &info, &why)) << why;
    ASSERT_EQ(info.frame_size, frame.size());
    ASSERT_TRUE(f->mapped());
  }
  void truncate_to(const std::string& name, off_t n) { ASSERT_EQ(::truncate(path(name).c_str(), n), 0); }
};

// Reads every byte the way a coder would; the sum keeps the reads from being optimised away.
uint64_t touch_all(const InputBytes& b) {
  uint64_t sum = 0;
  for (size_t i = 0; i < b.size(); ++i) sum += static_cast<volatile const uint8_t*>(b.data())[i];
  return sum;
}

TEST_F(StreamIo, RegularFilesAreMappedAndTakenInOrder) {
  const Bytes data = random_bytes(3 * kMiB + 123, 1);
  write("in.bin", data);
  InputFile in;
  open(&in, "in.bin");
  EXPECT_TRUE(in.mapping());
  InputBytes a, b;
  std::string why;
  ASSERT_TRUE(in.take(24, &a, &why)) << why;
  ASSERT_TRUE(in.extend(kMiB, &a, &why)) << why;  // from the same start, as FrameReader extends a frame
  ASSERT_TRUE(a.mapped());
  ASSERT_EQ(a.size(), kMiB);
  EXPECT_TRUE(std::equal(a.data(), a.data() + kMiB, data.begin()));
  ASSERT_TRUE(in.take(2 * kMiB, &b, &why)) << why;  // not page-aligned: the window starts mid-page
  ASSERT_EQ(b.size(), 2 * kMiB);
  EXPECT_TRUE(std::equal(b.data(), b.data() + b.size(), data.begin() + kMiB));
  ASSERT_TRUE(in.take(kMiB, &a, &why)) << why;  // the rest, short: the end of the input
  ASSERT_EQ(a.size(), 123u);
  EXPECT_TRUE(std::equal(a.data(), a.data() + 123, data.end() - 123));
  ASSERT_TRUE(in.take(kMiB, &a, &why)) << why;
  EXPECT_EQ(a.size(), 0u);
  EXPECT_FALSE(a.lost() || b.lost());
}

TEST_F(StreamIo, PipesAreRead) {
  const Bytes data = random_bytes(kMiB + 7, 2);
  write("in.bin", data);
  const int saved = ::dup(STDIN_FILENO);
  FILE* p = ::popen(("cat '" + path("in.bin") + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(::dup2(::fileno(p), STDIN_FILENO), STDIN_FILENO);
  {
    InputFile in;
    std::string why;
    ASSERT_TRUE(in.open("-", &why)) << why;
    EXPECT_FALSE(in.mapping());
    InputBytes a;
    ASSERT_TRUE(in.take(100, &a, &why)) << why;
    ASSERT_TRUE(in.extend(2 * kMiB, &a, &why)) << why;
    EXPECT_FALSE(a.mapped());
    ASSERT_EQ(a.size(), data.size());
    EXPECT_TRUE(std::equal(a.data(), a.data() + a.size(), data.begin()));
  }
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  ::pclose(p);
}

// The file loses its end after the bytes were taken (populated): the reads that follow find zeros.
TEST_F(StreamIo, AFileThatShrinksAfterTakingLosesBytesWithoutASignal) {
  write("in.bin", random_bytes(3 * kMiB, 3));
  InputFile in;
  open(&in, "in.bin");
  InputBytes a;
  std::string why;
  ASSERT_TRUE(in.take(3 * kMiB, &a, &why)) << why;
  ASSERT_TRUE(a.mapped());
  EXPECT_FALSE(a.lost());
  truncate_to("in.bin", 5000);
  touch_all(a);
  EXPECT_TRUE(a.lost());
  for (size_t i : {size_t{8192}, kMiB, 3 * kMiB - 1}) EXPECT_EQ(a.data()[i], 0) << i;

  // The encoder over such bytes finishes; the caller sees lost() and discards its frame.
  InputBytes b;
  write("in2.bin", random_bytes(2 * kMiB, 4));
  InputFile in2;
  open(&in2, "in2.bin");
  ASSERT_TRUE(in2.take(2 * kMiB, &b, &why)) << why;
  truncate_to("in2.bin", 0);
  EXPECT_FALSE(encode_bf16(b.data(), b.size()).empty());
  EXPECT_TRUE(b.lost());
  a.release();
  EXPECT_FALSE(a.lost());
}

// The file shrank before the bytes were taken: the populate finds the hole (or the size does).
TEST_F(StreamIo, AFileThatShrankBeforeTakingIsShortOrLost) {
  write("in.bin", random_bytes(2 * kMiB, 5));
  InputFile in;
  open(&in, "in.bin");
  truncate_to("in.bin", kMiB);
  InputBytes a;
  std::string why;
  ASSERT_TRUE(in.take(2 * kMiB, &a, &why)) << why;
  EXPECT_TRUE(a.lost() || a.size() == kMiB) << a.size();
  touch_all(a);
}

// decompress's path: FrameReader takes a mapped frame, the file is cut, decode() runs on the frame.
TEST_F(StreamIo, AFrameCutBeforeDecodingIsLostNotACrash) {
  const Bytes raw = random_bytes(4 * kMiB, 6);
  const Bytes frame = encode_bf16(raw.data(), raw.size());
  InputFile in;
  InputBytes f;
  ASSERT_NO_FATAL_FAILURE(take_frame(frame, &in, &f));
  truncate_to("in.zcc", 100);
  Bytes back(raw.size());
  size_t got = 0;
  const auto st = zipccl::codec::decode(f.data(), f.size(), back.data(), back.size(), &got);
  EXPECT_TRUE(f.lost());
  EXPECT_TRUE(st != zipccl::codec::Status::kOk || back != raw);
}

// The header and block index of a mapped frame stay as they were read when the file is rewritten
// (decode() validates them and reads them again); the payload is the file's.
TEST_F(StreamIo, AFramesHeaderIsPrivateToTheReader) {
  const Bytes raw = random_bytes(kMiB, 7);
  const Bytes frame = encode_bf16(raw.data(), raw.size());
  const size_t n = frame.size();
  ASSERT_GT(n, size_t{3 * 4096});
  InputFile in;
  InputBytes f;
  ASSERT_NO_FATAL_FAILURE(take_frame(frame, &in, &f));
  const int fd = ::open(path("in.zcc").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const Bytes junk(16, 0xEE);
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), 16), 16);        // the block count
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), n - 3000), 16);  // payload, pages later
  ::close(fd);
  EXPECT_TRUE(std::equal(f.data() + 16, f.data() + 32, frame.begin() + 16));
  EXPECT_TRUE(std::equal(f.data() + n - 3000, f.data() + n - 2984, junk.begin()));
}

// Only the windows of InputBytes are the handler's: a SIGBUS elsewhere still ends the process.
TEST_F(StreamIo, OtherSigbusesStillEndTheProcess) {
  write("in.bin", random_bytes(64 * 1024, 8));
  write("other.bin", random_bytes(64 * 1024, 9));
  EXPECT_EXIT(
      {
        InputFile in;
        std::string why;
        if (!in.open(path("in.bin"), &why)) _exit(3);
        InputBytes a;
        if (!in.take(4096, &a, &why)) _exit(4);  // installs the handler
        const int fd = ::open(path("other.bin").c_str(), O_RDONLY);
        auto* p = static_cast<volatile uint8_t*>(::mmap(nullptr, 65536, PROT_READ, MAP_SHARED, fd, 0));
        if (::ftruncate(::open(path("other.bin").c_str(), O_WRONLY), 0) != 0) _exit(5);
        _exit(p[40000] + 10);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
