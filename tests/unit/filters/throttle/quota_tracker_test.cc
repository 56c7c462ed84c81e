#include "filters/throttle/quota_tracker.h"

#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono;
using std::chrono::milliseconds;
using Kind = QuotaTracker::Admission::Kind;

constexpr MonotonicTime kNoDeadline = MonotonicTime::max();
const std::string kKey = "k";

config::RateLimitConfig makeConfig(int64_t reserve = 1, uint32_t max_queue = 1000) {
  config::RateLimitConfig config;
  config.key.kind = config::RateLimitKey::Kind::None;
  config.reserve = reserve;
  config.max_queue = max_queue;
  return config;
}

// A requests quota: `limit`, `remaining`, resetting `reset_in` after now (nullopt = not said).
QuotaObservation requestsQuota(const Clock& clock, int64_t limit, int64_t remaining,
                               std::optional<milliseconds> reset_in) {
  QuotaObservation obs;
  obs.requests = Quota{limit, remaining, std::nullopt};
  if (reset_in) obs.requests->reset_at = clock.now() + *reset_in;
  return obs;
}

// Records which wakers fired, in order.
struct WakeLog {
  std::mutex mutex;
  std::vector<int> order;

  QuotaTracker::Waker waker(int id) {
    return [this, id] {
      std::lock_guard lock(mutex);
      order.push_back(id);
    };
  }
  std::vector<int> take() {
    std::lock_guard lock(mutex);
    return std::exchange(order, {});
  }
};

// --- quotaKeyFor ----------------------------------------------------------------

TEST(QuotaKeyTest, NoneIsOneKeyPerUpstream) {
  config::RateLimitConfig config;
  config.key.kind = config::RateLimitKey::Kind::None;
  HeaderMap headers;
  headers.add("authorization", "Bearer sk-secret");
  EXPECT_EQ(quotaKeyFor(config, headers), "");
  EXPECT_EQ(quotaKeyFor(config, HeaderMap{}), "");
}

TEST(QuotaKeyTest, HeaderIsHashedNeverRaw) {
  config::RateLimitConfig config;  // default: header:authorization
  const std::string secret = "Bearer sk-proj-0123456789abcdefSECRET";
  HeaderMap headers;
  headers.add("Authorization", secret);
  const std::string key = quotaKeyFor(config, headers);
  ASSERT_EQ(key.size(), 16u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(key.find("sk-"), std::string::npos);
  EXPECT_EQ(secret.find(key), std::string::npos);
  EXPECT_EQ(quotaKeyFor(config, headers), key) << "stable";

  HeaderMap other;
  other.add("authorization", "Bearer sk-proj-0123456789abcdefSECRET2");
  EXPECT_NE(quotaKeyFor(config, other), key) << "differs per value";

  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223...
  HeaderMap abc;
  abc.add("authorization", "abc");
  EXPECT_EQ(quotaKeyFor(config, abc), "ba7816bf8f01cfea");
}

// Each thread reuses one digest context; every key must be
// the one-shot EVP_Digest's, for values of every length, on two threads at once.
TEST(QuotaKeyTest, AReusedDigestContextGivesTheOneShotDigest) {
  const auto oneShot = [](const std::string& value) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EXPECT_EQ(EVP_Digest(value.data(), value.size(), digest, &len, EVP_sha256(), nullptr), 1);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (size_t i = 0; i < 8; ++i) {
      hex += kHex[digest[i] >> 4];
      hex += kHex[digest[i] & 0xf];
    }
    return hex;
  };
  const auto run = [&](unsigned seed) {
    config::RateLimitConfig config;
    std::mt19937 rng(seed);
    for (int i = 0; i < 300; ++i) {
      std::string value(rng() % 200, 'x');
      for (char& c : value) c = static_cast<char>(' ' + rng() % 95);
      HeaderMap headers;
      headers.add("authorization", value);
      EXPECT_EQ(quotaKeyFor(config, headers), oneShot(value)) << value;
    }
  };
  std::thread other(run, 2);
  run(1);
  other.join();
}

// The cache's MAC: SipHash-2-4-128, the reference vectors (key 00..0f,
// message 00..len-1), and OpenSSL's SIPHASH on every length up to 64 bytes.
TEST(QuotaKeyTest, SipHash128MatchesTheReferenceAndOpenSsl) {
  const std::array<uint64_t, 2> key = {0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  const auto bytes = [](const std::array<uint64_t, 2>& mac) {
    std::vector<unsigned char> out;
    for (const uint64_t word : mac) {
      for (int b = 0; b < 8; ++b) out.push_back(static_cast<unsigned char>(word >> (8 * b)));
    }
    return out;
  };
  const std::vector<std::vector<unsigned char>> reference = {
      {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02,
       0x93},
      {0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc,
       0x45},
      {0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a, 0xff,
       0xe4}};
  std::string message;
  for (size_t len = 0; len < reference.size(); ++len) {
    EXPECT_EQ(bytes(detail::sipHash128(key, message)), reference[len]) << len;
    message.push_back(static_cast<char>(len));
  }

  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  ASSERT_NE(mac, nullptr);
  std::mt19937 rng(9);
  for (size_t len = 0; len <= 64; ++len) {
    std::array<uint64_t, 2> k = {(uint64_t{rng()} << 32) | rng(), (uint64_t{rng()} << 32) | rng()};
    std::string data(len, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    unsigned char raw_key[16];
    for (int b = 0; b < 16; ++b) raw_key[b] = static_cast<unsigned char>(k[b / 8] >> (8 * (b % 8)));
    size_t size = 16;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t("size", &size), OSSL_PARAM_construct_end()};
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
    ASSERT_NE(ctx, nullptr);
    ASSERT_EQ(EVP_MAC_init(ctx, raw_key, sizeof raw_key, params), 1);
    ASSERT_EQ(EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), len), 1);
    std::vector<unsigned char> expected(16);
    size_t out_len = 0;
    ASSERT_EQ(EVP_MAC_final(ctx, expected.data(), &out_len, expected.size()), 1);
    EVP_MAC_CTX_free(ctx);
    EXPECT_EQ(out_len, 16u);
    EXPECT_EQ(bytes(detail::sipHash128(k, data)), expected) << len;
  }
  EVP_MAC_free(mac);
}

// Each thread keeps its recent keys by a MAC of the value:
// values that repeat (hits), that clash in a slot and that are new must all
// get the SHA-256 key made afresh, on two threads at once.
TEST(QuotaKeyTest, CachedKeysAreTheDigestsKeys) {
  const auto run = [](unsigned seed) {
    config::RateLimitConfig config;
    std::mt19937 rng(seed);
    std::vector<std::string> values;
    for (int i = 0; i < 300; ++i) {
      std::string value(rng() % 80, 'x');
      for (char& c : value) c = static_cast<char>(' ' + rng() % 95);
      values.push_back(value);
    }
    for (int i = 0; i < 5000; ++i) {
      // Mostly a few hot keys, sometimes any of 300 (more than the slots).
      const std::string& value = values[rng() % 4 == 0 ? rng() % values.size() : rng() % 5];
      HeaderMap headers;
      headers.add("authorization", value);
      ASSERT_EQ(quotaKeyFor(config, headers), detail::digestQuotaKey(value)) << value;
    }
  };
  std::thread other(run, 4);
  run(3);
  other.join();
}

