// File ends of `zipccl compress` and `decompress`: large reads and writes through buffers that are
// allocated once and reused, so a file of any size costs a bounded, already-faulted working set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zipccl {
namespace tools {

// A grow-only byte buffer on 2 MiB boundaries with transparent huge pages requested: an 8 MiB
// buffer then faults 4 times instead of 2048, and is faulted only once per run since it is reused.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Makes capacity() >= n, keeping the first `keep` bytes. False when memory is short.
  bool reserve(size_t n, size_t keep = 0);
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  uint8_t* p_ = nullptr;
  size_t cap_ = 0;
};

// The input: a named file or stdin ("-"). Read with read(2), not pread: stdin may be a regular file
// whose offset a caller has already moved (`(head -c 100; zipccl compress -) < f`).
class InputFile {
 public:
  ~InputFile();
  // False with *why (strerror) when the file cannot be opened.
  bool open(const std::string& name, std::string* why);
  // Reads until `n` bytes or the end of the input, whatever the pipe delivers per call; *got < n
  // only at the end. False with *why on a read error, or once `stop_fd` is readable.
  bool read_full(uint8_t* p, size_t n, size_t* got, std::string* why);
  // A pipe or terminal can block a read for as long as its writer likes: read_full then also waits
  // on `fd` and gives up when it becomes readable (Pipeline::failure_fd). Regular files never block.
  void stop_when_readable(int fd) { stop_fd_ = fd; }
  int fd() const { return fd_; }
  bool is_stdin() const { return is_stdin_; }
  const std::string& display_name() const { return display_; }

 private:
  bool wait_readable(std::string* why);
  int fd_ = -1;
  int stop_fd_ = -1;
  bool is_stdin_ = false;
  bool regular_ = false;
  std::string display_;
};

// The output: a named file or stdout ("-"). A named file that was created here and not committed
// is removed when the object goes, so no half-written file is mistaken for a result.
class OutputFile {
 public:
  ~OutputFile();
  // Opens `name` for writing; `input` is the already open input (never overwritten). An existing
  // file is refused unless `force`. False with *why.
  bool open(const std::string& name, const InputFile& input, bool force, std::string* why);
  bool write_all(const uint8_t* p, size_t n, std::string* why);
  // Closes a named file (reporting a failed close) and keeps it.
  bool commit(std::string* why);
  bool is_stdout() const { return is_stdout_; }
  const std::string& display_name() const { return display_; }

 private:
  int fd_ = -1;
  bool is_stdout_ = false;
  bool committed_ = false;
  std::string name_, display_;
};

}  // namespace tools
}  // namespace zipccl
