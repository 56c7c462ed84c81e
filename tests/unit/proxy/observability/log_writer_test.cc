// Tests for the log writer (proxy/observability/log_writer.h): with a pipe nobody reads,
// submit() never blocks and a full queue drops and counts; setTarget() and
// stop() return without waiting for the stuck write; a short write leaves
// whole lines only (truncated back on a file, '\n'-terminated on a pipe).

#include "proxy/observability/log_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/wait.h"

namespace sluice {
namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/** A pipe whose buffer is full and that nobody reads; the write end stays blocking. */
struct FullPipe {
  int read_end = -1;
  int write_end = -1;

  FullPipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    read_end = fds[0];
    write_end = fds[1];
    ::fcntl(write_end, F_SETPIPE_SZ, 4096);
    // Fill it through a second open file description, so O_NONBLOCK stays ours.
    const std::string self = "/proc/self/fd/" + std::to_string(write_end);
    const int filler = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    const std::string junk(4096, '#');
    while (filler >= 0 && ::write(filler, junk.data(), junk.size()) > 0) {
    }
    if (filler >= 0) ::close(filler);
  }
  ~FullPipe() {
    if (read_end >= 0) ::close(read_end);
    if (write_end >= 0) ::close(write_end);
  }
  /** Reads (and so frees) everything in the pipe. */
  std::string drain() const {
    std::string out;
    const int flags = ::fcntl(read_end, F_GETFL);
    ::fcntl(read_end, F_SETFL, flags | O_NONBLOCK);
    char buf[4096];
    for (ssize_t n; (n = ::read(read_end, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    ::fcntl(read_end, F_SETFL, flags);
    return out;
  }
};

class LogWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-log-writer-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/log";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  int openFile() const { return ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0640); }
  LogWriter::DropFn counter() {
    return [this](uint64_t n) { dropped_ += n; };
  }

  std::atomic<uint64_t> dropped_{0};
  std::string dir_;
  std::string path_;
};

TEST_F(LogWriterTest, ABlockedReaderCostsDroppedLinesNeverABlockedCaller) {
  FullPipe pipe;
  ASSERT_GE(pipe.write_end, 0);
  LogWriter writer(1024, counter());
  writer.setTarget(pipe.write_end, false);
  const std::string line = std::string(99, 'x') + "\n";  // 100 bytes
  // The writer takes the first batch and waits for the reader with it; the
  // queue behind it fills to its bound, then lines are dropped and counted.
  size_t accepted = 0;
  for (int i = 0; i < 1000; ++i) accepted += writer.submit(std::string(line), 1) ? 1 : 0;
  EXPECT_LT(accepted, 1000u);
  EXPECT_EQ(dropped_.load(), 1000u - accepted);

  // Switching targets does not wait for the stuck write: the rest goes to the file.
  writer.setTarget(openFile(), true);
  ASSERT_TRUE(
      test::waitUntil([&] { return dropped_.load() + readAll(path_).size() / 100 >= 1000; }));
  writer.stop();
  const std::string text = readAll(path_);
  EXPECT_EQ(text.size() % 100, 0u);
  EXPECT_EQ(dropped_.load() + text.size() / 100, 1000u) << "every line written or counted";
  EXPECT_EQ(pipe.drain().find('x'), std::string::npos) << "nothing reached the full pipe";
}

TEST_F(LogWriterTest, StopGivesUpAtItsDeadlineAndCountsWhatWasLeft) {
  FullPipe pipe;
  ASSERT_GE(pipe.write_end, 0);
  LogWriter writer(1 << 20, counter());
  writer.setTarget(pipe.write_end, false);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.submit("{\"n\":1}\n", 1));
  writer.stop(std::chrono::steady_clock::now());  // a deadline already past: no wait
  EXPECT_EQ(dropped_.load(), 3u);
  EXPECT_FALSE(writer.submit("{}\n", 1)) << "stopped";
  EXPECT_EQ(dropped_.load(), 4u);
}

TEST_F(LogWriterTest, StopWritesEverythingAReaderTakes) {
  LogWriter writer(1 << 20, counter());
  writer.setTarget(openFile(), true);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(writer.submit("{}\n", 1));
  writer.stop(std::chrono::steady_clock::now());  // a file never makes the writer wait
  EXPECT_EQ(readAll(path_), [] {
    std::string s;
    for (int i = 0; i < 100; ++i) s += "{}\n";
    return s;
  }());
  EXPECT_EQ(dropped_.load(), 0u);
}

// A disk that fills up mid-chunk: the first write takes part of the data,
// the next fails with ENOSPC; later writes work again (space was freed).
std::atomic<int> g_disk_calls{0};
ssize_t fullDiskOnce(int fd, const void* data, size_t size) {
  const int call = g_disk_calls++;
  if (call == 0) return ::write(fd, data, size / 2 + 3);  // a few bytes into a line
  if (call == 1) {
    errno = ENOSPC;
    return -1;
  }
  return ::write(fd, data, size);
}

TEST_F(LogWriterTest, AShortWriteToAFileIsCutBackToTheLastWholeLine) {
  g_disk_calls = 0;
  std::atomic<int> errors{0};
  LogWriter writer(1 << 20, counter(), [&](int err) {
    EXPECT_EQ(err, ENOSPC);
    ++errors;
  });
  writer.setWriteFunction(&fullDiskOnce);
  writer.setTarget(openFile(), true);
  ASSERT_TRUE(writer.submit("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n", 4));
  ASSERT_TRUE(test::waitUntil([&] { return dropped_.load() > 0; }));
  ASSERT_TRUE(writer.submit("{\"n\":5}\n", 1));
  writer.stop();
  // 32 bytes: the first write took 19 (two lines and 3 bytes of the third).
  EXPECT_EQ(readAll(path_), "{\"n\":1}\n{\"n\":2}\n{\"n\":5}\n");
  EXPECT_EQ(dropped_.load(), 2u);
  EXPECT_EQ(errors.load(), 1);
}

ssize_t brokenPipeOnce(int fd, const void* data, size_t size) {
  const int call = g_disk_calls++;
  if (call == 0) return ::write(fd, data, 3);
  if (call == 1) {
    errno = EIO;
    return -1;
  }
  return ::write(fd, data, size);
}

TEST_F(LogWriterTest, ATornLineOnAPipeIsTerminatedBeforeTheNextLine) {
  g_disk_calls = 0;
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  {
    LogWriter writer(1 << 20, counter());
    writer.setWriteFunction(&brokenPipeOnce);
    writer.setTarget(fds[1], true);
    ASSERT_TRUE(writer.submit("{\"n\":1}\n", 1));
    ASSERT_TRUE(test::waitUntil([&] { return dropped_.load() > 0; }));
    ASSERT_TRUE(writer.submit("{\"n\":2}\n", 1));
    writer.stop();
  }
  char buf[256];
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ASSERT_GT(n, 0);
  // The fragment stands alone on its line; the next line starts clean.
  EXPECT_EQ(std::string(buf, size_t(n)), "{\"n\n{\"n\":2}\n");
  EXPECT_EQ(dropped_.load(), 1u);
}

}  // namespace
}  // namespace sluice
