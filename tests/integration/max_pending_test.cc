// circuit_breaker.max_pending end to end: requests that
// wait — in the throttle queue, or for a connection to the upstream — hold
// one of the upstream's max_pending slots; one more is answered 503
// `overloaded` at once (cancel_reason overloaded, Retry-After) and never
// sent. A waiter that leaves frees its slot.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

const char* kChat = R"({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]})";

void expectOverloaded(const TestResponse& r) {
  EXPECT_EQ(r.status, 503) << r.body;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j["cancel_reason"], "overloaded") << r.body;
  EXPECT_TRUE(r.headers.has("retry-after"));
}

size_t inFlight(SluiceUnderTest& sluice) { return sluice.server().exchanges().size(); }

TEST(MaxPendingTest, ThrottleQueueBeyondMaxPendingIs503Overloaded) {
  MockLlm mock;
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
    rate_limit: {key: none, reserve: 0, max_queue: 100}
    circuit_breaker: {max_pending: 1}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: mock
    budget: {default: 120s}
    retry: {attempts: 1}
)",
                                    {{"MOCK_URL", mock.url()}}));
  const std::vector<std::pair<std::string, std::string>> quota = {{"x-mock-quota", "2/60000"},
                                                                  {"x-mock-quota-key", "pending"},
                                                                  {"x-mock-quota-style", "openai"}};
  for (int i = 0; i < 2; ++i) {  // spend the quota: the next requests queue for a minute
    EXPECT_EQ(httpRequest(sluice.port(), "POST", "/v1/chat/completions", quota, kChat).status, 200);
  }
  auto queueDepth = [&] {
    return sluice.metric("sluice_throttle_queue_depth", {{"upstream", "mock"}});
  };
  {
    TestConnection waiting(sluice.port());
    waiting.sendRequest("POST", "/v1/chat/completions", quota, kChat);
    ASSERT_TRUE(waitUntil([&] { return queueDepth() == 1; })) << "never queued";

    // The queue has room (max_queue 100) but max_pending is 1.
    auto headers = quota;
    headers.emplace_back("x-mock-request-id", "one-too-many");
    expectOverloaded(httpRequest(sluice.port(), "POST", "/v1/chat/completions", headers, kChat));
    EXPECT_EQ(queueDepth(), 1);
    EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "overloaded"}}), 1);
    EXPECT_EQ(sluice.metric("sluice_requests_total", {{"route", "chat"}, {"code", "503"}}), 1);
  }  // the waiting client leaves: its slot is free again
  ASSERT_TRUE(waitUntil([&] { return queueDepth() == 0 && inFlight(sluice) == 0; }));
  {
    TestConnection next(sluice.port());
    next.sendRequest("POST", "/v1/chat/completions", quota, kChat);
    EXPECT_TRUE(waitUntil([&] { return queueDepth() == 1; })) << "queued, not overloaded";
  }
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "overloaded"}}), 1);
  EXPECT_EQ(mock.ledger("one-too-many").size(), 0u) << "an overloaded request is never sent";
}

/** A TCP listener that never accepts: the kernel completes handshakes, nobody answers. */
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 16) != 0) return;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(MaxPendingTest, WaitingForAnUpstreamConnectionBeyondMaxPendingIs503Overloaded) {
  // TLS to a peer that never answers the handshake: every attempt waits for
  // its connection until connect_timeout.
  SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  SluiceUnderTest sluice(substitute(R"(
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: slow
    url: https://127.0.0.1:${PORT}
    http2: off
    tls: {verify: false}
    connect_timeout: 60s
    circuit_breaker: {max_pending: 1}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions}
    upstream: slow
    budget: {default: 120s}
    retry: {attempts: 1}
)",
                                    {{"PORT", std::to_string(silent.port())}}));
  {
    TestConnection waiting(sluice.port());
    waiting.sendRequest("POST", "/v1/chat/completions", {}, kChat);
    ASSERT_TRUE(waitUntil([&] { return inFlight(sluice) == 1; }));

    expectOverloaded(httpRequest(sluice.port(), "POST", "/v1/chat/completions", {}, kChat));
    EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "overloaded"}}), 1);
    EXPECT_EQ(inFlight(sluice), 1u);
  }  // the waiting client leaves: its attempt is torn down and its slot freed
  ASSERT_TRUE(waitUntil([&] { return inFlight(sluice) == 0; }));
  {
    TestConnection next(sluice.port());
    next.sendRequest("POST", "/v1/chat/completions", {}, kChat);
    EXPECT_TRUE(waitUntil([&] { return inFlight(sluice) == 1; })) << "waiting, not overloaded";
  }
  EXPECT_EQ(sluice.metric("sluice_cancellations_total", {{"cancel_reason", "overloaded"}}), 1);
}

}  // namespace
}  // namespace sluice::test
