// Tests for the access log (proxy/observability/access_log.h, docs/design.md §7): the JSON line of
// one record (every field, in order, right types, nulls), and the writer —
// lines reach the file, reopen() follows a renamed file, a full queue drops
// and counts instead of blocking, and stop() writes what is pending.

#include "proxy/observability/access_log.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/metrics.h"
#include "tests/support/wait.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string render(const AccessRecord& r) {
  std::string out;
  renderAccessRecord(r, out);
  return out;
}

AccessRecord sampleRecord(const std::vector<std::string>& causes) {
  AccessRecord r;
  r.start = SystemTime(milliseconds(1'767'225'600'250));
  r.request_id = "req-1";
  r.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  r.route = "chat";
  r.upstream = "openai";
  r.endpoint = "api.openai.com:443";
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.protocol = "HTTP/1.1";
  r.status = 200;
  r.attempts = 2;
  r.retry_causes = causes;
  r.duration_ms = 1234.5678;
  r.ttfb_ms = 12.0004;
  r.model = "gpt-4o-mini";
  r.input_tokens = 12;
  r.output_tokens = 34;
  r.spend_usd = 0.00042;
  r.leaked_usd = 0.0001;
  r.bytes_in = 100;
  r.bytes_out = 2048;
  return r;
}

TEST(AccessRecordTest, RunFieldsAreTheRunsIdsOrNull) {
  const std::vector<std::string> causes;
  AccessRecord r = sampleRecord(causes);
  EXPECT_TRUE(nlohmann::json::parse(render(r))["run_id"].is_null());
  r.run_id = "run \"7\"";  // escaped like any string
  r.parent_run_id = "parent-1";
  const nlohmann::json j = nlohmann::json::parse(render(r));
  EXPECT_EQ(j["run_id"], "run \"7\"");
  EXPECT_EQ(j["parent_run_id"], "parent-1");
}

TEST(AccessRecordTest, RendersEveryDesignFieldInOrder) {
  const std::vector<std::string> causes{"503"};
  const std::string line = render(sampleRecord(causes));
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const nlohmann::json j = nlohmann::json::parse(line);
  const char* kFields[] = {"ts",
                           "request_id",
                           "trace_id",
                           "route",
                           "upstream",
                           "endpoint",
                           "method",
                           "path",
                           "protocol",
                           "status",
                           "attempts",
                           "retry_causes",
                           "fallbacks",
                           "duration_ms",
                           "ttfb_ms",
                           "cancel_reason",
                           "model",
                           "input_tokens",
                           "output_tokens",
                           "spend_usd",
                           "leaked_usd",
                           "bytes_in",
                           "bytes_out",
                           "run_id",
                           "parent_run_id",
                           "jsonrpc_method",
                           "tool"};
  ASSERT_EQ(j.size(), std::size(kFields)) << line;
  size_t previous = 0;
  for (const char* f : kFields) {
    EXPECT_TRUE(j.contains(f)) << f;
    const size_t at = line.find("\"" + std::string(f) + "\":");
    EXPECT_GE(at, previous) << f << " out of order";
    previous = at;
  }
  EXPECT_EQ(j["ts"], "2026-01-01T00:00:00.250Z");
  EXPECT_EQ(j["request_id"], "req-1");
  EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(j["route"], "chat");
  EXPECT_EQ(j["upstream"], "openai");
  EXPECT_EQ(j["endpoint"], "api.openai.com:443");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/chat/completions");
  EXPECT_EQ(j["protocol"], "HTTP/1.1");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["attempts"], 2);
  EXPECT_EQ(j["retry_causes"], nlohmann::json::parse(R"(["503"])"));
  EXPECT_EQ(j["fallbacks"], 0);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 1234.568);
  EXPECT_DOUBLE_EQ(j["ttfb_ms"].get<double>(), 12.0);
  EXPECT_TRUE(j["cancel_reason"].is_null());
  EXPECT_EQ(j["model"], "gpt-4o-mini");
  EXPECT_EQ(j["input_tokens"], 12);
  EXPECT_EQ(j["output_tokens"], 34);
  EXPECT_DOUBLE_EQ(j["spend_usd"].get<double>(), 0.00042);
  EXPECT_DOUBLE_EQ(j["leaked_usd"].get<double>(), 0.0001);
  EXPECT_EQ(j["bytes_in"], 100);
  EXPECT_EQ(j["bytes_out"], 2048);
}

