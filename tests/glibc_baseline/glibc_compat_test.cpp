// plugin/src/glibc_compat.c against the glibc it stands in for. This test program is linked as
// usual, against this machine's glibc, and the compat file is compiled into it with its functions
// renamed (zipccl_compat_*, see CMakeLists.txt), so that both answer the same questions here.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <string>

extern "C" {
int zipccl_compat_dl_find_object(void* address, struct dl_find_object* result);
uint32_t zipccl_compat_arc4random(void);
int zipccl_compat_stat(const char* path, struct stat* buf);
int zipccl_compat_fstat(int fd, struct stat* buf);
int zipccl_compat_lstat(const char* path, struct stat* buf);
int zipccl_compat_fstatat(int dirfd, const char* path, struct stat* buf, int flags);
int zipccl_compat_stat64(const char* path, struct stat64* buf);
int zipccl_compat_fstat64(int fd, struct stat64* buf);
int zipccl_compat_lstat64(const char* path, struct stat64* buf);
extern char zipccl_compat_single_threaded;
}

namespace {

int a_global = 1;

#if __GLIBC_PREREQ(2, 35)
void expect_same_object(void* address, const char* what) {
  struct dl_find_object want = {};
  struct dl_find_object got = {};
  const int want_rc = _dl_find_object(address, &want);
  const int got_rc = zipccl_compat_dl_find_object(address, &got);
  ASSERT_EQ(got_rc, want_rc) << what;
  if (want_rc != 0) return;
  EXPECT_EQ(got.dlfo_flags, want.dlfo_flags) << what;
  EXPECT_EQ(got.dlfo_map_start, want.dlfo_map_start) << what;
  EXPECT_EQ(got.dlfo_map_end, want.dlfo_map_end) << what;
  EXPECT_EQ(got.dlfo_link_map, want.dlfo_link_map) << what;
  EXPECT_EQ(got.dlfo_eh_frame, want.dlfo_eh_frame) << what;
  EXPECT_NE(got.dlfo_eh_frame, nullptr) << what << ": no unwind table, so no exception passes it";
}
#endif

TEST(GlibcCompat, DlFindObjectAgreesWithGlibc) {
#if __GLIBC_PREREQ(2, 35)
  expect_same_object(reinterpret_cast<void*>(&expect_same_object), "a function of this program");
  expect_same_object(&a_global, "a variable of this program");
  expect_same_object(dlsym(RTLD_DEFAULT, "printf"), "printf in libc");
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  ASSERT_NE(libm, nullptr) << dlerror();
  expect_same_object(dlsym(libm, "cos"), "cos in a dlopened libm");
  expect_same_object(reinterpret_cast<void*>(static_cast<uintptr_t>(1)), "address 1");
  void* anon = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(anon, MAP_FAILED);
  expect_same_object(anon, "an anonymous mapping");
  munmap(anon, 4096);
#else
  GTEST_SKIP() << "this glibc has no _dl_find_object to compare with (2.35+)";
#endif
}

TEST(GlibcCompat, DlFindObjectFindsThisProgramsUnwindTable) {
  struct dl_find_object got = {};
  ASSERT_EQ(zipccl_compat_dl_find_object(reinterpret_cast<void*>(&a_global), &got), 0);
  EXPECT_NE(got.dlfo_eh_frame, nullptr);
  EXPECT_NE(got.dlfo_link_map, nullptr);
  EXPECT_LE(got.dlfo_map_start, static_cast<void*>(&a_global));
  EXPECT_GT(got.dlfo_map_end, static_cast<void*>(&a_global));
}

TEST(GlibcCompat, SingleThreadedSaysMaybeThreaded) { EXPECT_EQ(zipccl_compat_single_threaded, 0); }

TEST(GlibcCompat, Arc4randomVariesAndKeepsErrno) {
  std::set<uint32_t> seen;
  errno = 12345;
  for (int i = 0; i < 64; ++i) seen.insert(zipccl_compat_arc4random());
  EXPECT_EQ(errno, 12345);
  EXPECT_GE(seen.size(), 60u);  // 64 draws of 32 bits: a repeat is a 1-in-2^21 event
}

template <typename St>
void expect_same_file(const struct stat& want, const St& got, const char* what) {
  EXPECT_EQ(got.st_dev, want.st_dev) << what;
  EXPECT_EQ(got.st_ino, want.st_ino) << what;
  EXPECT_EQ(got.st_mode, want.st_mode) << what;
  EXPECT_EQ(got.st_size, want.st_size) << what;
  EXPECT_EQ(got.st_mtim.tv_sec, want.st_mtim.tv_sec) << what;
}

TEST(GlibcCompat, StatFamilyAgreesWithGlibc) {
  // A file of our own and a symlink to it (lstat and stat differ): not /proc/self/exe, which
  // qemu-user (tools/arm64_check.sh) emulates per system call - on one descriptor of it, fstat
  // names the program and fstatat(fd, "", AT_EMPTY_PATH) (glibc 2.33+'s fstat) the emulator.
  char dir[] = "/tmp/zipccl-glibc-compat.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string target = std::string(dir) + "/file";
  const std::string link = std::string(dir) + "/link";
  {
    int tfd = open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(tfd, 0);
    ASSERT_EQ(write(tfd, "zipccl", 6), 6);
    close(tfd);
  }
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const char* path = link.c_str();
  struct stat want = {}, want_l = {};
  ASSERT_EQ(stat(path, &want), 0);
  ASSERT_EQ(lstat(path, &want_l), 0);
  struct stat got = {};
  struct stat64 got64 = {};
  ASSERT_EQ(zipccl_compat_stat(path, &got), 0);
  expect_same_file(want, got, "stat");
  ASSERT_EQ(zipccl_compat_stat64(path, &got64), 0);
  expect_same_file(want, got64, "stat64");
  ASSERT_EQ(zipccl_compat_lstat(path, &got), 0);
  expect_same_file(want_l, got, "lstat");
  ASSERT_EQ(zipccl_compat_lstat64(path, &got64), 0);
  expect_same_file(want_l, got64, "lstat64");
  ASSERT_EQ(zipccl_compat_fstatat(AT_FDCWD, path, &got, AT_SYMLINK_NOFOLLOW), 0);
  expect_same_file(want_l, got, "fstatat");

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(zipccl_compat_fstat(fd, &got), 0);
  expect_same_file(want, got, "fstat");
  ASSERT_EQ(zipccl_compat_fstat64(fd, &got64), 0);
  expect_same_file(want, got64, "fstat64");
  close(fd);

  unlink(link.c_str());
  unlink(target.c_str());
  rmdir(dir);

  errno = 0;
  EXPECT_EQ(zipccl_compat_stat("/nonexistent/zipccl", &got), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(zipccl_compat_fstat(-1, &got), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
