// ExchangeHost::wakerFor: a filter's answer from another thread reaches its
// Exchange on the Exchange's own dispatcher, and never an Exchange that ended.

#include "proxy/exchange/exchange_host.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <thread>

#include "common/clock.h"

namespace sluice {
namespace {

/** A host whose dispatcher is real and whose live exchanges the test says. */
class FakeHost final : public ExchangeHost {
 public:
  Dispatcher& dispatcher() override { return dispatcher_; }
  UpstreamStreamSource& pool(const ConfigSnapshot&, size_t) override {
    throw std::logic_error("no pools");
  }
  void retire(Exchange&) override {}
  bool alive(uint64_t id) const override { return live.count(id) != 0; }
  IdGenerator& ids() override { throw std::logic_error("no ids"); }
  AccessLogBuffer* accessLog() override { return nullptr; }

  std::set<uint64_t> live;

 private:
  RealClock clock_;
  Dispatcher dispatcher_{clock_};
};

TEST(ExchangeHostTest, AWakerRunsOnTheHostsDispatcherWhileItsExchangeIsAlive) {
  FakeHost host;
  host.live = {7};
  int ran = 0;
  std::thread::id ran_on;
  std::function<void()> wake = host.wakerFor(7, [&] {
    ++ran;
    ran_on = std::this_thread::get_id();
  });
  std::thread other([&] { wake(); });
  other.join();
  EXPECT_EQ(ran, 0);  // posted, not run on the calling thread
  host.dispatcher().runNonBlocking();
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ExchangeHostTest, AWakerForAnExchangeThatEndedRunsNothing) {
  FakeHost host;
  host.live = {7};
  int ran = 0;
  std::function<void()> wake = host.wakerFor(7, [&] { ++ran; });
  wake();
  host.live.clear();  // the exchange finished before the posted work ran
  host.dispatcher().runNonBlocking();
  EXPECT_EQ(ran, 0);
  host.live = {8};  // another exchange does not answer for it either
  wake();
  host.dispatcher().runNonBlocking();
  EXPECT_EQ(ran, 0);
}

}  // namespace
}  // namespace sluice
