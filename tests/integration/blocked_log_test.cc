// Logs never hold requests, reloads or shutdown hostage: with stderr (the
// operational log) and stdout (the access log) on full pipes nobody reads —
// a stuck log shipper — requests that trip a circuit (each trip is a log
// line) still end within their budget, SIGHUP reloads complete, /metrics
// shows sluice_log_dropped_total, and SIGTERM exits within drain_timeout.
// Lines that cannot be written are dropped and counted, never waited for.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

#include "config/loader.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using std::chrono::milliseconds;

// Every failure trips the circuit (a warn line on stderr); the short cooldown
// lets the next request probe, fail and re-trip it (more lines).
constexpr char kConfig[] = R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
drain_timeout: 1s
access_log: {path: stdout}
upstreams:
  - name: mock
    url: ${MOCK_URL}
    circuit_breaker: {consecutive_failures: 1, cooldown: 5ms, max_cooldown: 10ms}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: mock
    retry: {attempts: 1}
)";

constexpr char kChat[] = R"({"model":"gpt-4o-mini","messages":[]})";
constexpr int kBudgetMs = 3000;

TEST(BlockedLogTest, RequestsReloadAndShutdownDoNotWaitForABlockedLogReader) {
  MockLlm mock;
  SluiceProcess sluice(substitute(kConfig, {{"MOCK_URL", mock.url()}}), /*stderr_to_pipe=*/true);
  ASSERT_TRUE(sluice.running());
  ASSERT_TRUE(sluice.blockOutput());

  const std::vector<std::pair<std::string, std::string>> failing{
      {"x-mock-status", "503"},
      {"x-mock-fail-key", "blocked-log"},
      {"x-mock-fail-times", "1000000"},
      {"x-budget-ms", std::to_string(kBudgetMs)}};
  for (int i = 0; i < 40; ++i) {
    const auto start = std::chrono::steady_clock::now();
    // The read timeout only bounds a broken run (a worker stuck in write()).
    const auto r = httpRequest(sluice.port(), "POST", "/v1/chat/completions", failing, kChat,
                               milliseconds(kBudgetMs + 5000));
    const auto took =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    ASSERT_EQ(r.status, 503) << "request " << i << " got no answer (a worker blocked on a log?)";
    EXPECT_LE(took.count(), kBudgetMs) << "request " << i << " outlived its budget";
  }
  EXPECT_GE(sluice.metric("sluice_circuit_transitions_total", {{"to", "open"}}), 1);

  // The drop counter is exported for both logs.
  const std::string metrics = sluice.adminGet("/metrics");
  EXPECT_NE(metrics.find("sluice_log_dropped_total{log=\"operational\"}"), std::string::npos);
  EXPECT_NE(metrics.find("sluice_log_dropped_total{log=\"access\"}"), std::string::npos);

  // SIGHUP (access log reopen, reload, its log line) completes.
  for (int i = 1; i <= 2; ++i) {
    sluice.signal(SIGHUP);
    ASSERT_TRUE(waitUntil([&] {
      return sluice.metric("sluice_config_reloads_total", {{"result", "ok"}}) == i;
    })) << "reload "
        << i << " did not complete";
  }
  const auto r = httpRequest(sluice.port(), "GET", "/v1/models", {{"x-mock-status", "200"}});
  EXPECT_NE(r.status, 0) << "sluice stopped answering after the reloads";

  // SIGTERM: the writers get until the drain deadline, then give up; exit 0.
  sluice.signal(SIGTERM);
  EXPECT_EQ(sluice.waitForExit(std::chrono::seconds(30)), 0)
      << "shutdown hung on a log nobody reads";
}

}  // namespace
}  // namespace sluice::test