TEST(QuotaKeyTest, MissingHeaderAndCustomHeader) {
  config::RateLimitConfig config;
  config.key.header = "x-api-key";
  HeaderMap headers;
  headers.add("authorization", "Bearer sk-a");
  EXPECT_EQ(quotaKeyFor(config, headers), "-");
  headers.add("X-Api-Key", "sk-ant-123");
  const std::string key = quotaKeyFor(config, headers);
  EXPECT_EQ(key.size(), 16u);
  EXPECT_NE(key, "-");
}

// --- admission rules ---------------------------------------------------------------

TEST(QuotaTrackerTest, ReserveBoundary) {
  struct Row {
    int64_t limit;
    int64_t remaining;
    int64_t reserve;
    Kind expect;
  };
  const Row rows[] = {
      {10, 2, 1, Kind::Admitted},  // 2 > 1
      {10, 1, 1, Kind::Queued},    // 1 <= 1: hold
      {10, 0, 0, Kind::Queued},
      {10, 1, 0, Kind::Admitted},
      {10, 6, 5, Kind::Admitted},
      {10, 5, 5, Kind::Queued},
      {1, 1, 1, Kind::Admitted},  // reserve capped at limit - 1: a tiny
                                  // quota still works
      {-1, 1, 1, Kind::Queued},   // unknown limit: the reserve as configured
  };
  for (const Row& row : rows) {
    ManualClock clock;
    QuotaTracker tracker(makeConfig(row.reserve), clock);
    tracker.observe(kKey, requestsQuota(clock, row.limit, row.remaining, seconds(10)));
    const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
    EXPECT_EQ(a.kind, row.expect) << "limit " << row.limit << " remaining " << row.remaining
                                  << " reserve " << row.reserve;
    if (a.kind == Kind::Queued) {
      ASSERT_TRUE(a.wake_at);
      EXPECT_EQ(*a.wake_at, clock.now() + seconds(10));
    }
  }
}

TEST(QuotaTrackerTest, AdmittedSinceUpdateIsSubtracted) {
  struct Row {
    int64_t reserve;
    int admitted;
  };
  for (const Row row : {Row{0, 5}, Row{1, 4}, Row{2, 3}, Row{5, 0}}) {
    ManualClock clock;
    QuotaTracker tracker(makeConfig(row.reserve), clock);
    tracker.observe(kKey, requestsQuota(clock, 100, 5, seconds(30)));
    int admitted = 0;
    int queued = 0;
    for (int i = 0; i < 8; ++i) {
      const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
      if (a.kind == Kind::Admitted) ++admitted;
      if (a.kind == Kind::Queued) {
        ++queued;
        EXPECT_EQ(a.wake_at, clock.now() + seconds(30));
      }
    }
    EXPECT_EQ(admitted, row.admitted) << "reserve " << row.reserve;
    EXPECT_EQ(queued, 8 - row.admitted) << "reserve " << row.reserve;
    EXPECT_EQ(tracker.queueDepth(), static_cast<size_t>(8 - row.admitted));
  }
}

// Decision: a report counts only what the upstream had seen when it answered, so
// requests still awaiting their answer stay charged after it.
TEST(QuotaTrackerTest, LateReportDoesNotUndoInFlightCount) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(1), clock);
  tracker.observe(kKey, requestsQuota(clock, 100, 5, seconds(30)));
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 4; ++i) {
    const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
    ASSERT_EQ(a.kind, Kind::Admitted);
    tickets.push_back(a.ticket);
  }
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
  // The first answer was computed when the upstream had seen only it: remaining 4.
  // The 3 others are still unanswered: effective 4 - 3 = 1 <= reserve. Still held.
  tracker.observe(kKey, requestsQuota(clock, 100, 4, seconds(30)));
  tracker.onAttemptDone(tickets[0], true);
  EXPECT_EQ(tracker.queueDepth(), 1u);
  // All answered: the upstream says 1 left (= reserve); still held.
  for (int i = 1; i < 4; ++i) {
    tracker.observe(kKey, requestsQuota(clock, 100, 4 - i, seconds(30)));
    tracker.onAttemptDone(tickets[i], true);
  }
  EXPECT_EQ(tracker.queueDepth(), 1u);
}

// A false 429: the reported request's answer released the average token need
// of those in flight instead of its own, so a big request's answer left part
// of its own need charged on top of the report that already counts it. A
// 400-token window; R (151) then A (41) are sent; R's answer says 249 left
// (A not arrived yet). Counted once: 249 - 41 = 208 left, so a request needing
// 200 goes; with the average (96) released, 249 - 96 = 153 and it got 429
// (its budget ends before the reset).
TEST(QuotaTrackerTest, TheReportedRequestReleasesItsOwnTokenNeed) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  QuotaObservation window;
  window.tokens = Quota{400, 400, clock.now() + seconds(30)};
  tracker.observe(kKey, window);
  const auto reported = tracker.admit(kKey, 151, kNoDeadline, [] {});
  ASSERT_EQ(reported.kind, Kind::Admitted);
  ASSERT_EQ(tracker.admit(kKey, 41, kNoDeadline, [] {}).kind, Kind::Admitted);
  clock.advance(milliseconds(700));
  QuotaObservation report;
  report.tokens = Quota{400, 249, clock.now() + seconds(29)};
  tracker.observe(reported.ticket, report);
  tracker.onAttemptDone(reported.ticket, true);
  EXPECT_EQ(tracker.unansweredTokens(kKey), 41);
  const auto a = tracker.admit(kKey, 200, clock.now() + seconds(10), [] {});
  EXPECT_EQ(a.kind, Kind::Admitted) << "208 left, 200 needed";
  EXPECT_EQ(tracker.admit(kKey, 9, clock.now() + seconds(10), [] {}).kind, Kind::Rejected)
      << "8 left: counted once, not zero times";
}

