#include "filters/throttle/quota_tracker.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

namespace sluice {

namespace {

using std::chrono::milliseconds;

// Token needs are estimates; clamp them so sums of many cannot overflow.
constexpr int64_t kMaxTokenNeed = int64_t{1} << 40;

// How often (at most) idle keys are swept.
constexpr std::chrono::minutes kSweepInterval{1};
// How much later than the window's known reset a report of the same window
// may say it resets: a relative reset is rounded up to its header's
// resolution ("1.997s": a millisecond), so two answers of one window can
// differ by that much. Only a report resetting later than this is a later
// window. (Headers with a resolution of a second — `x-ratelimit-reset: 2`,
// `RateLimit` t=, Anthropic's RFC 3339 times — can still differ by more;
// windows of a few milliseconds stay apart.)
constexpr std::chrono::milliseconds kResetResolution{1};

milliseconds retryAfterFor(const std::optional<MonotonicTime>& wait, MonotonicTime now) {
  if (!wait) return kUnknownQuotaRetryAfter;
  if (*wait <= now) return milliseconds(0);
  return std::chrono::ceil<milliseconds>(*wait - now);
}

// The wait ends at or after the deadline (or the deadline already passed).
bool missesDeadline(const std::optional<MonotonicTime>& wait, MonotonicTime deadline,
                    MonotonicTime now) {
  return now >= deadline || (wait && *wait >= deadline);
}

using Admission = QuotaTracker::Admission;

Admission rejected(milliseconds retry_after) {
  return {Admission::Kind::Rejected, 0, std::nullopt, retry_after};
}
Admission admitted(uint64_t ticket) {
  return {Admission::Kind::Admitted, ticket, std::nullopt, milliseconds(0)};
}
Admission queued(uint64_t ticket, std::optional<MonotonicTime> wake_at) {
  return {Admission::Kind::Queued, ticket, wake_at, milliseconds(0)};
}

}  // namespace

namespace detail {

std::array<uint64_t, 2> sipHash128(const std::array<uint64_t, 2>& key, std::string_view data) {
  const auto rotl = [](uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  uint64_t v0 = key[0] ^ 0x736f6d6570736575ULL;
  uint64_t v1 = key[1] ^ 0x646f72616e646f6dULL ^ 0xee;
  uint64_t v2 = key[0] ^ 0x6c7967656e657261ULL;
  uint64_t v3 = key[1] ^ 0x7465646279746573ULL;
  const auto round = [&] {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  };
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const size_t whole = data.size() / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) {
    uint64_t m = 0;
    for (int b = 7; b >= 0; --b) m = (m << 8) | p[i + b];  // little-endian
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(data.size()) << 56;
  for (size_t i = whole; i < data.size(); ++i) last |= uint64_t{p[i]} << (8 * (i - whole));
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xee;
  for (int i = 0; i < 4; ++i) round();
  const uint64_t out0 = v0 ^ v1 ^ v2 ^ v3;
  v1 ^= 0xdd;
  for (int i = 0; i < 4; ++i) round();
  return {out0, v0 ^ v1 ^ v2 ^ v3};
}

std::string digestQuotaKey(std::string_view value) {
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the provider up on
  // every call, 40% of this function's cost (PROFILE.md). Immutable, and
  // reachable until exit.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  // One digest context per thread, reused: EVP_Digest allocates and frees
  // one (and its provider state) per call (PROFILE.md, sixth round).
  struct DigestContext {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~DigestContext() { EVP_MD_CTX_free(ctx); }
  };
  thread_local DigestContext context;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  if (sha256 == nullptr || context.ctx == nullptr ||
      EVP_DigestInit_ex2(context.ctx, sha256, nullptr) != 1 ||
      EVP_DigestUpdate(context.ctx, value.data(), value.size()) != 1 ||
      EVP_DigestFinal_ex(context.ctx, digest, &digest_len) != 1 || digest_len < 8) {
    return "-";  // cannot happen with a working OpenSSL; never fall back to the raw value
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key(16, '0');
  for (size_t i = 0; i < 8; ++i) {
    key[2 * i] = kHex[digest[i] >> 4];
    key[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return key;
}

}  // namespace detail

namespace {

// The per-process secret of the quota key cache's MAC; nullopt when no
// random bytes could be had (then nothing is cached).
std::optional<std::array<uint64_t, 2>> makeQuotaKeySecret() {
  std::array<uint64_t, 2> secret{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()), sizeof secret) != 1) {
    return std::nullopt;
  }
  return secret;
}

// A thread's recently made quota keys, by a keyed MAC of the header value
// (SipHash-2-4-128 under a per-process random secret): the raw value is not
// kept, only its MAC and the key (which is already derived from its SHA-256
// and harmless to hold). A SHA-256 per request was 3.2k of the throttle's
// 9.3k instructions (PROFILE.md, seventh round); SipHash of an API key is a
// few hundred. Direct-mapped: a clash just replaces the slot.
struct QuotaKeySlot {
  std::array<uint64_t, 2> mac;
  char key[16];
  bool used;
};
constexpr size_t kQuotaKeySlots = 64;

}  // namespace

std::string quotaKeyFor(const config::RateLimitConfig& config, const HeaderMap& request_headers) {
  if (config.key.kind == config::RateLimitKey::Kind::None) return "";
  const auto value = request_headers.get(config.key.header);
  if (!value) return "-";
  static const std::optional<std::array<uint64_t, 2>> secret = makeQuotaKeySecret();
  if (!secret) return detail::digestQuotaKey(*value);
  thread_local std::array<QuotaKeySlot, kQuotaKeySlots> slots{};
  const std::array<uint64_t, 2> mac = detail::sipHash128(*secret, *value);
  QuotaKeySlot& slot = slots[mac[0] % kQuotaKeySlots];
  if (slot.used && slot.mac == mac) return std::string(slot.key, sizeof slot.key);
  std::string key = detail::digestQuotaKey(*value);
  if (key.size() == sizeof slot.key) {
    slot.mac = mac;
    std::memcpy(slot.key, key.data(), sizeof slot.key);
    slot.used = true;
  }
  return key;
}

QuotaTracker::QuotaTracker(const config::RateLimitConfig& config, const Clock& clock)
    : config_(config), clock_(clock), last_sweep_(clock.now()) {}

// --- admission rules ----------------------------------------------------------

int64_t QuotaTracker::reserveFor(const QuotaState& quota) const {
  const int64_t reserve = std::max<int64_t>(config_.reserve, 0);
  // A quota no larger than the reserve would never admit anything: keep one slot.
  return quota.limit > 0 ? std::min(reserve, quota.limit - 1) : reserve;
}

int64_t QuotaTracker::tokenNeed(const KeyState& key, int64_t need) const {
  // A need above the whole limit could never fit: it waits for a full quota instead.
  return key.tokens.limit > 0 ? std::min(need, key.tokens.limit) : need;
}

bool QuotaTracker::fitsLocked(const KeyState& key, int64_t need) const {
  return !key.held_until && fitsQuotaLocked(key, need);
}

bool QuotaTracker::fitsQuotaLocked(const KeyState& key, int64_t need) const {
  if (!key.requests.known && !key.tokens.known) return key.unthrottled;
  if (key.requests.known &&
      key.requests.remaining - key.requests.charged <= reserveFor(key.requests)) {
    return false;
  }
  if (key.tokens.known && need > 0 &&
      tokenNeed(key, need) > key.tokens.remaining - key.tokens.charged) {
    return false;
  }
  return true;
}

std::optional<MonotonicTime> QuotaTracker::waitUntilLocked(const KeyState& key, int64_t need,
                                                           MonotonicTime now) const {
  auto wait = quotaWaitLocked(key, need, now);
  if (wait && key.held_until) wait = std::max(*wait, *key.held_until);
  return wait;
}

std::optional<MonotonicTime> QuotaTracker::quotaWaitLocked(const KeyState& key, int64_t need,
                                                           MonotonicTime now) const {
  if (fitsQuotaLocked(key, need)) return now;
  if (!key.requests.known && !key.tokens.known) return std::nullopt;  // waiting for a probe
  MonotonicTime until = now;
  const auto blockedBy = [&](const QuotaState& quota) -> bool {
    if (!quota.reset_at) return false;
    until = std::max(until, *quota.reset_at);
    return true;
  };
  if (key.requests.known &&
      key.requests.remaining - key.requests.charged <= reserveFor(key.requests) &&
      !blockedBy(key.requests)) {
    return std::nullopt;
  }
  if (key.tokens.known && need > 0 &&
      tokenNeed(key, need) > key.tokens.remaining - key.tokens.charged && !blockedBy(key.tokens)) {
    return std::nullopt;
  }
  return until;
}

bool QuotaTracker::canProbeLocked(const KeyState& key, int64_t need, MonotonicTime now) const {
  // Only when nothing could bring news otherwise: no known reset, nothing awaiting an answer.
  return key.unanswered == 0 && !waitUntilLocked(key, need, now);
}

std::optional<MonotonicTime> QuotaTracker::ticketWaitLocked(const KeyState& key,
                                                            const Ticket& ticket,
                                                            MonotonicTime now) const {
  // Strict FIFO: nobody goes before the head, so the wait is at least the head's.
  auto wait = waitUntilLocked(key, ticket.token_need, now);
  if (!key.queue.empty() && wait) {
    const auto head = tickets_.find(key.queue.front());
    if (head != tickets_.end()) {
      const auto head_wait = waitUntilLocked(key, head->second.token_need, now);
      if (!head_wait) return std::nullopt;
      wait = std::max(*wait, *head_wait);
    }
  }
  return wait;
}

// --- state changes ------------------------------------------------------------

void QuotaTracker::refreshLocked(KeyState& key, MonotonicTime now) {
  if (key.held_until && now >= *key.held_until) key.held_until.reset();
  const auto refill = [&](QuotaState& quota, int64_t in_flight) {
    if (!quota.known || !quota.reset_at || now < *quota.reset_at) return;
    quota.window_end = quota.reset_at;
    quota.reset_at.reset();
    if (quota.limit > 0) {
      quota.remaining = quota.limit;
      // Requests sent before the reset and still unanswered may count in the new window.
      quota.charged = in_flight;
    } else {
      quota.known = false;  // nothing to refill to: learn it again (a probe, for requests)
    }
  };
  refill(key.requests, key.unanswered);
  refill(key.tokens, key.unanswered_tokens);
}

void QuotaTracker::grantLocked(KeyState& key, Ticket& ticket) {
  ticket.state = Ticket::State::Admitted;
  ticket.granted_at = clock_.now();
  key.in_flight += 1;
  key.unanswered += 1;
  key.unanswered_tokens += ticket.token_need;
  key.requests.charged += 1;
  key.tokens.charged += ticket.token_need;
}

void QuotaTracker::releaseLocked(KeyState& key, MonotonicTime now, uint64_t caller,
                                 Wakers& wakers) {
  while (!key.queue.empty()) {
    const uint64_t id = key.queue.front();
    auto it = tickets_.find(id);
    if (it == tickets_.end()) {  // defensive: never expected
      key.queue.pop_front();
      --queued_;
      continue;
    }
    Ticket& ticket = it->second;
    if (now >= ticket.deadline) {
      // Do not spend quota on a request whose budget is gone; its poll() rejects it.
      key.queue.pop_front();
      --queued_;
      expireLocked(ticket);
      if (id != caller && ticket.waker) wakers.push_back(ticket.waker);
      continue;
    }
    if (!fitsLocked(key, ticket.token_need) && !canProbeLocked(key, ticket.token_need, now)) {
      break;
    }
    key.queue.pop_front();
    --queued_;
    grantLocked(key, ticket);
    if (id != caller && ticket.waker) wakers.push_back(ticket.waker);
  }
}

void QuotaTracker::removeFromQueueLocked(KeyState& key, uint64_t ticket) {
  const auto it = std::find(key.queue.begin(), key.queue.end(), ticket);
  if (it == key.queue.end()) return;
  key.queue.erase(it);
  --queued_;
}

bool QuotaTracker::applyQuota(QuotaState& state, const Quota& reported, MonotonicTime now,
                              MonotonicTime sent_at, int64_t unanswered) {
  if (reported.limit > 0) state.limit = reported.limit;
  const auto& reset = reported.reset_at;
  // The reset was parsed on arrival; the upstream took the report at some point
  // after the request was sent, so its real reset may be up to that long earlier.
  std::optional<MonotonicTime> earliest = reset;
  if (reset && sent_at < now) earliest = *reset - (now - sent_at);
  // A report about a window that is already over (or possibly the one we
  // refilled after) must not lower the refilled quota: it is an old response
  // arriving late. Dropping a new window's report here is safe: the refill
  // already counts every request sent since.
  if (state.known && reset && *reset <= now) return false;
  if (state.window_end && earliest && *earliest <= *state.window_end + kResetResolution) {
    return false;
  }
  // Within one window remaining only goes down: more than last time = an older
  // report. Unless it is surely a later window, keep the lower count: at worst
  // it holds requests until the known reset, when the refill catches up.
  if (state.known && state.reset_at && reported.remaining > state.remaining &&
      (!earliest || *earliest <= *state.reset_at + kResetResolution)) {
    return false;
  }
  state.known = true;
  state.remaining = reported.remaining;
  if (reset) {
    // Possibly the same window, seen through a jittered report (its send time
    // is known): keep the latest estimate of its reset, so a late report of an
    // older window cannot bring the refill forward. Without a send time the
    // report is taken as the upstream's latest word (e.g. a 429's Retry-After).
    if (sent_at < now && state.reset_at && earliest &&
        *earliest <= *state.reset_at + kResetResolution) {
      state.reset_at = std::max(*state.reset_at, *reset);
    } else {
      state.reset_at = reset;
    }
  }
  state.charged = unanswered;
  return true;
}

void QuotaTracker::wakeChangedLocked(KeyState& key, MonotonicTime now, Wakers& wakers) {
  // A queued ticket was told when to poll again (or that it cannot know yet).
  // When its wait became known or earlier, wake it to learn the new time.
  for (const uint64_t id : key.queue) {
    const auto it = tickets_.find(id);
    if (it == tickets_.end()) continue;
    Ticket& ticket = it->second;
    const auto wait = ticketWaitLocked(key, ticket, now);
    if (!wait) continue;
    if (!ticket.told_wake || *wait < *ticket.told_wake) {
      ticket.told_wake = wait;
      if (ticket.waker) wakers.push_back(ticket.waker);
    }
  }
}

QuotaTracker::Admission QuotaTracker::queuedLocked(Ticket& ticket, uint64_t id,
                                                   std::optional<MonotonicTime> wait) {
  ticket.told_wake = wait;
  return queued(id, wait);
}

void QuotaTracker::maybeSweepLocked(MonotonicTime now) {
  if (now - last_sweep_ < kSweepInterval) return;
  last_sweep_ = now;
  for (auto it = keys_.begin(); it != keys_.end();) {
    const KeyState& key = it->second;
    MonotonicTime idle_since = key.last_active;
    if (key.requests.reset_at) idle_since = std::max(idle_since, *key.requests.reset_at);
    if (key.tokens.reset_at) idle_since = std::max(idle_since, *key.tokens.reset_at);
    // (No ticket refers to a key swept here: see Ticket::key.)
    if (key.queue.empty() && key.in_flight == 0 && key.expired == 0 &&
        now - idle_since > kQuotaKeyIdleExpiry) {
      it = keys_.erase(it);
    } else {
      ++it;
    }
  }
}

void QuotaTracker::expireLocked(Ticket& ticket) {
  ticket.state = Ticket::State::Expired;
  ticket.key->expired += 1;
}

void QuotaTracker::eraseTicketLocked(std::unordered_map<uint64_t, Ticket>::iterator it) {
  if (it->second.state == Ticket::State::Expired) it->second.key->expired -= 1;
  tickets_.erase(it);
}

void QuotaTracker::wakeAll(Wakers& wakers) {
  for (auto& waker : wakers) waker();
}

// --- the public API -------------------------------------------------------------

QuotaTracker::Admission QuotaTracker::admit(const std::string& key_name, uint64_t token_need,
                                            MonotonicTime deadline, Waker waker) {
  Wakers wakers;
  Admission result = rejected(milliseconds(0));
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    maybeSweepLocked(now);
    KeyState& key = keys_[key_name];
    key.last_active = now;
    refreshLocked(key, now);
    releaseLocked(key, now, 0, wakers);  // a reset may have passed with nobody polling

    const int64_t need =
        static_cast<int64_t>(std::min<uint64_t>(token_need, static_cast<uint64_t>(kMaxTokenNeed)));
    Ticket ticket{&key, need, deadline, std::move(waker), Ticket::State::Queued, {}, {}};
    if (key.queue.empty() && (fitsLocked(key, need) || canProbeLocked(key, need, now))) {
      const uint64_t id = next_ticket_++;
      grantLocked(key, ticket);
      tickets_.emplace(id, std::move(ticket));
      result = admitted(id);
    } else {
      const auto wait = ticketWaitLocked(key, ticket, now);
      if (key.queue.size() >= config_.max_queue || missesDeadline(wait, deadline, now)) {
        result = rejected(retryAfterFor(wait, now));
      } else {
        const uint64_t id = next_ticket_++;
        auto& stored = tickets_.emplace(id, std::move(ticket)).first->second;
        key.queue.push_back(id);
        ++queued_;
        result = queuedLocked(stored, id, wait);
      }
    }
  }
  wakeAll(wakers);
  return result;
}

bool QuotaTracker::admitsNow(const std::string& key_name, uint64_t token_need) {
  std::lock_guard lock(mutex_);
  auto it = keys_.find(key_name);
  if (it == keys_.end()) return true;  // never seen: nothing known against it
  KeyState& key = it->second;
  const MonotonicTime now = clock_.now();
  refreshLocked(key, now);
  const int64_t need =
      static_cast<int64_t>(std::min<uint64_t>(token_need, static_cast<uint64_t>(kMaxTokenNeed)));
  return key.queue.empty() && (fitsLocked(key, need) || canProbeLocked(key, need, now));
}

QuotaTracker::Admission QuotaTracker::poll(uint64_t id) {
  Wakers wakers;
  Admission result = rejected(milliseconds(0));
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    auto it = tickets_.find(id);
    if (it == tickets_.end()) return rejected(milliseconds(0));
    Ticket& ticket = it->second;
    if (ticket.state == Ticket::State::Admitted) return admitted(id);
    if (ticket.state == Ticket::State::Expired) {
      eraseTicketLocked(it);
      return rejected(kUnknownQuotaRetryAfter);
    }
    KeyState& key = *ticket.key;
    key.last_active = now;
    refreshLocked(key, now);
    releaseLocked(key, now, id, wakers);
    if (ticket.state == Ticket::State::Admitted) {
      result = admitted(id);
    } else {
      const auto wait = ticketWaitLocked(key, ticket, now);
      if (ticket.state == Ticket::State::Expired || missesDeadline(wait, ticket.deadline, now)) {
        if (ticket.state == Ticket::State::Queued) removeFromQueueLocked(key, id);
        eraseTicketLocked(it);
        result = rejected(retryAfterFor(wait, now));
        // The head may have left: whoever is next might fit now.
        releaseLocked(key, now, 0, wakers);
      } else {
        result = queuedLocked(ticket, id, wait);
      }
    }
  }
  wakeAll(wakers);
  return result;
}

void QuotaTracker::abandon(uint64_t id) {
  Wakers wakers;
  {
    std::lock_guard lock(mutex_);
    auto it = tickets_.find(id);
    if (it == tickets_.end()) return;
    KeyState& key = *it->second.key;
    setAwaitingFleetLocked(it->second, false);
    Ticket ticket = std::move(it->second);
    eraseTicketLocked(it);
    const MonotonicTime now = clock_.now();
    key.last_active = now;
    if (ticket.state == Ticket::State::Queued) {
      removeFromQueueLocked(key, id);
    } else if (ticket.state == Ticket::State::Admitted) {
      // Never sent: give its slot back (it was charged in every state since its grant).
      key.in_flight -= 1;
      key.unanswered = std::max<int64_t>(key.unanswered - 1, 0);
      key.unanswered_tokens = std::max<int64_t>(key.unanswered_tokens - ticket.token_need, 0);
      key.requests.charged = std::max<int64_t>(key.requests.charged - 1, 0);
      key.tokens.charged = std::max<int64_t>(key.tokens.charged - ticket.token_need, 0);
    }
    refreshLocked(key, now);
    releaseLocked(key, now, 0, wakers);
    wakeChangedLocked(key, now, wakers);
  }
  wakeAll(wakers);
}

void QuotaTracker::onAttemptDone(uint64_t id, bool headers_seen) {
  Wakers wakers;
  {
    std::lock_guard lock(mutex_);
    auto it = tickets_.find(id);
    if (it == tickets_.end() || it->second.state != Ticket::State::Admitted) return;
    const int64_t need = it->second.token_need;
    KeyState& key = *it->second.key;
    setAwaitingFleetLocked(it->second, false);
    tickets_.erase(it);  // (Admitted: it counted in in_flight, not in expired)
    const MonotonicTime now = clock_.now();
    key.last_active = now;
    key.in_flight -= 1;
    if (!headers_seen) {
      // No answer will come for it. Its charge stays (the upstream may have
      // counted it) until the next report or reset.
      key.unanswered = std::max<int64_t>(key.unanswered - 1, 0);
      key.unanswered_tokens = std::max<int64_t>(key.unanswered_tokens - need, 0);
    }
    refreshLocked(key, now);
    releaseLocked(key, now, 0, wakers);
    wakeChangedLocked(key, now, wakers);
  }
  wakeAll(wakers);
}

void QuotaTracker::observe(const std::string& key_name, const QuotaObservation& observation) {
  Wakers wakers;
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    maybeSweepLocked(now);
    observeLocked(keys_[key_name], observation, now, now, nullptr, wakers);
  }
  wakeAll(wakers);
}