TEST(AccessRecordTest, AbsentValuesAreNull) {
  AccessRecord r = sampleRecord({});
  r.endpoint = "";
  r.ttfb_ms.reset();
  r.model = "";
  r.cancel_reason = CancelReason::ClientDisconnect;
  r.status = 499;
  const nlohmann::json j = nlohmann::json::parse(render(r));
  EXPECT_TRUE(j["endpoint"].is_null());
  EXPECT_TRUE(j["ttfb_ms"].is_null());
  EXPECT_TRUE(j["model"].is_null());
  EXPECT_EQ(j["cancel_reason"], "client_disconnect");
  EXPECT_EQ(j["retry_causes"], nlohmann::json::array());
}

TEST(AccessRecordTest, HostileStringsStayOneValidLine) {
  AccessRecord r = sampleRecord({});
  r.path = "/v1/\"}\n{\"forged\":true,\"x\":\"\xFF";
  r.model = "m\r\n\\";
  const std::string line = render(r);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_FALSE(j.contains("forged"));
  EXPECT_EQ(j["model"], "m\r\n\\");
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t lineCount(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

class AccessLogWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-access-log-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/access.log";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  config::AccessLogConfig fileTarget() const {
    return config::AccessLogConfig{config::AccessLogConfig::Target::File, path_};
  }

  Metrics metrics_;
  std::string dir_;
  std::string path_;
};

