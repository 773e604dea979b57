#include "stream_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace zipccl {
namespace tools {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

bool AlignedBuffer::reserve(size_t n, size_t keep) {
  if (n <= cap_ && p_) return true;
  const size_t cap = (std::max<size_t>(n, 1) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, cap) != 0) return false;
#ifdef MADV_HUGEPAGE
  ::madvise(p, cap, MADV_HUGEPAGE);  // a hint: where THP is off the buffer works with small pages
#endif
  if (keep) std::memcpy(p, p_, std::min(keep, cap_));
  std::free(p_);
  p_ = static_cast<uint8_t*>(p);
  cap_ = cap;
  return true;
}

InputFile::~InputFile() {
  if (fd_ >= 0 && !is_stdin_) ::close(fd_);
}

bool InputFile::open(const std::string& name, std::string* why) {
  is_stdin_ = name == "-";
  display_ = is_stdin_ ? "<stdin>" : name;
  fd_ = is_stdin_ ? STDIN_FILENO : ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    *why = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
    *why = "is a directory";
    return false;
  }
  regular_ = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  if (regular_) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  return true;
}

bool InputFile::wait_readable(std::string* why) {
  if (regular_ || stop_fd_ < 0) return true;
  pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (::poll(p, 2, -1) < 0) {
    if (errno != EINTR) return true;  // let read() wait, and report, instead
  }
  if (!p[1].revents) return true;
  *why = "stopped";
  return false;
}

bool InputFile::read_full(uint8_t* p, size_t n, size_t* got, std::string* why) {
  size_t have = 0;
  while (have < n) {
    if (!wait_readable(why)) {
      *got = have;
      return false;
    }
    const ssize_t r = ::read(fd_, p + have, n - have);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *why = std::string("read error: ") + std::strerror(errno);
      *got = have;
      return false;
    }
    if (r == 0) break;
    have += static_cast<size_t>(r);
  }
  *got = have;
  return true;
}

OutputFile::~OutputFile() {
  if (fd_ < 0 || is_stdout_) return;
  ::close(fd_);
  if (!committed_) ::unlink(name_.c_str());
}

bool OutputFile::open(const std::string& name, const InputFile& input, bool force, std::string* why) {
  is_stdout_ = name == "-";
  display_ = is_stdout_ ? "<stdout>" : name;
  if (is_stdout_) {
    fd_ = STDOUT_FILENO;
    return true;
  }
  struct stat si, so;
  bool special = false;  // /dev/null, a FIFO: written into, never created, truncated or removed
  if (::stat(name.c_str(), &so) == 0) {
    if (::fstat(input.fd(), &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
      *why = "is the input file; refusing to overwrite it";
      return false;
    }
    special = !S_ISREG(so.st_mode);
    if (!special && !force) {
      *why = "already exists; use -f to overwrite it";
      return false;
    }
  }
  const int flags = O_WRONLY | O_CLOEXEC | (special ? 0 : O_CREAT | O_TRUNC | (force ? 0 : O_EXCL));
  const int fd = ::open(name.c_str(), flags, 0666);
  if (fd < 0) {
    *why = errno == EEXIST ? "already exists; use -f to overwrite it" : std::strerror(errno);
    return false;
  }
  fd_ = fd;
  name_ = name;
  committed_ = special;  // nothing of ours to remove on failure
  return true;
}

bool OutputFile::write_all(const uint8_t* p, size_t n, std::string* why) {
  while (n) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *why = std::string("write error: ") + (w < 0 ? std::strerror(errno) : "no progress");
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool OutputFile::commit(std::string* why) {
  if (is_stdout_ || committed_) {
    committed_ = true;
    return true;
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    *why = std::string("close failed: ") + std::strerror(errno);
    ::unlink(name_.c_str());
    return false;
  }
  committed_ = true;
  return true;
}

}  // namespace tools
}  // namespace zipccl