// Requests sent after the reported one are not in its report: they stay charged.
TEST(QuotaTrackerTest, InFlightSentAfterTheReportedRequestStaysCharged) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  QuotaObservation window;
  window.tokens = Quota{400, 400, clock.now() + seconds(30)};
  tracker.observe(kKey, window);
  const auto reported = tracker.admit(kKey, 41, kNoDeadline, [] {});
  ASSERT_EQ(reported.kind, Kind::Admitted);
  for (uint64_t need : {100, 92}) {
    ASSERT_EQ(tracker.admit(kKey, need, kNoDeadline, [] {}).kind, Kind::Admitted);
  }
  QuotaObservation report;
  report.tokens = Quota{400, 359, clock.now() + seconds(29)};  // only R's 41 counted
  tracker.observe(reported.ticket, report);
  tracker.onAttemptDone(reported.ticket, true);
  // 359 - 192 = 167 left.
  EXPECT_EQ(tracker.admit(kKey, 168, clock.now() + seconds(10), [] {}).kind, Kind::Rejected);
  EXPECT_EQ(tracker.admit(kKey, 167, clock.now() + seconds(10), [] {}).kind, Kind::Admitted);
}

TEST(QuotaTrackerTest, OlderReportWithinWindowIsIgnored) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  const auto reset = seconds(30);
  tracker.observe(kKey, requestsQuota(clock, 100, 1, reset));
  // An older response (same window, more remaining) arrives late: ignored.
  tracker.observe(kKey, requestsQuota(clock, 100, 7, reset));
  EXPECT_EQ(tracker.lastRemaining(false), 7);  // the gauge shows what was reported
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
}

// Three requests released together at a refill reach the provider in one
// order (remaining 2, 1, 0) and their answers come back in another. A
// relative reset is rounded up to the header's resolution ("1.997s"), so the
// report of the request the provider counted first (remaining 2) can say a
// reset up to that resolution later than the one already applied. That is
// the same window, not a later one: its higher remaining is an older count,
// and must not free slots (it let two more requests through in a 3-per-2-s
// window: the provider answered 429).
TEST(QuotaTrackerTest, ARoundedUpResetOfTheSameWindowIsNotANewWindow) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 3, 0, seconds(1)));
  clock.advance(seconds(1));  // refilled to 3: three go together
  std::vector<uint64_t> sent;
  for (int i = 0; i < 3; ++i) {
    const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
    ASSERT_EQ(a.kind, Kind::Admitted) << i;
    sent.push_back(a.ticket);
  }
  // The provider counted them as 2, 1, 0 left at 1999.2, 1999.0, 1998.8 ms
  // before its reset: rounded up to the millisecond, 2000, 1999, 1999. The
  // answers arrive 0.4 ms after they were sent, the last counted first.
  clock.advance(std::chrono::microseconds(400));
  const MonotonicTime arrival = clock.now();
  QuotaObservation zero, one, two;
  zero.requests = Quota{3, 0, arrival + milliseconds(1999)};
  one.requests = Quota{3, 1, arrival + milliseconds(1999)};
  two.requests = Quota{3, 2, arrival + milliseconds(2000)};
  tracker.observe(sent[2], zero);
  tracker.observe(sent[1], one);
  tracker.observe(sent[0], two);
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued)
      << "the window's three requests are spent: an older count frees nothing";
}

TEST(QuotaTrackerTest, ReportOfAFinishedWindowDoesNotLowerTheRefill) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  const MonotonicTime window_end = clock.now() + seconds(1);
  tracker.observe(kKey, requestsQuota(clock, 3, 0, seconds(1)));
  clock.advance(seconds(1));
  // Refilled to 3. A late answer from the old window (reset = the old window end) arrives.
  QuotaObservation late;
  late.requests = Quota{3, 0, window_end};
  tracker.observe(kKey, late);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted) << i;
  }
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
}

TEST(QuotaTrackerTest, FifoReleaseAtResetUpToLimit) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 3, 0, seconds(1)));
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 5; ++i) {
    const auto a = tracker.admit(kKey, 0, kNoDeadline, log.waker(i));
    ASSERT_EQ(a.kind, Kind::Queued);
    ASSERT_EQ(a.wake_at, clock.now() + seconds(1));
    tickets.push_back(a.ticket);
  }
  clock.advance(milliseconds(999));
  EXPECT_EQ(tracker.poll(tickets[0]).kind, Kind::Queued);
  clock.advance(milliseconds(1));
  // The reset: refilled to limit 3; the first 3 go in FIFO order, the caller answered directly.
  EXPECT_EQ(tracker.poll(tickets[4]).kind, Kind::Queued);
  EXPECT_EQ(log.take(), (std::vector<int>{0, 1, 2}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tracker.poll(tickets[i]).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(tickets[3]).kind, Kind::Queued);
  EXPECT_EQ(tracker.queueDepth(), 2u);
  // A newcomer never overtakes the queue.
  const auto late = tracker.admit(kKey, 0, kNoDeadline, log.waker(9));
  EXPECT_EQ(late.kind, Kind::Queued);
  // A fresh report makes room: released in order, the newcomer last.
  for (int i = 0; i < 3; ++i) tracker.onAttemptDone(tickets[i], false);
  tracker.observe(kKey, requestsQuota(clock, 10, 10, seconds(60)));
  EXPECT_EQ(log.take(), (std::vector<int>{3, 4, 9}));
  EXPECT_EQ(tracker.queueDepth(), 0u);
}

// Shared state (docs/design.md §6): the fleet refused a locally admitted ticket.
TEST(QuotaTrackerTest, DeferredTicketGoesBackToTheHeadUntilTheGlobalReset) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 10, 10, seconds(60)));
  const auto first = tracker.admit(kKey, 0, kNoDeadline, log.waker(1));
  ASSERT_EQ(first.kind, Kind::Admitted);
  EXPECT_EQ(tracker.unanswered(kKey), 1);
  const auto deferred = tracker.deferAdmitted(first.ticket, clock.now() + milliseconds(500));
  ASSERT_EQ(deferred.kind, Kind::Queued);
  EXPECT_EQ(deferred.wake_at, clock.now() + milliseconds(500));
  EXPECT_EQ(tracker.unanswered(kKey), 0) << "its slot went back";
  // Held: a newcomer queues behind it, even though the local quota has room.
  const auto second = tracker.admit(kKey, 0, kNoDeadline, log.waker(2));
  ASSERT_EQ(second.kind, Kind::Queued);
  EXPECT_EQ(second.wake_at, clock.now() + milliseconds(500));
  EXPECT_EQ(tracker.poll(first.ticket).kind, Kind::Queued);
  clock.advance(milliseconds(500));
  // The hold is over: FIFO order, the deferred one first.
  EXPECT_EQ(tracker.poll(second.ticket).kind, Kind::Admitted);
  EXPECT_EQ(log.take(), (std::vector<int>{1}));
  EXPECT_EQ(tracker.poll(first.ticket).kind, Kind::Admitted);
  EXPECT_EQ(tracker.deferAdmitted(12345, clock.now()).kind, Kind::Rejected);
}

TEST(QuotaTrackerTest, UnthrottledKeysAreKnown) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  EXPECT_FALSE(tracker.unthrottled(kKey));
  const auto a = tracker.admit(kKey, 0, kNoDeadline, {});
  tracker.observe(a.ticket, QuotaObservation{});
  EXPECT_TRUE(tracker.unthrottled(kKey));
}

