// RedisClient (proxy/redis_client.h) against a real redis-server: pipelined
// calls of every reply shape each get their own reply, in order, reply after
// reply from the reused RedisReplyArena — also when a reply spans several
// socket reads, and when a call's callback sends the next call.

#include "proxy/redis_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "config/loader.h"
#include "proxy/dispatcher.h"
#include "tests/support/redis_process.h"

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

}  // namespace
}  // namespace sluice
