#include "stream_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace zipccl {
namespace tools {

const char* const kShrank = "the file shrank while it was read (truncated)";

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Linux 5.14's madvise that faults a range in, returning EFAULT where an access would raise SIGBUS;
// older headers lack the name, older kernels the advice (EINVAL).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

// A mapped file that shrinks raises SIGBUS on access to its pages past the new end, on whichever
// thread touches them (the coder, or a codec thread). The handler maps zeros over the rest of that
// window and marks it lost, so the access completes and the stage that took the bytes reports the
// input as truncated; a SIGBUS anywhere else takes the default action. Each live window has an entry
// here; its owner is the only one touching it, so an entry never changes while its window faults.
struct Guard {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> lost{false};
};
constexpr int kGuards = 16;  // three pipeline slots, an inspect frame: room to spare
Guard g_guards[kGuards];
std::atomic<bool> g_claimed[kGuards];
uintptr_t g_page = 4096;

void on_sigbus(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  // BUS_ADRERR: a page past the end of the file; memory errors and the like are not ours to mend.
  for (Guard& g : g_guards) {
    if (info->si_code != BUS_ADRERR) break;
    const uintptr_t begin = g.begin.load(std::memory_order_acquire),
                    end = g.end.load(std::memory_order_acquire);
    if (!begin || at < begin || at >= end) continue;
    const uintptr_t page = at & ~(g_page - 1);
    // mmap is a plain system call, safe here in practice although POSIX does not list it.
    if (::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
      break;
    g.lost.store(true, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  ::signal(sig, SIG_DFL);  // the faulting access repeats and now ends the process as it would have
}

// A free entry for [p, p + n), the handler installed on first use; -1 when all are taken.
int claim_guard(const uint8_t* p, size_t n) {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
  for (int i = 0; i < kGuards; ++i) {
    if (g_claimed[i].exchange(true)) continue;
    g_guards[i].lost.store(false);
    g_guards[i].end.store(reinterpret_cast<uintptr_t>(p) + n, std::memory_order_release);
    g_guards[i].begin.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
    return i;
  }
  return -1;
}

void free_guard(int i) {
  g_guards[i].begin.store(0, std::memory_order_release);
  g_guards[i].end.store(0, std::memory_order_release);
  g_claimed[i].store(false);
}

// Faults [p, p + n) in on the calling thread, the reader, so that the coder finds the pages mapped.
// EFAULT (the file is shorter than the mapping) marks the window lost; without the madvise (Linux
// before 5.14) one read per page does the same work, a SIGBUS there going to the handler.
// The fallback runs as fast here (fault-around maps 16 pages a fault; docs/benchmarks-journal.md section 8).
void populate(uint8_t* p, size_t n, int guard) {
  static std::atomic<bool> no_madvise{false};
  if (!no_madvise.load(std::memory_order_relaxed)) {
    if (::madvise(p, n, MADV_POPULATE_READ) == 0) return;
    if (errno == EFAULT) {
      g_guards[guard].lost.store(true, std::memory_order_relaxed);
      return;
    }
    if (errno == EINVAL) no_madvise.store(true, std::memory_order_relaxed);
  }
  for (size_t i = 0; i < n; i += g_page) static_cast<void>(*static_cast<volatile uint8_t*>(p + i));
}

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
  // Files that claim no bytes may still have some (/proc): read those.
  map_ = regular_ && !is_stdin_ && st.st_size > 0;
  size_ = map_ ? static_cast<uint64_t>(st.st_size) : 0;
  return true;
}

bool InputBytes::lost() const {
  return guard_ >= 0 && g_guards[guard_].lost.load(std::memory_order_relaxed);
}

void InputBytes::make_private(size_t n) {
  if (!map_) return;
  // A write fault gives a private page its own copy; writing back the byte just read keeps its value.
  uint8_t* p = const_cast<uint8_t*>(data_);
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(g_page - 1);
  for (uintptr_t a = first; a < reinterpret_cast<uintptr_t>(p + std::min(n, size_)); a += g_page) {
    volatile uint8_t* q = reinterpret_cast<volatile uint8_t*>(std::max(a, reinterpret_cast<uintptr_t>(p)));
    *q = *q;
  }
}

void InputBytes::release() {
  if (map_) {
    free_guard(guard_);
    ::munmap(map_, map_len_);
  }
  map_ = nullptr;
  map_len_ = 0;
  guard_ = -1;
  data_ = copy_.data();
  size_ = 0;
}

bool InputFile::map_range(uint64_t start, size_t n, InputBytes* b) {
  b->release();
  b->start_ = start;
  uint64_t end = start + n;
  struct stat st;
  if (end > size_ && ::fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);  // it may have grown
  end = std::min(end, size_);
  if (end <= start) return true;  // the end of the input: no bytes
  const uint64_t at = start & ~uint64_t{g_page - 1};
  const size_t len = static_cast<size_t>(end - at);
  // Private and writable: make_private() can copy a page on write; nothing else writes.
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, static_cast<off_t>(at));
  if (p == MAP_FAILED) return false;
  b->guard_ = claim_guard(static_cast<uint8_t*>(p), len);
  if (b->guard_ < 0) {
    ::munmap(p, len);
    return false;
  }
  b->map_ = static_cast<uint8_t*>(p);
  b->map_len_ = len;
  b->data_ = b->map_ + (start - at);
  b->size_ = static_cast<size_t>(end - start);
  populate(b->map_, len, b->guard_);
  return true;
}

// A file that cannot be mapped (some file systems, or no room for a guard) is read from `at` on.
bool InputFile::stop_mapping(uint64_t at, std::string* why) {
  map_ = false;
  if (::lseek(fd_, static_cast<off_t>(at), SEEK_SET) >= 0) return true;
  *why = std::string("cannot map or seek: ") + std::strerror(errno);
  return false;
}

bool InputFile::read_into(InputBytes* b, size_t keep, size_t n, std::string* why) {
  if (!b->copy_.reserve(n, keep)) {
    *why = "cannot allocate " + std::to_string(n) + " bytes for the input";
    return false;
  }
  size_t got = 0;
  const bool ok = read_full(b->copy_.data() + keep, n - keep, &got, why);
  b->data_ = b->copy_.data();
  b->size_ = keep + got;
  return ok;
}

bool InputFile::take(size_t n, InputBytes* b, std::string* why) {
  if (map_) {
    if (map_range(pos_, n, b)) {
      pos_ += b->size_;
      return true;
    }
    if (!stop_mapping(pos_, why)) return false;
  }
  b->release();
  return read_into(b, 0, n, why);
}

bool InputFile::extend(size_t n, InputBytes* b, std::string* why) {
  if (n <= b->size_) return true;
  if (map_) {
    const uint64_t start = b->start_;
    if (map_range(start, n, b)) {
      pos_ = start + b->size_;
      return true;
    }
    if (!stop_mapping(start, why)) return false;  // and read all n bytes again
    b->release();
    return read_into(b, 0, n, why);
  }
  return read_into(b, b->size_, n, why);
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