TEST(QuotaTrackerTest, StaleStateIsRefilledToLimit) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(1), clock);
  tracker.observe(kKey, requestsQuota(clock, 5, 0, seconds(1)));
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
  clock.advance(seconds(5));
  // Nobody polled at the reset; the next call sees it: the queued one first, then 3 more.
  int admitted = 0;
  for (int i = 0; i < 6; ++i) {
    if (tracker.admit(kKey, 0, kNoDeadline, [] {}).kind == Kind::Admitted) ++admitted;
  }
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(tracker.queueDepth(), 3u);
}

// --- unknown quota ------------------------------------------------------------------

TEST(QuotaTrackerTest, UnknownQuotaAdmitsOneProbe) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(1), clock);
  const auto probe = tracker.admit(kKey, 0, kNoDeadline, log.waker(0));
  ASSERT_EQ(probe.kind, Kind::Admitted);
  std::vector<uint64_t> queued;
  for (int i = 1; i <= 3; ++i) {
    const auto a = tracker.admit(kKey, 0, clock.now() + seconds(120), log.waker(i));
    ASSERT_EQ(a.kind, Kind::Queued);
    EXPECT_FALSE(a.wake_at) << "the wait is unknown";
    queued.push_back(a.ticket);
  }
  EXPECT_EQ(tracker.poll(queued[0]).kind, Kind::Queued);
  EXPECT_TRUE(log.take().empty());
  // The probe's headers: 3 left, reserve 1 → 2 may go (the probe's answer is in the report).
  tracker.observe(kKey, requestsQuota(clock, 100, 3, seconds(60)));
  // 1 and 2 are admitted; 3 was told "unknown" and is woken to learn its wait.
  EXPECT_EQ(log.take(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(tracker.poll(queued[0]).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(queued[1]).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(queued[2]).kind, Kind::Queued);
}

TEST(QuotaTrackerTest, ProbeWithoutHeadersLetsTheNextProbeGo) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(1), clock);
  const auto probe = tracker.admit(kKey, 0, kNoDeadline, log.waker(0));
  ASSERT_EQ(probe.kind, Kind::Admitted);
  const auto b = tracker.admit(kKey, 0, kNoDeadline, log.waker(1));
  const auto c = tracker.admit(kKey, 0, kNoDeadline, log.waker(2));
  tracker.onAttemptDone(probe.ticket, false);  // connect error: no answer
  EXPECT_EQ(log.take(), (std::vector<int>{1}));
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(c.ticket).kind, Kind::Queued);
}

TEST(QuotaTrackerTest, NoQuotaHeadersMeansUnthrottled) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(1), clock);
  const auto probe = tracker.admit(kKey, 0, kNoDeadline, log.waker(0));
  const auto b = tracker.admit(kKey, 0, kNoDeadline, log.waker(1));
  const auto c = tracker.admit(kKey, 0, kNoDeadline, log.waker(2));
  ASSERT_EQ(b.kind, Kind::Queued);
  tracker.observe(kKey, QuotaObservation{});
  tracker.onAttemptDone(probe.ticket, true);
  EXPECT_EQ(log.take(), (std::vector<int>{1, 2}));
  EXPECT_EQ(tracker.poll(c.ticket).kind, Kind::Admitted);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);
  }
  // Until a quota shows up: a 429 with Retry-After holds the key.
  HeaderMap h429;
  h429.add("retry-after", "2");
  tracker.observe(kKey, observeQuota(h429, 429, clock));
  const auto held = tracker.admit(kKey, 0, kNoDeadline, [] {});
  EXPECT_EQ(held.kind, Kind::Queued);
  EXPECT_EQ(held.wake_at, clock.now() + seconds(2));
}

// --- rejections ---------------------------------------------------------------------

TEST(QuotaTrackerTest, WaitBeyondDeadlineIsRejected) {
  struct Row {
    std::optional<milliseconds> reset_in;  // nullopt: unknown quota (waiting for a probe)
    milliseconds deadline_in;
    Kind expect;
    milliseconds retry_after;
  };
  const Row rows[] = {
      {seconds(5), seconds(2), Kind::Rejected, seconds(5)},
      {seconds(5), seconds(5), Kind::Rejected, seconds(5)},  // released exactly at the deadline
      {seconds(5), milliseconds(5001), Kind::Queued, milliseconds(0)},
      {milliseconds(1500), seconds(60), Kind::Queued, milliseconds(0)},
      {std::nullopt, milliseconds(1), Kind::Queued, milliseconds(0)},  // unknown wait: queue
      {std::nullopt, milliseconds(0), Kind::Rejected, kUnknownQuotaRetryAfter},
  };
  for (const Row& row : rows) {
    ManualClock clock;
    QuotaTracker tracker(makeConfig(0), clock);
    if (row.reset_in) {
      tracker.observe(kKey, requestsQuota(clock, 10, 0, *row.reset_in));
    } else {
      ASSERT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);  // the probe
    }
    const auto a = tracker.admit(kKey, 0, clock.now() + row.deadline_in, [] {});
    const std::string what = "deadline " + std::to_string(row.deadline_in.count()) + "ms";
    EXPECT_EQ(a.kind, row.expect) << what;
    EXPECT_EQ(a.retry_after, row.retry_after) << what;
    if (a.kind == Kind::Rejected) {
      EXPECT_EQ(a.ticket, 0u) << what;
      EXPECT_EQ(tracker.queueDepth(), 0u) << what;
    }
  }
}

TEST(QuotaTrackerTest, LaterResetRejectsQueuedRequestOnPoll) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 10, 0, seconds(2)));
  const auto a = tracker.admit(kKey, 0, clock.now() + seconds(10), log.waker(1));
  ASSERT_EQ(a.kind, Kind::Queued);
  // A 429 pushes the reset past the deadline: the waiter is woken to learn it now.
  HeaderMap h429;
  h429.add("retry-after", "30");
  tracker.observe(kKey, observeQuota(h429, 429, clock));
  EXPECT_EQ(log.take(), (std::vector<int>{1}));
  const auto p = tracker.poll(a.ticket);
  EXPECT_EQ(p.kind, Kind::Rejected);
  EXPECT_EQ(p.retry_after, seconds(30));
  EXPECT_EQ(tracker.queueDepth(), 0u);
  // And the deadline itself passing, for an unknown wait.
  ManualClock clock2;
  QuotaTracker unknown(makeConfig(0), clock2);
  ASSERT_EQ(unknown.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);
  const auto q = unknown.admit(kKey, 0, clock2.now() + seconds(1), [] {});
  ASSERT_EQ(q.kind, Kind::Queued);
  clock2.advance(seconds(1));
  const auto r = unknown.poll(q.ticket);
  EXPECT_EQ(r.kind, Kind::Rejected);
  EXPECT_EQ(r.retry_after, kUnknownQuotaRetryAfter);
}