void QuotaTracker::observe(uint64_t ticket, const QuotaObservation& observation) {
  Wakers wakers;
  {
    std::lock_guard lock(mutex_);
    const MonotonicTime now = clock_.now();
    const auto it = tickets_.find(ticket);
    if (it != tickets_.end()) {
      const bool admitted = it->second.state == Ticket::State::Admitted;
      const MonotonicTime sent_at = admitted ? it->second.granted_at : now;
      // The sweep keeps the ticket's key (see Ticket::key).
      maybeSweepLocked(now);
      observeLocked(*it->second.key, observation, now, sent_at, admitted ? &it->second : nullptr,
                    wakers);
    }
  }
  wakeAll(wakers);
}

void QuotaTracker::observeLocked(KeyState& key, const QuotaObservation& observation,
                                 MonotonicTime now, MonotonicTime sent_at, const Ticket* reporter,
                                 Wakers& wakers) {
  {
    key.last_active = now;
    refreshLocked(key, now);

    // One response answered: its own token need when its ticket is known (it
    // is in the report; the average of those awaiting an answer would leave
    // part of a big request charged on top of the report that counts it),
    // otherwise estimated as that average.
    if (key.unanswered > 0) {
      key.unanswered_tokens -= reporter != nullptr
                                   ? std::min(reporter->token_need, key.unanswered_tokens)
                                   : key.unanswered_tokens / key.unanswered;
      key.unanswered -= 1;
      if (key.unanswered == 0) key.unanswered_tokens = 0;
    }

    if (observation.requests) {
      last_remaining_requests_.store(observation.requests->remaining, std::memory_order_relaxed);
      applyQuota(key.requests, *observation.requests, now, sent_at, key.unanswered);
    }
    if (observation.tokens) {
      last_remaining_tokens_.store(observation.tokens->remaining, std::memory_order_relaxed);
      applyQuota(key.tokens, *observation.tokens, now, sent_at, key.unanswered_tokens);
    }
    if (key.requests.known || key.tokens.known) {
      key.unthrottled = false;
    } else if (observation.empty()) {
      key.unthrottled = true;  // the upstream does not report quotas for this key
    }
    // A report of a passed reset ("0s") takes effect now.
    refreshLocked(key, now);
    releaseLocked(key, now, 0, wakers);

    // Fail fast: queued requests whose wait no longer fits their deadline.
    for (const uint64_t id : key.queue) {
      const auto it = tickets_.find(id);
      if (it == tickets_.end()) continue;
      const auto wait = ticketWaitLocked(key, it->second, now);
      if (wait && *wait >= it->second.deadline && it->second.waker) {
        wakers.push_back(it->second.waker);
      }
    }
    wakeChangedLocked(key, now, wakers);
  }
}

