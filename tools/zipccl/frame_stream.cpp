#include "frame_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <thread>

namespace zipccl {
namespace tools {
namespace {

// FORMAT.md section 2: the 24-byte header starts with the magic; a coded frame's block count is at
// byte 16, and its block index (4 bytes per block), tail (< 4 bytes) and padding follow the header.
constexpr size_t kHeaderBytes = 24;
constexpr uint8_t kMagic[4] = {'Z', 'C', 'C', '1'};

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// A coded frame's header and block index, from the block count in the header at `p`.
size_t header_and_index_bytes(const uint8_t* p) {
  return kHeaderBytes + 4 * size_t{load_le32(p + 16)} + 4;
}

}  // namespace

bool starts_with_frame(const uint8_t* p, size_t n) {
  return n >= sizeof kMagic && p[0] == kMagic[0] && p[1] == kMagic[1] && p[2] == kMagic[2] && p[3] == kMagic[3];
}

bool FrameReader::fail(const std::string& what, std::string* why) const {
  *why = "frame " + std::to_string(frames_) + " at byte " + std::to_string(offset_) + ": " + what;
  return false;
}

bool FrameReader::next(InputBytes* frame, codec::FrameInfo* info, std::string* why) {
  offset_ = consumed_;
  info->frame_size = 0;
  std::string io_error;
  if (!in_->take(kHeaderBytes, frame, &io_error)) return fail(io_error, why);
  if (frame->size() == 0) {
    if (frames_ > 0) return true;
    *why = "empty input is not a zipccl stream";
    return false;
  }
  codec::Status st = codec::read_frame_info(frame->data(), frame->size(), info);
  if (st == codec::Status::kTruncated && frame->size() == kHeaderBytes) {
    // A coded frame: read_frame_info needs the block index too. The frame is at least that long,
    // so reading it never takes bytes of the next frame.
    if (!in_->extend(header_and_index_bytes(frame->data()), frame, &io_error)) return fail(io_error, why);
    st = codec::read_frame_info(frame->data(), frame->size(), info);
  }
  if (frame->lost()) return fail(kShrank, why);
  if (st == codec::Status::kTruncated) return fail("the input ends inside the frame (truncated)", why);
  if (st != codec::Status::kOk) return fail(codec::status_string(st), why);
  if (info->frame_size < frame->size())
    return fail("corrupt block index: the frame would end inside its own header", why);
  const size_t frame_size = static_cast<size_t>(info->frame_size);
  if (!in_->extend(frame_size, frame, &io_error)) return fail(io_error, why);
  // decode() validates the header and block index and then reads them again: in a mapping they must
  // not change in between, whatever writes to the file meanwhile. The header first, so that the block
  // count that sizes the index is the one decode() will see.
  if (frame->size() == frame_size) {
    frame->make_private(kHeaderBytes);
    frame->make_private(header_and_index_bytes(frame->data()));
  }
  if (frame->lost()) return fail(kShrank, why);
  if (frame->size() < frame_size) return fail("the input ends inside the frame (truncated)", why);
  consumed_ += frame_size;
  ++frames_;
  return true;
}

Pipeline::Pipeline() {
  if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
}

Pipeline::~Pipeline() {
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

Slot* Pipeline::wait(uint64_t k, State s) {
  std::unique_lock<std::mutex> lock(m_);
  // The coder's slot k takes the output buffer of slot k-2.
  cv_.wait(lock, [&] { return failed_ || (state_[k % kSlots] == s && (s != kFilled || written_ + 2 > k)); });
  if (failed_) return nullptr;
  slots_[k % kSlots].buffer = &buffers_[k % 2];
  return &slots_[k % kSlots];
}

void Pipeline::set(uint64_t k, State s) {
  {
    std::lock_guard<std::mutex> lock(m_);
    state_[k % kSlots] = s;
    if (s == kFree) ++written_;
  }
  cv_.notify_all();
}

void Pipeline::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (failed_) return;
    why_ = why;
    failed_ = true;
  }
  cv_.notify_all();
  if (wake_[1] >= 0) {
    const char byte = 1;
    (void)!::write(wake_[1], &byte, 1);
  }
}

void Pipeline::loop(State from, State to, const Stage& stage) {
  for (uint64_t k = 0;; ++k) {
    Slot* s = wait(k, from);
    if (!s) return;
    if (from == kFree) {
      s->index = k;
      s->last = s->empty = false;
    }
    std::string why;
    if (!stage(*s, &why)) {
      fail(why);
      return;
    }
    const bool last = s->last;  // read before the slot is handed on
    set(k, to);
    if (last) return;
  }
}

bool Pipeline::run(const Stage& read, const Stage& code, const Stage& write, std::string* why) {
  std::thread reader([&] { loop(kFree, kFilled, read); });
  std::thread writer([&] { loop(kCoded, kFree, write); });
  loop(kFilled, kCoded, code);
  reader.join();
  writer.join();
  if (failed_) *why = why_;
  return !failed_;
}

}  // namespace tools
}  // namespace zipccl
