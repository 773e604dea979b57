// Streams of zipccl frames (gpu_codec/FORMAT.md section 8): reading them frame by frame, and the
// three-stage pipeline that `zipccl compress` and `decompress` run over them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "stream_io.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

// Input bytes per frame that `zipccl compress` writes by default. Large enough that per-frame costs
// (a header, a pipeline hand-off) vanish and the codec runs at its whole-buffer speed; small enough
// that the pipeline's three slots take about 45 MiB and fill and drain quickly. Measured against 4,
// 16 and 32 MiB in docs/benchmarks-journal.md ("The tool streams").
constexpr size_t kDefaultFrameInput = size_t{8} << 20;

// True when the first bytes of `p` are a frame's magic number: a stream, not raw data.
bool starts_with_frame(const uint8_t* p, size_t n);

// Reads a stream one frame at a time, taking exactly the frame's bytes (no read-ahead to carry
// over), so that any sequence of valid frames of any sizes is accepted.
class FrameReader {
 public:
  explicit FrameReader(InputFile* in) : in_(in) {}
  // Makes *frame hold the next frame and fills *info. At the clean end of the stream returns true
  // with info->frame_size == 0. False with *why on a read error, a malformed header or a truncated
  // frame; *why then names the frame and its offset. An empty input is not a stream.
  bool next(InputBytes* frame, codec::FrameInfo* info, std::string* why);
  uint64_t frames() const { return frames_; }       // frames read so far
  uint64_t offset() const { return offset_; }       // offset of the frame last read (or of the end)
  uint64_t bytes_read() const { return consumed_; }  // bytes of the whole frames read so far

 private:
  bool fail(const std::string& what, std::string* why) const;
  InputFile* in_;
  uint64_t frames_ = 0, offset_ = 0, consumed_ = 0;
};

// One unit of work in the pipeline: input bytes, and the bytes coded from them.
struct Slot {
  InputBytes in;
  AlignedBuffer* buffer = nullptr;  // what the coder writes into: one of the pipeline's two (Pipeline::run)
  size_t in_len = 0;
  const uint8_t* result = nullptr;  // the coded bytes: in `buffer`, or in `gpu_frame`
  size_t result_len = 0;
  std::vector<uint8_t> gpu_frame;
  uint64_t index = 0;   // the frame's position in the stream
  uint64_t offset = 0;  // decompress: the frame's byte offset in the input
  size_t expected = 0;  // decompress: the bytes the frame header says it holds
  bool last = false;    // nothing follows this slot
  bool empty = false;   // carries nothing (the end of the input met at a frame boundary)
};

// Reads slot k on one thread while the caller codes slot k-1 and another thread writes slot k-2.
// Each stage handles the slots in order; the first stage to fail stops the others. Only the coder and
// the writer use an output buffer, so there are two, taken in turn (the coder starts slot k once
// slot k-2 is written): a third would only add to the memory and to what the caches hold.
class Pipeline {
 public:
  Pipeline();
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  using Stage = std::function<bool(Slot& slot, std::string* why)>;
  // Becomes readable when a stage fails, for a reader blocked on a pipe to stop waiting
  // (InputFile::stop_when_readable); -1 where no pipe could be made.
  int failure_fd() const { return wake_[0]; }
  // Runs until the slot the reader marked `last` has been written. False with the first failure.
  bool run(const Stage& read, const Stage& code, const Stage& write, std::string* why);

 private:
  enum State { kFree, kFilled, kCoded };
  static constexpr int kSlots = 3;
  Slot* wait(uint64_t k, State s);
  void set(uint64_t k, State s);
  void fail(const std::string& why);
  void loop(State from, State to, const Stage& stage);

  std::mutex m_;
  std::condition_variable cv_;
  Slot slots_[kSlots];
  State state_[kSlots] = {kFree, kFree, kFree};
  AlignedBuffer buffers_[2];  // the coder's outputs, taken in turn
  uint64_t written_ = 0;      // slots the writer has finished
  bool failed_ = false;
  std::string why_;
  int wake_[2] = {-1, -1};
};

}  // namespace tools
}  // namespace zipccl
