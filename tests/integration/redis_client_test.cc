// RedisClient (proxy/shared_state/redis_client.h) against a real redis-server: pipelined
// calls of every reply shape each get their own reply, in order, reply after
// reply from the reused RedisReplyArena — also when a reply spans several
// socket reads, and when a call's callback sends the next call.

#include "proxy/shared_state/redis_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "config/loader.h"
#include "proxy/event/dispatcher.h"
#include "tests/support/loopback.h"
#include "tests/support/redis_process.h"
#include "tests/support/tcp_relay.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

// A reply as text: every field a caller may read.
std::string render(const redisReply* r) {
  if (r == nullptr) return "failed";
  switch (r->type) {
    case REDIS_REPLY_STRING:
      if (r->len > 64) {
        // A long one as its size and whether every byte is its first.
        const std::string text(r->str, r->len);
        const bool same = text.find_first_not_of(text[0]) == std::string::npos;
        return "s(" + std::to_string(r->len) + " x " + (same ? text.substr(0, 1) : "mixed") + ")";
      }
      return "s(" + std::string(r->str, r->len) + ")";
    case REDIS_REPLY_STATUS:
      return "+(" + std::string(r->str, r->len) + ")";
    case REDIS_REPLY_ERROR:
      return "-(" + std::string(r->str, r->len).substr(0, 19) + ")";
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_ARRAY: {
      std::string out = "[";
      for (size_t i = 0; i < r->elements; ++i) out += (i > 0 ? " " : "") + render(r->element[i]);
      return out + "]";
    }
    default:
      return "?";
  }
}

class RedisClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = config::parseRedisUrl(redis_.url());
    ASSERT_TRUE(url);
    RedisClient::Hooks hooks;
    hooks.on_error = [this](std::string_view op) { errors_.emplace_back(op); };
    client_ = std::make_unique<RedisClient>(dispatcher_, *url, nullptr, config::UpstreamTlsConfig{},
                                            milliseconds(5000), hooks);
    client_->start();
    ASSERT_TRUE(runUntil([&] { return client_->up(); })) << "never connected";
  }

  template <class Done>
  bool runUntil(Done done) {
    const auto until = clock_.now() + std::chrono::seconds(10);
    while (!done() && clock_.now() < until) {
      dispatcher_.runNonBlocking();
      std::this_thread::sleep_for(milliseconds(1));
    }
    return done();
  }

  /** Sends `argv`; its reply is appended to replies_ as text. */
  void call(std::initializer_list<std::string_view> argv) {
    ++sent_;
    ASSERT_TRUE(client_->command(
        argv, [this](const redisReply* reply) { replies_.push_back(render(reply)); }, "test"));
  }

  test::RedisProcess redis_;
  RealClock clock_;
  Dispatcher dispatcher_{clock_};
  std::unique_ptr<RedisClient> client_;
  std::vector<std::string> replies_;
  std::vector<std::string> errors_;
  size_t sent_ = 0;
};

TEST_F(RedisClientTest, PipelinedCallsOfEveryShapeGetTheirOwnRepliesInOrder) {
  const std::string big(40000, 'b');  // several socket reads
  std::vector<std::string> expected;
  for (int round = 0; round < 3; ++round) {
    // All sent in one loop turn: the replies arrive together.
    call({"SET", "k", "v"});
    call({"GET", "k"});
    call({"GET", "missing"});
    call({"INCR", "k"});  // an error reply: not an integer
    call({"EVAL", "return {1, {2, 'x', {}}, false, 'y', -7}", "0"});
    call({"EVAL", "return redis.status_reply('FINE')", "0"});
    call({"EVAL", "local t = {} for i = 1, 100 do t[i] = i end return t", "0"});
    call({"SET", "big", big});
    call({"GET", "big"});
    call({"DEL", "k", "big"});
    std::string hundred = "[";
    for (int i = 1; i <= 100; ++i) hundred += (i > 1 ? " " : "") + std::to_string(i);
    hundred += "]";
    for (const std::string& r :
         {std::string("+(OK)"), std::string("s(v)"), std::string("nil"),
          std::string("-(ERR value is not an)"), std::string("[1 [2 s(x) []] nil s(y) -7]"),
          std::string("+(FINE)"), hundred, std::string("+(OK)"), std::string("s(40000 x b)"),
          std::string("2")}) {
      expected.push_back(r);
    }
    ASSERT_TRUE(runUntil([&] { return replies_.size() == sent_; }));
  }
  EXPECT_EQ(replies_, expected);
  // The error reply is counted as its op's failure, as before.
  EXPECT_EQ(errors_, std::vector<std::string>(3, "test"));
}

