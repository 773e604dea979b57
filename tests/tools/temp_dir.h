// One fixture for the tools tests that work in files: a fresh directory per test, removed after it,
// with helpers to write and read files in it and to run a shell command there.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace zipccl_test {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zipccl_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    EXPECT_FALSE(ec) << "removing " << dir_ << ": " << ec.message();
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  bool exists(const std::string& name) const {
    struct stat st;
    return ::stat(path(name).c_str(), &st) == 0;
  }

  // Writes `b` to `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::vector<uint8_t>& b) const {
    const std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    EXPECT_TRUE(f.good()) << p;
    return p;
  }
  std::string write_text(const std::string& name, const std::string& text) const {
    return write(name, std::vector<uint8_t>(text.begin(), text.end()));
  }
  std::vector<uint8_t> read(const std::string& name) const {
    std::ifstream f(path(name), std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::string read_text(const std::string& name) const {
    const std::vector<uint8_t> b = read(name);
    return std::string(b.begin(), b.end());
  }

  // Runs the shell command `cmd` with the directory as working directory; returns its exit status
  // (-1 when it did not exit normally).
  int run_here(const std::string& cmd) const {
    const int st = std::system(("cd '" + dir_ + "' && " + cmd).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  // run_here, with the command's stderr kept in stderr_ (for the tests of the tool's messages).
  int run_keeping_stderr(const std::string& cmd) {
    const int st = run_here(cmd + " 2> stderr.txt");
    stderr_ = read_text("stderr.txt");
    return st;
  }

  std::string dir_;
  std::string stderr_;
};

}  // namespace zipccl_test