TEST(QuotaTrackerTest, FullQueueIsRejected) {
  struct Row {
    bool known;
    milliseconds retry_after;
  };
  for (const Row row : {Row{true, seconds(5)}, Row{false, kUnknownQuotaRetryAfter}}) {
    ManualClock clock;
    QuotaTracker tracker(makeConfig(0, 2), clock);
    if (row.known) {
      tracker.observe(kKey, requestsQuota(clock, 10, 0, seconds(5)));
    } else {
      ASSERT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);
    }
    EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
    EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Queued);
    const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
    EXPECT_EQ(a.kind, Kind::Rejected) << row.known;
    EXPECT_EQ(a.retry_after, row.retry_after) << row.known;
    EXPECT_EQ(tracker.queueDepth(), 2u);
    // The queue is per key.
    EXPECT_NE(tracker.admit("other", 0, kNoDeadline, [] {}).kind, Kind::Rejected);
  }
}

TEST(QuotaTrackerTest, AbandonedTicketIsNeverAdmitted) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 1, 0, seconds(1)));
  const auto a = tracker.admit(kKey, 0, kNoDeadline, log.waker(1));
  const auto b = tracker.admit(kKey, 0, kNoDeadline, log.waker(2));
  ASSERT_EQ(a.kind, Kind::Queued);
  ASSERT_EQ(b.kind, Kind::Queued);
  tracker.abandon(a.ticket);
  EXPECT_EQ(tracker.queueDepth(), 1u);
  clock.advance(seconds(1));
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Admitted);  // b got a's place: limit 1
  EXPECT_TRUE(log.take().empty()) << "a's waker never fires";
  const auto gone = tracker.poll(a.ticket);
  EXPECT_EQ(gone.kind, Kind::Rejected);
  EXPECT_EQ(gone.retry_after, milliseconds(0));
  tracker.abandon(a.ticket);  // twice: ignored
  EXPECT_EQ(tracker.queueDepth(), 0u);
}

TEST(QuotaTrackerTest, AbandonedAdmittedTicketGivesItsSlotBack) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 10, 1, seconds(60)));
  const auto a = tracker.admit(kKey, 0, kNoDeadline, log.waker(1));
  ASSERT_EQ(a.kind, Kind::Admitted);
  const auto b = tracker.admit(kKey, 0, kNoDeadline, log.waker(2));
  ASSERT_EQ(b.kind, Kind::Queued);
  tracker.abandon(a.ticket);  // the client left before the attempt was sent
  EXPECT_EQ(log.take(), (std::vector<int>{2}));
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Admitted);
}

// --- 429 and tokens -----------------------------------------------------------------

TEST(QuotaTrackerTest, Upstream429HoldsUntilReset) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(1), clock);
  tracker.observe(kKey, requestsQuota(clock, 100, 50, seconds(60)));
  HeaderMap h429;
  h429.add("retry-after", "2");
  tracker.observe(kKey, observeQuota(h429, 429, clock));
  const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
  ASSERT_EQ(a.kind, Kind::Queued);
  EXPECT_EQ(a.wake_at, clock.now() + seconds(2));
  clock.advance(milliseconds(1999));
  EXPECT_EQ(tracker.poll(a.ticket).kind, Kind::Queued);
  clock.advance(milliseconds(1));
  EXPECT_EQ(tracker.poll(a.ticket).kind, Kind::Admitted);
  // Refilled to the last known limit (100), not to one request.
  EXPECT_EQ(tracker.admit(kKey, 0, kNoDeadline, [] {}).kind, Kind::Admitted);
}

TEST(QuotaTrackerTest, Upstream429OnUnknownLimitProbesAfterReset) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(1), clock);
  const auto probe = tracker.admit(kKey, 0, kNoDeadline, [] {});
  HeaderMap h429;
  h429.add("retry-after-ms", "1500");
  tracker.observe(kKey, observeQuota(h429, 429, clock));
  tracker.onAttemptDone(probe.ticket, true);
  const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
  const auto b = tracker.admit(kKey, 0, kNoDeadline, [] {});
  ASSERT_EQ(a.kind, Kind::Queued);
  EXPECT_EQ(a.wake_at, clock.now() + milliseconds(1500));
  clock.advance(milliseconds(1500));
  // No limit was ever reported: nothing to refill to, so one probe goes again.
  EXPECT_EQ(tracker.poll(a.ticket).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Queued);
}

TEST(QuotaTrackerTest, TokenNeedWaitsForTokenReset) {
  ManualClock clock;
  WakeLog log;
  QuotaTracker tracker(makeConfig(0), clock);
  QuotaObservation obs = requestsQuota(clock, 100, 100, seconds(60));
  obs.tokens = Quota{10000, 1000, clock.now() + seconds(30)};
  tracker.observe(kKey, obs);

  struct Row {
    uint64_t need;
    Kind expect;
  };
  const Row rows[] = {
      {600, Kind::Admitted},  // 1000 left
      {400, Kind::Admitted},  // exactly the 400 left
      {0, Kind::Admitted},    // unknown need: only the request quota applies
      {1, Kind::Queued},      // no token left
      {0, Kind::Queued},      // FIFO: nobody overtakes the queue, whatever its need
  };
  std::vector<uint64_t> tickets;
  for (const Row& row : rows) {
    const auto a =
        tracker.admit(kKey, row.need, kNoDeadline, log.waker(static_cast<int>(row.need)));
    EXPECT_EQ(a.kind, row.expect) << "need " << row.need;
    if (a.kind == Kind::Queued) {
      EXPECT_EQ(a.wake_at, clock.now() + seconds(30)) << "the token reset";
      tickets.push_back(a.ticket);
    }
  }
  clock.advance(seconds(30));
  EXPECT_EQ(tracker.poll(tickets[0]).kind, Kind::Admitted);
  EXPECT_EQ(tracker.poll(tickets[1]).kind, Kind::Admitted);
}

TEST(QuotaTrackerTest, TokenNeedAboveLimitWaitsForFullQuota) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  QuotaObservation obs;
  obs.tokens = Quota{1000, 999, clock.now() + seconds(10)};
  tracker.observe(kKey, obs);
  const auto a = tracker.admit(kKey, 5000, kNoDeadline, [] {});
  ASSERT_EQ(a.kind, Kind::Queued);
  clock.advance(seconds(10));
  EXPECT_EQ(tracker.poll(a.ticket).kind, Kind::Admitted) << "never blocked forever";
}