TEST_F(AccessLogWriterTest, OffByDefaultAndOpeningFailuresAreReported) {
  AccessLog log(metrics_.accessLogDropped());
  EXPECT_FALSE(log.enabled());
  std::string error;
  EXPECT_FALSE(log.configure(
      config::AccessLogConfig{config::AccessLogConfig::Target::File, dir_ + "/no/such/dir/a.log"},
      &error));
  EXPECT_NE(error.find(dir_ + "/no/such/dir/a.log"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
  EXPECT_FALSE(log.enabled());
  EXPECT_TRUE(log.configure(fileTarget(), &error)) << error;
  EXPECT_TRUE(log.enabled());
  EXPECT_TRUE(log.configure(config::AccessLogConfig{}, &error));
  EXPECT_FALSE(log.enabled());
}

TEST_F(AccessLogWriterTest, LinesReachTheFileAndReopenFollowsARename) {
  AccessLog log(metrics_.accessLogDropped());
  std::string error;
  ASSERT_TRUE(log.configure(fileTarget(), &error)) << error;
  log.submit("{\"n\":1}\n{\"n\":2}\n", 2);
  ASSERT_TRUE(test::waitUntil([&] { return lineCount(readAll(path_)) == 2; }));

  // logrotate: move the file away, then SIGHUP → reopen().
  ASSERT_EQ(::rename(path_.c_str(), (path_ + ".1").c_str()), 0);
  log.submit("{\"n\":3}\n", 1);  // before the reopen: still the old (renamed) file
  ASSERT_TRUE(test::waitUntil([&] { return lineCount(readAll(path_ + ".1")) == 3; }));
  ASSERT_TRUE(log.reopen(&error)) << error;
  log.submit("{\"n\":4}\n", 1);
  ASSERT_TRUE(test::waitUntil([&] { return lineCount(readAll(path_)) == 1; }));
  EXPECT_EQ(readAll(path_), "{\"n\":4}\n");
  EXPECT_EQ(readAll(path_ + ".1"), "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n");
  EXPECT_EQ(metrics_.accessLogDropped().Value(), 0);
}

TEST_F(AccessLogWriterTest, StopWritesWhatIsPendingThenDropsLaterLines) {
  AccessLog log(metrics_.accessLogDropped());
  std::string error;
  ASSERT_TRUE(log.configure(fileTarget(), &error)) << error;
  for (int i = 0; i < 100; ++i) log.submit("{}\n", 1);
  log.stop();
  EXPECT_EQ(lineCount(readAll(path_)), 100u);
  log.submit("{}\n", 1);
  EXPECT_EQ(metrics_.accessLogDropped().Value(), 1);
}

TEST_F(AccessLogWriterTest, AFullQueueDropsAndCountsInsteadOfBlocking) {
  // Off: no writer thread drains the queue, so it fills deterministically.
  AccessLog log(metrics_.accessLogDropped());
  const std::string chunk(1 << 20, 'x');  // 1 MiB, "10 lines"
  const size_t fit = AccessLog::kMaxPendingBytes / chunk.size();
  for (size_t i = 0; i < fit + 3; ++i) log.submit(std::string(chunk), 10);
  EXPECT_EQ(metrics_.accessLogDropped().Value(), 30);
}

TEST_F(AccessLogWriterTest, WorkerBufferFlushesOnItsTimerAndWhenFull) {
  AccessLog log(metrics_.accessLogDropped());
  std::string error;
  ASSERT_TRUE(log.configure(fileTarget(), &error)) << error;
  EventBasePtr base(event_base_new());
  AccessLogBuffer buffer(log, base.get());
  ASSERT_TRUE(buffer.enabled());
  const std::vector<std::string> causes;
  buffer.append(sampleRecord(causes));
  EXPECT_EQ(readAll(path_), "") << "buffered, not written per request";
  // The flush timer: run the loop until the line is out.
  ASSERT_TRUE(test::waitUntil([&] {
    event_base_loop(base.get(), EVLOOP_NONBLOCK);
    return lineCount(readAll(path_)) == 1;
  }));
  // Past kFlushBytes the buffer goes out at once, without the loop.
  const std::string one = render(sampleRecord(causes));
  const size_t n = (AccessLogBuffer::kFlushBytes + one.size() - 1) / one.size();  // crosses it
  for (size_t i = 0; i < n; ++i) buffer.append(sampleRecord(causes));
  ASSERT_TRUE(test::waitUntil([&] { return lineCount(readAll(path_)) == 1 + n; }));
  const std::string text = readAll(path_);
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) EXPECT_NO_THROW(nlohmann::json::parse(l));
}

TEST_F(AccessLogWriterTest, AFullDiskLeavesWholeLinesOnly) {
  // A file size limit (RLIMIT_FSIZE with SIGXFSZ ignored) makes write() take
  // what fits and then fail with EFBIG, as a full disk does. The limit is
  // per process: the log runs in a child.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit normal{};
    ::getrlimit(RLIMIT_FSIZE, &normal);
    rlimit small = normal;
    small.rlim_cur = 100;  // 3 lines of 30 bytes and 10 bytes of the 4th
    int status = 0;
    {
      AccessLog log(metrics_.accessLogDropped());
      std::string error;
      if (::setrlimit(RLIMIT_FSIZE, &small) != 0 || !log.configure(fileTarget(), &error)) {
        ::_exit(3);
      }
      std::string chunk;
      for (int i = 0; i < 8; ++i) {
        std::string line = "{\"n\":" + std::to_string(i) + ",\"pad\":\"";
        line += std::string(30 - line.size() - 3, 'x') + "\"}\n";
        chunk += line;
      }
      log.submit(std::move(chunk), 8);
      if (!test::waitUntil([&] { return metrics_.accessLogDropped().Value() > 0; })) status = 4;
      ::setrlimit(RLIMIT_FSIZE, &normal);  // space again
      log.submit("{\"n\":99}\n", 1);
      log.stop();
    }
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string text = readAll(path_);
  std::istringstream lines(text);
  std::vector<int> seen;
  for (std::string l; std::getline(lines, l);) {
    const auto j = nlohmann::json::parse(l, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "a torn line: " << l;
    seen.push_back(j["n"].get<int>());
  }
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 99}));
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace sluice