TEST_F(RedisClientTest, ACallbackThatSendsTheNextCallSeesItsOwnReply) {
  // Each reply is dropped only after its callback returns; the next one is
  // read into the same memory.
  int left = 200;
  std::function<void(const redisReply*)> next = [&](const redisReply* reply) {
    replies_.push_back(render(reply));
    if (--left > 0) {
      ASSERT_TRUE(client_->command({"INCR", "n"}, next, "test"));
    }
  };
  ASSERT_TRUE(client_->command({"INCR", "n"}, next, "test"));
  ASSERT_TRUE(runUntil([&] { return left == 0; }));
  ASSERT_EQ(replies_.size(), 200u);
  for (size_t i = 0; i < replies_.size(); ++i) EXPECT_EQ(replies_[i], std::to_string(i + 1));
}

// --- a hostile or broken Redis ----------------------------------------------

// A fake Redis on loopback: answers the handshake's PING with +PONG, then
// the first command after it with `hostile` (as much of it as the client
// reads: a client that stops reading stops the writes too). Counts the
// connections it accepted.
class FakeRedis {
 public:
  explicit FakeRedis(std::string hostile) : hostile_(std::move(hostile)) {
    listener_ = test::listenOnLoopback();
    thread_ = std::thread([this] { run(); });
  }
  ~FakeRedis() {
    stop_ = true;
    thread_.join();
    ::close(listener_.fd);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(listener_.port) + "/0"; }
  int connections() const { return connections_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listener_.fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept(listener_.fd, nullptr, nullptr);
      if (fd < 0) continue;
      ++connections_;
      serve(fd);
      ::close(fd);
    }
  }
  void serve(int fd) {
    int commands = 0;
    size_t sent = 0;
    while (!stop_) {
      pollfd p{fd,
               static_cast<short>(POLLIN | (commands >= 2 && sent < hostile_.size() ? POLLOUT : 0)),
               0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if ((p.revents & POLLIN) != 0) {
        char buf[4096];
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n <= 0) return;  // the client dropped the connection
        // One command per read is enough here: PING, then the test's call.
        if (++commands == 1) (void)!::write(fd, "+PONG\r\n", 7);
      }
      if ((p.revents & POLLOUT) != 0) {
        const ssize_t n = ::send(fd, hostile_.data() + sent,
                                 std::min<size_t>(hostile_.size() - sent, 65536), MSG_NOSIGNAL);
        if (n <= 0) return;
        sent += static_cast<size_t>(n);
      }
      if ((p.revents & (POLLHUP | POLLERR)) != 0) return;
    }
  }

  const std::string hostile_;
  test::LoopbackListener listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

class HostileRedisTest : public ::testing::Test {
 protected:
  /** Sends one call to a fake Redis that answers it with `hostile`: the client must give up on
   * it (the call fails, op "protocol", the connection is dropped). */
  void expectDropped(const std::string& hostile) {
    FakeRedis fake(hostile);
    const auto url = config::parseRedisUrl(fake.url());
    ASSERT_TRUE(url);
    RedisClient::Hooks hooks;
    hooks.on_error = [this](std::string_view op) { errors_.emplace_back(op); };
    hooks.on_state = [this](bool up, std::string_view reason) {
      if (!up) reasons_.emplace_back(reason);
    };
    RedisClient client(dispatcher_, *url, nullptr, config::UpstreamTlsConfig{}, milliseconds(30000),
                       hooks);
    client.start();
    ASSERT_TRUE(runUntil([&] { return client.up(); })) << "never connected";
    bool answered = false;
    const redisReply* got = reinterpret_cast<const redisReply*>(1);
    ASSERT_TRUE(client.command(
        {"GET", "x"},
        [&](const redisReply* reply) {
          answered = true;
          got = reply;
        },
        "circuit"));
    ASSERT_TRUE(runUntil([&] { return answered; })) << "the hostile reply was never refused";
    EXPECT_EQ(got, nullptr) << "the call failed";
    EXPECT_FALSE(client.up());
    EXPECT_NE(std::find(errors_.begin(), errors_.end(), "protocol"), errors_.end());
    ASSERT_FALSE(reasons_.empty());
    EXPECT_NE(reasons_[0].find("limit"), std::string::npos) << reasons_[0];
  }