TEST(QuotaTrackerTest, TokensChargedUntilAnswered) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  QuotaObservation obs;
  obs.tokens = Quota{10000, 1000, clock.now() + seconds(30)};
  tracker.observe(kKey, obs);
  const auto a = tracker.admit(kKey, 500, kNoDeadline, [] {});
  const auto b = tracker.admit(kKey, 500, kNoDeadline, [] {});
  ASSERT_EQ(b.kind, Kind::Admitted);
  // a's answer: the upstream saw only a's 500. b is unanswered: still charged.
  obs.tokens->remaining = 500;
  tracker.observe(kKey, obs);
  tracker.onAttemptDone(a.ticket, true);
  EXPECT_EQ(tracker.admit(kKey, 100, kNoDeadline, [] {}).kind, Kind::Queued);
}

// --- threads, wakers, memory ------------------------------------------------------------

TEST(QuotaTrackerTest, WakerMayCallBackIntoTracker) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe(kKey, requestsQuota(clock, 5, 0, seconds(1)));
  std::vector<Kind> seen;
  size_t depth_seen = 99;
  uint64_t ticket = 0;
  const auto a = tracker.admit(kKey, 0, kNoDeadline, [&] {
    // Would deadlock if invoked under the tracker's lock.
    seen.push_back(tracker.poll(ticket).kind);
    depth_seen = tracker.queueDepth();
  });
  ASSERT_EQ(a.kind, Kind::Queued);
  ticket = a.ticket;
  const auto b = tracker.admit(kKey, 0, kNoDeadline, [] {});
  clock.advance(seconds(1));
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Admitted);  // releases a too, waking it
  EXPECT_EQ(seen, (std::vector<Kind>{Kind::Admitted}));
  EXPECT_EQ(depth_seen, 0u);
}

TEST(QuotaTrackerTest, IdleKeysAreForgotten) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  tracker.observe("idle", requestsQuota(clock, 10, 5, seconds(30)));
  const auto busy = tracker.admit("busy", 0, kNoDeadline, [] {});
  ASSERT_EQ(busy.kind, Kind::Admitted);  // in flight for the whole test
  EXPECT_EQ(tracker.keyCount(), 2u);
  clock.advance(seconds(30) + minutes(9));
  tracker.admit("x", 0, kNoDeadline, [] {});
  EXPECT_EQ(tracker.keyCount(), 3u) << "not yet 10 minutes past the reset";
  clock.advance(minutes(2));
  tracker.observe("y", QuotaObservation{});
  EXPECT_EQ(tracker.keyCount(), 3u) << "idle forgotten; busy, x (in flight), y kept";
  // A forgotten key is unknown again: one probe.
  EXPECT_EQ(tracker.admit("idle", 0, kNoDeadline, [] {}).kind, Kind::Admitted);
  EXPECT_EQ(tracker.admit("idle", 0, kNoDeadline, [] {}).kind, Kind::Queued);
}

// A ticket refers to its key's state, not its name (no copy of the name per
// ticket): every ticket keeps its key from the sweep, an Expired one (its
// deadline passed in the queue) until it is polled or abandoned.
TEST(QuotaTrackerTest, AnExpiredTicketKeepsItsKeyUntilPolledOrAbandoned) {
  for (const bool poll : {true, false}) {
    ManualClock clock;
    WakeLog log;
    QuotaTracker tracker(makeConfig(0), clock);
    tracker.observe(kKey, requestsQuota(clock, 10, 0, seconds(10)));
    const auto queued = tracker.admit(kKey, 0, clock.now() + seconds(20), log.waker(1));
    ASSERT_EQ(queued.kind, Kind::Queued);
    clock.advance(seconds(30));  // past the reset and the queued ticket's deadline
    const auto next = tracker.admit(kKey, 0, kNoDeadline, [] {});
    ASSERT_EQ(next.kind, Kind::Admitted);
    EXPECT_EQ(log.take(), (std::vector<int>{1})) << "the expired ticket is woken";
    tracker.onAttemptDone(next.ticket, false);
    EXPECT_EQ(tracker.queueDepth(), 0u);
    EXPECT_EQ(tracker.gaugeValues().queue_depth, 0u);

    clock.advance(minutes(11));
    tracker.observe("other", QuotaObservation{});  // sweeps
    EXPECT_EQ(tracker.keyCount(), 2u) << "the expired ticket keeps its key";
    if (poll) {
      const auto p = tracker.poll(queued.ticket);
      EXPECT_EQ(p.kind, Kind::Rejected);
      EXPECT_EQ(p.retry_after, kUnknownQuotaRetryAfter);
    } else {
      tracker.abandon(queued.ticket);
    }
    EXPECT_EQ(tracker.poll(queued.ticket).kind, Kind::Rejected) << "gone";
    clock.advance(minutes(11));
    tracker.observe("other", QuotaObservation{});
    EXPECT_EQ(tracker.keyCount(), 1u) << "then the idle key is forgotten";
  }
}

TEST(QuotaTrackerTest, GaugeValuesAreTheTrackersValues) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  auto values = tracker.gaugeValues();
  EXPECT_EQ(values.queue_depth, 0u);
  EXPECT_FALSE(values.remaining_requests);
  EXPECT_FALSE(values.remaining_tokens);
  QuotaObservation obs = requestsQuota(clock, 100, 0, seconds(5));
  obs.tokens = Quota{1000, 0, std::nullopt};
  tracker.observe(kKey, obs);
  const auto a = tracker.admit(kKey, 0, kNoDeadline, [] {});
  const auto b = tracker.admit(kKey, 0, kNoDeadline, [] {});
  ASSERT_EQ(a.kind, Kind::Queued);
  ASSERT_EQ(b.kind, Kind::Queued);
  values = tracker.gaugeValues();
  EXPECT_EQ(values.queue_depth, 2u);
  EXPECT_EQ(values.queue_depth, tracker.queueDepth());
  EXPECT_EQ(values.remaining_requests, 0);
  EXPECT_EQ(values.remaining_tokens, 0);
  tracker.abandon(a.ticket);
  EXPECT_EQ(tracker.gaugeValues().queue_depth, 1u);
  clock.advance(seconds(6));  // a new window
  tracker.observe(kKey, requestsQuota(clock, 100, 7, seconds(5)));
  values = tracker.gaugeValues();
  EXPECT_EQ(values.queue_depth, 0u) << "admitted";
  EXPECT_EQ(values.remaining_requests, 7);
  EXPECT_EQ(values.remaining_tokens, 0) << "not reported again: the last one stays";
  EXPECT_EQ(tracker.poll(b.ticket).kind, Kind::Admitted);
}

TEST(QuotaTrackerTest, LastRemainingForGauge) {
  ManualClock clock;
  QuotaTracker tracker(makeConfig(0), clock);
  EXPECT_FALSE(tracker.lastRemaining(false));
  EXPECT_FALSE(tracker.lastRemaining(true));
  QuotaObservation obs = requestsQuota(clock, 100, 42, seconds(1));
  obs.tokens = Quota{1000, 777, std::nullopt};
  tracker.observe("a", obs);
  tracker.observe("b", requestsQuota(clock, 100, 41, seconds(1)));
  EXPECT_EQ(tracker.lastRemaining(false), 41);
  EXPECT_EQ(tracker.lastRemaining(true), 777);
}