QuotaTracker::Admission QuotaTracker::deferAdmitted(uint64_t id, MonotonicTime until) {
  std::lock_guard lock(mutex_);
  auto it = tickets_.find(id);
  if (it == tickets_.end() || it->second.state != Ticket::State::Admitted) {
    return rejected(milliseconds(0));
  }
  Ticket& ticket = it->second;
  KeyState& key = *ticket.key;
  // Undo its grant (as abandon() does), then back to the head of the FIFO.
  setAwaitingFleetLocked(ticket, false);
  key.in_flight -= 1;
  key.unanswered = std::max<int64_t>(key.unanswered - 1, 0);
  key.unanswered_tokens = std::max<int64_t>(key.unanswered_tokens - ticket.token_need, 0);
  key.requests.charged = std::max<int64_t>(key.requests.charged - 1, 0);
  key.tokens.charged = std::max<int64_t>(key.tokens.charged - ticket.token_need, 0);
  key.held_until = key.held_until ? std::max(*key.held_until, until) : until;
  ticket.state = Ticket::State::Queued;
  key.queue.push_front(id);
  ++queued_;
  return queuedLocked(ticket, id, *key.held_until);
}

bool QuotaTracker::unthrottled(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  return it != keys_.end() && it->second.unthrottled;
}

int64_t QuotaTracker::unanswered(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  return it == keys_.end() ? 0 : it->second.unanswered;
}

