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

// Bytes of the input that one pipeline slot holds: a mapping of a range of a regular file, coded
// straight from the page cache, or a copy read into a reused buffer (pipes, stdin, or where the file
// cannot be mapped). A mapping is private and populated by the thread that takes it, so the coder
// finds its pages present; it is unmapped when the bytes are replaced, so memory stays bounded.
class InputBytes {
 public:
  InputBytes() = default;
  ~InputBytes() { release(); }
  InputBytes(const InputBytes&) = delete;
  InputBytes& operator=(const InputBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  // True when the file shrank under the mapping, so that some of these bytes no longer exist: they
  // read as zeros instead of raising SIGBUS, and whatever was made of them must be discarded.
  bool lost() const;  // what a stage then reports: kShrank
  // Gives the pages holding bytes [0, n) a private copy: a write to the file can no longer change
  // them. For a frame's header and block index, which decode() validates and then reads again.
  void make_private(size_t n);
  // Unmaps a mapping; a read copy's buffer is kept for reuse.
  void release();

 private:
  friend class InputFile;
  AlignedBuffer copy_;
  uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
  int guard_ = -1;  // this mapping's entry in the SIGBUS handler's table
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint64_t start_ = 0;  // the input offset of data()[0]
};

// The message of input bytes that were lost (InputBytes::lost) while a stage used them.
extern const char* const kShrank;

// The input: a named file or stdin ("-"). A named regular file is mapped (InputBytes), so that no
// thread copies it out of the page cache (docs/benchmarks-journal.md section 8); stdin is read with
// read(2), not pread, since it may be a regular file whose offset a caller has already moved
// (`(head -c 100; zipccl compress -) < f`).
class InputFile {
 public:
  ~InputFile();
  // False with *why (strerror) when the file cannot be opened.
  bool open(const std::string& name, std::string* why);
  // Makes *b hold the input's next n bytes (fewer only at its end), replacing what it held. False
  // with *why on a read error, or once `stop_fd` is readable.
  bool take(size_t n, InputBytes* b, std::string* why);
  // Makes *b, the bytes last taken, hold n bytes from the same start (fewer only at the end).
  bool extend(size_t n, InputBytes* b, std::string* why);
  // A pipe or terminal can block a read for as long as its writer likes: reads then also wait on
  // `fd` and give up when it becomes readable (Pipeline::failure_fd). Regular files never block.
  void stop_when_readable(int fd) { stop_fd_ = fd; }
  int fd() const { return fd_; }
  bool is_stdin() const { return is_stdin_; }
  bool mapping() const { return map_; }  // whether take() maps (until a mapping fails)
  const std::string& display_name() const { return display_; }

 private:
  bool wait_readable(std::string* why);
  // Reads until `n` bytes or the end of the input, whatever the pipe delivers per call; *got < n
  // only at the end.
  bool read_full(uint8_t* p, size_t n, size_t* got, std::string* why);
  bool read_into(InputBytes* b, size_t keep, size_t n, std::string* why);
  bool map_range(uint64_t start, size_t n, InputBytes* b);
  bool stop_mapping(uint64_t at, std::string* why);
  int fd_ = -1;
  int stop_fd_ = -1;
  bool is_stdin_ = false;
  bool regular_ = false;
  bool map_ = false;
  uint64_t pos_ = 0;   // mapping: the offset of the next byte to take
  uint64_t size_ = 0;  // mapping: the file's size when last looked at
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