  template <class Done>
  bool runUntil(Done done) {
    const auto until = clock_.now() + std::chrono::seconds(20);
    while (!done() && clock_.now() < until) {
      dispatcher_.runNonBlocking();
      std::this_thread::sleep_for(milliseconds(1));
    }
    return done();
  }

  RealClock clock_;
  Dispatcher dispatcher_{clock_};
  std::vector<std::string> errors_;
  std::vector<std::string> reasons_;
};

TEST_F(HostileRedisTest, AGigabyteBulkStringIsRefusedBeforeItIsRead) {
  // Announces 1 GiB and sends 4 MiB of it: the client stops at its limit.
  expectDropped("$1073741824\r\n" + std::string(4 << 20, 'x'));
}

TEST_F(HostileRedisTest, AMillionElementArrayIsRefused) {
  std::string reply = "*1000000\r\n";
  for (int i = 0; i < 10000; ++i) reply += ":1\r\n";
  expectDropped(reply);
}

TEST_F(HostileRedisTest, ArraysNestedTooDeepAreRefused) {
  expectDropped("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
}

TEST_F(HostileRedisTest, TooManyValuesInOneReplyAreRefused) {
  // 4096 arrays of 4096 integers: each array is within the limits, the whole is not.
  std::string inner = "*4096\r\n";
  for (int i = 0; i < 4096; ++i) inner += ":1\r\n";
  std::string reply = "*4096\r\n";
  for (int i = 0; i < 8; ++i) reply += inner;  // the refusal comes long before the end
  expectDropped(reply);
}

// --- a subscription whose flow went silent -----------------------------------

TEST(RedisSubscriberTest, ASilentlyDeadSubscriptionIsNoticedAndReplaced) {
  test::RedisProcess redis;
  test::TcpRelay relay(redis.port());
  RealClock clock;
  Dispatcher dispatcher{clock};
  const auto url = config::parseRedisUrl("redis://127.0.0.1:" + std::to_string(relay.port()));
  ASSERT_TRUE(url);
  int subscribed = 0;
  std::vector<std::string> downs;
  std::vector<std::string> messages;
  RedisClient::Hooks hooks;
  hooks.on_subscribed = [&] { ++subscribed; };
  hooks.on_state = [&](bool up, std::string_view reason) {
    if (!up) downs.emplace_back(reason);
  };
  RedisClient subscriber(
      // A PING may take up to 1 s (a loaded machine, sanitizers): the test
      // is about a flow that never answers, not a slow one.
      dispatcher, *url, nullptr, config::UpstreamTlsConfig{}, milliseconds(1000), hooks, {}, "ch",
      [&](std::string_view, std::string_view message) { messages.emplace_back(message); },
      milliseconds(100));
  subscriber.start();
  const auto runUntil = [&](auto done) {
    const auto until = clock.now() + std::chrono::seconds(20);
    while (!done() && clock.now() < until) {
      dispatcher.runNonBlocking();
      std::this_thread::sleep_for(milliseconds(1));
    }
    return done();
  };
  ASSERT_TRUE(runUntil([&] { return subscribed == 1; }));
  // Several PINGs answered: a live subscription is left alone.
  const auto quiet_until = clock.now() + milliseconds(1500);
  runUntil([&] { return !downs.empty() || clock.now() >= quiet_until; });
  ASSERT_TRUE(downs.empty()) << "dropped a live subscription: \"" << downs[0] << "\"";

  relay.blackhole();  // the flow is gone; the TCP connection looks open
  ASSERT_TRUE(runUntil([&] { return !downs.empty(); }))
      << "the dead subscription was never noticed";
  EXPECT_NE(downs[0].find("PING"), std::string::npos) << downs[0];
  ASSERT_TRUE(runUntil([&] { return subscribed == 2; })) << "never subscribed again";
  EXPECT_EQ(relay.accepted(), 2);
  redis.cli("PUBLISH ch hello");
  ASSERT_TRUE(runUntil([&] { return !messages.empty(); }));
  EXPECT_EQ(messages[0], "hello");
}

}  // namespace
}  // namespace sluice