int64_t QuotaTracker::unansweredTokens(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  return it == keys_.end() ? 0 : it->second.unanswered_tokens;
}

void QuotaTracker::setAwaitingFleetLocked(Ticket& ticket, bool waiting) {
  if (ticket.awaiting_fleet == waiting) return;
  ticket.awaiting_fleet = waiting;
  InFlight& awaiting = ticket.key->awaiting_fleet;
  const int64_t sign = waiting ? 1 : -1;
  awaiting.requests += sign;
  awaiting.tokens += sign * ticket.token_need;
}

void QuotaTracker::awaitingFleet(uint64_t id, bool waiting) {
  std::lock_guard lock(mutex_);
  const auto it = tickets_.find(id);
  if (it == tickets_.end() || it->second.state != Ticket::State::Admitted) return;
  setAwaitingFleetLocked(it->second, waiting);
}

QuotaTracker::InFlight QuotaTracker::fleetUnanswered(const std::string& key_name) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key_name);
  if (it == keys_.end()) return {};
  const KeyState& key = it->second;
  // (unanswered_tokens is partly estimated: never below zero.)
  return {std::max<int64_t>(key.unanswered - key.awaiting_fleet.requests, 0),
          std::max<int64_t>(key.unanswered_tokens - key.awaiting_fleet.tokens, 0)};
}

size_t QuotaTracker::queueDepth() const { return queued_.load(std::memory_order_relaxed); }

std::optional<int64_t> QuotaTracker::lastRemaining(bool tokens) const {
  const int64_t remaining =
      (tokens ? last_remaining_tokens_ : last_remaining_requests_).load(std::memory_order_relaxed);
  return remaining == kNoRemaining ? std::nullopt : std::optional<int64_t>(remaining);
}

QuotaTracker::GaugeValues QuotaTracker::gaugeValues() const {
  // No lock (three per request were ~250 instructions): each value is one
  // atomic, written under the lock; the gauges are separate series anyway.
  return {queueDepth(), lastRemaining(false), lastRemaining(true)};
}

size_t QuotaTracker::keyCount() const {
  std::lock_guard lock(mutex_);
  return keys_.size();
}

}  // namespace sluice