// Four threads admit, poll, abandon, send to a fake fixed-window upstream and
// feed its answers back. Invariants: no
// upstream window ever receives more than limit - reserve requests, and every
// ticket ends exactly once (admitted, rejected or abandoned). Every thread
// moves the clock now and then, so simulated time advances however the
// threads are scheduled.
TEST(QuotaTrackerStressTest, FourThreads) {
  constexpr int64_t kLimit = 12;
  constexpr int64_t kReserve = 2;
  constexpr milliseconds kWindow{100};
  constexpr int kThreads = 4;
  constexpr int kIterations = 4000;

  ManualClock clock;
  QuotaTracker tracker(makeConfig(kReserve, 40), clock);
  const MonotonicTime origin = clock.now();

  std::mutex upstream_mutex;
  std::map<int64_t, int64_t> sent_per_window;
  const auto send = [&]() {
    std::lock_guard lock(upstream_mutex);
    const int64_t window = (clock.now() - origin) / kWindow;
    const int64_t count = ++sent_per_window[window];
    QuotaObservation obs;
    obs.requests =
        Quota{kLimit, std::max<int64_t>(kLimit - count, 0), origin + kWindow * (window + 1)};
    return obs;
  };

  std::mutex ends_mutex;
  std::map<uint64_t, std::string> ends;
  std::set<uint64_t> issued;
  int duplicate_ends = 0;
  std::atomic<int> rejected_at_admit{0};
  const auto end = [&](uint64_t ticket, const char* how) {
    std::lock_guard lock(ends_mutex);
    if (!ends.emplace(ticket, how).second) ++duplicate_ends;
  };
  const auto issue = [&](uint64_t ticket) {
    std::lock_guard lock(ends_mutex);
    issued.insert(ticket);
  };

  struct Pending {
    uint64_t ticket;
    std::shared_ptr<std::atomic<bool>> woken;
    std::optional<MonotonicTime> wake_at;
  };
  const auto attempt = [&](uint64_t ticket, std::mt19937& rng) {
    end(ticket, "admitted");
    if (rng() % 10 == 0) {
      tracker.onAttemptDone(ticket, false);  // connect error: never reached the upstream
      return;
    }
    const QuotaObservation obs = send();
    tracker.observe(kKey, obs);
    tracker.onAttemptDone(ticket, true);
  };
  const auto pollOne = [&](Pending& p, std::mt19937& rng) -> bool {  // true = finished
    p.woken->store(false);
    const auto r = tracker.poll(p.ticket);
    if (r.kind == Kind::Admitted) {
      attempt(p.ticket, rng);
      return true;
    }
    if (r.kind == Kind::Rejected) {
      end(p.ticket, "rejected");
      return true;
    }
    p.wake_at = r.wake_at;
    return false;
  };

  std::vector<std::vector<Pending>> leftovers(kThreads);
  std::atomic<int> finished_main_loop{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<Pending>& pending = leftovers[t];
      for (int i = 0; i < kIterations; ++i) {
        if (rng() % 8 == 0) clock.advance(milliseconds(rng() % 25));  // every thread moves time
        const unsigned action = rng() % 10;
        if (action < 5) {
          auto woken = std::make_shared<std::atomic<bool>>(false);
          const MonotonicTime deadline =
              rng() % 3 == 0 ? clock.now() + milliseconds(rng() % 300) : kNoDeadline;
          const auto a = tracker.admit(kKey, 0, deadline, [woken] { woken->store(true); });
          if (a.kind == Kind::Rejected) {
            EXPECT_EQ(a.ticket, 0u);
            ++rejected_at_admit;
            continue;
          }
          issue(a.ticket);
          if (a.kind == Kind::Admitted) {
            attempt(a.ticket, rng);
          } else {
            pending.push_back({a.ticket, woken, a.wake_at});
          }
        } else if (action < 9) {
          const MonotonicTime now = clock.now();
          for (size_t j = 0; j < pending.size();) {
            Pending& p = pending[j];
            const bool due = p.woken->load() || (p.wake_at && *p.wake_at <= now) || rng() % 4 == 0;
            if (due && pollOne(p, rng)) {
              pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(j));
            } else {
              ++j;
            }
          }
        } else if (!pending.empty()) {
          const size_t j = rng() % pending.size();
          tracker.abandon(pending[j].ticket);
          end(pending[j].ticket, "abandoned");
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(j));
        }
      }
      // Like an event loop, keep serving this thread's waiters until they finish
      // (a granted ticket nobody polls holds its quota slot). Time only moves
      // once every thread is here, so it does not run ahead of busy threads.
      ++finished_main_loop;
      for (int round = 0; !pending.empty() && round < 100000;) {
        if (finished_main_loop.load() == kThreads) {
          clock.advance(kWindow / 10);
          ++round;
        }
        std::this_thread::yield();
        for (size_t j = 0; j < pending.size();) {
          if (pollOne(pending[j], rng)) {
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(j));
          } else {
            ++j;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();

  size_t rest = 0;
  for (const auto& p : leftovers) rest += p.size();
  EXPECT_EQ(rest, 0u) << "tickets never finished";
  EXPECT_EQ(tracker.queueDepth(), 0u);

  EXPECT_EQ(duplicate_ends, 0);
  EXPECT_EQ(ends.size(), issued.size());
  for (const uint64_t ticket : issued) EXPECT_TRUE(ends.count(ticket)) << ticket;
  int64_t total_sent = 0;
  int64_t busiest = 0;
  for (const auto& [window, count] : sent_per_window) {
    EXPECT_LE(count, kLimit - kReserve) << "window " << window;
    total_sent += count;
    busiest = std::max(busiest, count);
  }
  // The test exercised what it claims to: real traffic, real saturation, all outcomes.
  // (How much gets through depends on scheduling: a descheduled thread's granted
  // tickets hold their slots while others move the clock. Hence a low floor.)
  EXPECT_GE(total_sent, 3 * kLimit);
  EXPECT_EQ(busiest, kLimit - kReserve);
  EXPECT_GT(rejected_at_admit.load(), 0);
  int abandoned = 0;
  int rejected = 0;
  for (const auto& [ticket, how] : ends) {
    abandoned += how == "abandoned";
    rejected += how == "rejected";
  }
  EXPECT_GT(abandoned, 0);
  EXPECT_GT(rejected, 0);
}

// --- regression: fixed-window provider, many queued tickets across resets -------

namespace window_sim {

// Go-style duration as mock-llm / OpenAI print it: "20ms", "1.996s", "2s".
std::string goDuration(milliseconds d) {
  if (d < seconds(1)) return std::to_string(d.count()) + "ms";
  std::string s = std::to_string(d.count() / 1000);
  int64_t frac = d.count() % 1000;
  if (frac != 0) {
    std::string f = std::to_string(1000 + frac).substr(1);
    while (!f.empty() && f.back() == '0') f.pop_back();
    s += "." + f;
  }
  return s + "s";
}

// A discrete-event simulation of the throttle filter in front of mock-llm's fixed-window
// quota (the window starts at the key's first request and resets every `window` exactly),
// on a ManualClock. Each request's headers are computed at the provider when it arrives and
// reach sluice `latency` later, so every report's reset is jittered by that latency.
struct Result {
  int admitted = 0;
  int provider_429s = 0;
  int max_per_window = 0;
  milliseconds last_admit{0};  // after the start
  std::vector<std::string> trace;
};

Result run(int tickets, int64_t limit, milliseconds window, std::vector<milliseconds> latencies,
           milliseconds net, milliseconds timer_slack) {
  ManualClock clock;
  const MonotonicTime start = clock.now();
  QuotaTracker tracker(makeConfig(/*reserve=*/0, /*max_queue=*/100), clock);
  const MonotonicTime deadline = start + seconds(15);

  struct Event {
    MonotonicTime at;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  uint64_t seq = 0;
  const auto at = [&](MonotonicTime t, std::function<void()> fn) {
    events.push(Event{t, seq++, std::move(fn)});
  };

  Result result;
  std::optional<MonotonicTime> window_start;  // provider side
  std::map<int64_t, int> used;                // provider: admitted per window index
  size_t sent = 0;

  struct Req {
    uint64_t ticket = 0;
    bool queued = false;
    bool done = false;
    uint64_t timer_gen = 0;
  };
  std::vector<Req> reqs(tickets);

  std::function<void(int, QuotaTracker::Admission)> apply;
  std::function<void(int)> poll = [&](int i) {
    if (!reqs[i].queued) return;
    apply(i, tracker.poll(reqs[i].ticket));
  };
  const auto send = [&](int i) {
    const milliseconds latency = latencies[sent++ % latencies.size()];
    const uint64_t ticket = reqs[i].ticket;
    at(clock.now() + net, [&, i, latency, ticket] {
      // The provider receives it.
      const MonotonicTime now = clock.now();
      if (!window_start) window_start = now;
      const int64_t index = (now - *window_start) / window;
      const MonotonicTime end = *window_start + window * (index + 1);
      const bool ok = used[index] < limit;
      if (ok) {
        ++used[index];
        result.max_per_window = std::max(result.max_per_window, used[index]);
      } else {
        ++result.provider_429s;
      }
      const int64_t remaining = limit - used[index];
      milliseconds reset_in = ceil<milliseconds>(end - now);
      if (reset_in <= milliseconds(0)) reset_in = milliseconds(1);
      HeaderMap headers;
      headers.add("x-ratelimit-limit-requests", std::to_string(limit));
      headers.add("x-ratelimit-remaining-requests", std::to_string(remaining));
      headers.add("x-ratelimit-reset-requests", goDuration(reset_in));
      const int status = ok ? 200 : 429;
      at(now + latency, [&, i, ticket, headers, status] {
        tracker.observe(ticket, observeQuota(headers, status, clock));  // as the filter does
        tracker.onAttemptDone(ticket, true);
        reqs[i].done = true;
      });
    });
  };
  apply = [&](int i, QuotaTracker::Admission a) {
    Req& r = reqs[i];
    ++r.timer_gen;  // disarm
    const auto ms =
        a.wake_at ? duration_cast<milliseconds>(*a.wake_at - clock.now()).count() : -999;
    result.trace.push_back(
        std::to_string(duration_cast<milliseconds>(clock.now() - start).count()) +
        "ms ticket=" + std::to_string(a.ticket) +
        " kind=" + std::to_string(static_cast<int>(a.kind)) + " wake=" + std::to_string(ms));
    switch (a.kind) {
      case Kind::Admitted:
        r.queued = false;
        r.ticket = a.ticket;
        ++result.admitted;
        result.last_admit = duration_cast<milliseconds>(clock.now() - start);
        send(i);
        break;
      case Kind::Rejected:
        r.queued = false;
        break;
      case Kind::Queued:
        r.queued = true;
        r.ticket = a.ticket;
        if (a.wake_at) {
          const uint64_t gen = r.timer_gen;
          // Event loops fire timers a little late, at ms granularity.
          at(std::max(*a.wake_at, clock.now()) + timer_slack, [&, i, gen] {
            if (reqs[i].timer_gen == gen) poll(i);
          });
        }
        break;
    }
  };

  for (int i = 0; i < tickets; ++i) {
    at(start + milliseconds(i), [&, i] {
      apply(i, tracker.admit(kKey, 0, deadline, [&, i] {
        at(clock.now(), [&, i] { poll(i); });  // posted to the event loop
      }));
    });
  }
  while (!events.empty()) {
    Event e = events.top();
    events.pop();
    if (e.at > start + seconds(30)) break;
    if (e.at > clock.now()) clock.advance(e.at - clock.now());
    e.fn();
  }
  return result;
}

}  // namespace window_sim

TEST(QuotaTrackerTest, FixedWindowReleasesEveryQueuedTicketAcrossResets) {
  // The integration scenario: 12 agents, 3 requests per 2 s, reserve 0; the provider's
  // reports reach sluice after varying latencies, so each report's reset differs by a few ms.
  struct Case {
    std::vector<milliseconds> latencies;
    milliseconds net;
    milliseconds slack;
  };
  const std::vector<Case> cases = {
      {{milliseconds(4)}, milliseconds(0), milliseconds(0)},
      {{milliseconds(4), milliseconds(9), milliseconds(2), milliseconds(7)},
       milliseconds(1),
       milliseconds(1)},
      {{milliseconds(30), milliseconds(3), milliseconds(12)}, milliseconds(1), milliseconds(0)},
      {{milliseconds(3), milliseconds(25), milliseconds(8), milliseconds(15), milliseconds(1)},
       milliseconds(0),
       milliseconds(1)},
      {{milliseconds(50), milliseconds(5), milliseconds(120), milliseconds(20)},
       milliseconds(1),
       milliseconds(2)},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto r = window_sim::run(12, 3, milliseconds(2000), cases[c].latencies, cases[c].net,
                                   cases[c].slack);
    std::string trace;
    for (const auto& line : r.trace) trace += line + "\n";
    EXPECT_EQ(r.admitted, 12) << "case " << c << "\n" << trace;
    EXPECT_EQ(r.provider_429s, 0) << "case " << c << "\n" << trace;
    EXPECT_LE(r.max_per_window, 3) << "case " << c << "\n" << trace;
    // Windows at 0, 2, 4 and 6 s: everyone is sent within 4 windows.
    EXPECT_LT(r.last_admit, milliseconds(8000)) << "case " << c << "\n" << trace;
  }
}

}  // namespace
}  // namespace sluice
