#include "proxy/shared_state/shared_state.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "filters/throttle/quota_headers.h"
#include "proxy/observability/log.h"
#include "proxy/shared_state/quota_report_gate.h"

namespace sluice {

namespace {

using std::chrono::milliseconds;

// A reserve: KEYS[1] the quota's hash, ARGV[1] the reserve (rate_limit.reserve),
// ARGV[2] the request's token need (0 = unknown: tokens are not checked).
// The hash holds two counters, requests (limit, avail, reset, wend) and
// tokens (tlimit, tavail, treset, twend); one local function serves both.
// A request is admitted when every counter the fleet knows allows it:
// requests while avail > reserve, tokens while tavail >= need (the need
// clamped to the limit: a bigger one waits for a full window). Returns
// {kind, wait_ms}: 0 unknown (no counter is global: decide locally), 1
// admitted (then also the request count left and its reset, in ms from now
// or -1, then the same for tokens: QuotaReportGate; -1 -1 for requests that
// are not global, nothing for tokens that are not), 2 wait (wait_ms: until the latest reset among
// the counters that refuse; -1 = unknown: the fleet's probe is out, or a refill with no reset
// since), 3 the fleet's probe. Refills a passed reset lazily, per counter, as QuotaTracker does. A
// key nobody has seen admits one probe for the fleet; the others wait for its report or its release
// (kProbeEndScript). avail = -1 (or absent, once the key is known) marks a
// counter the responses do not carry (or whose last window had no limit):
// every replica decides it locally until a report says otherwise.
constexpr std::string_view kReserveScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'limit', 'avail', 'reset', 'tlimit', 'tavail', 'treset')
if not h[2] and not h[5] then
  if redis.call('HSETNX', KEYS[1], 'probe', 1) == 1 then
    redis.call('PEXPIRE', KEYS[1], 2000)
    return {3, 0}
  end
  return {2, -1}
end
-- One counter (p: the field prefix) after its lazy refill: {avail, reset, need,
-- floor}, admitting while avail - need >= floor; nil when it is not global.
local function counter(p, limit, avail, reset, need, floor)
  avail = tonumber(avail)
  if not avail or avail < 0 then return nil end
  limit = tonumber(limit) or -1
  reset = tonumber(reset) or -1
  if reset >= 0 and now >= reset then
    if limit <= 0 then
      redis.call('HSET', KEYS[1], p .. 'avail', -1, p .. 'reset', -1)
      return nil
    end
    redis.call('HSET', KEYS[1], p .. 'avail', limit, p .. 'reset', -1, p .. 'wend', reset)
    avail, reset = limit, -1
  end
  if limit > 0 and need > limit then need = limit end
  if limit > 0 and floor > limit - need then floor = limit - need end
  return {p = p, avail = avail, reset = reset, need = need, floor = floor}
end
local reserve = tonumber(ARGV[1])
local req = counter('', h[1], h[2], h[3], 1, reserve)
local tok = counter('t', h[4], h[5], h[6], tonumber(ARGV[2]), 0)
if not req and not tok then return {0, 0} end
local function fits(c) return not c or c.avail - c.need >= c.floor end
if fits(req) and fits(tok) then
  local reply = {1, 0}
  -- {avail, reset_in} of requests, then of tokens only when they are global
  -- (every element of the reply costs the replica a parse).
  for _, c in ipairs({req or false, tok}) do
    if c then
      if c.need > 0 then
        c.avail = c.avail - c.need
        redis.call('HSET', KEYS[1], c.p .. 'avail', c.avail)
      end
      local reset_in = -1
      if c.reset >= 0 then reset_in = c.reset - now end
      reply[#reply + 1] = c.avail
      reply[#reply + 1] = reset_in
    else
      reply[#reply + 1] = -1
      reply[#reply + 1] = -1
    end
  end
  return reply
end
local wait = 0
for _, c in ipairs({req or false, tok or false}) do
  if c and not fits(c) then
    if c.reset < 0 then
      wait = -1
    elseif wait >= 0 and c.reset - now > wait then
      wait = c.reset - now
    end
  end
end
return {2, wait}
)lua";

// An observe: KEYS[1] the quota's hash; ARGV[1] sent_ago_ms, then per counter
// (ARGV[2..5] requests, ARGV[6..9] tokens, which may be left out) limit,
// remaining (-1 = not reported: the counter is left as it is), reset_in_ms
// (-1 = none), unanswered. Newest wins, by reset time, per counter: a report of a window
// already refilled, or of one that is over, is ignored; within one window (or
// right after a refill) the available count only goes down; a report of a
// later window replaces it.
constexpr std::string_view kObserveScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ago = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'limit', 'avail', 'reset', 'wend',
                     'tlimit', 'tavail', 'treset', 'twend')
-- One counter's report: p its field prefix, h[i..i+3] its fields, ARGV[a..a+3]
-- its report. Returns the reset it keeps, or nil when nothing was written.
local function observe(p, i, a)
  local remaining = tonumber(ARGV[a + 1] or -1)
  if remaining < 0 then return nil end
  local limit = tonumber(ARGV[a])
  local fresh = remaining - tonumber(ARGV[a + 3])
  if fresh < 0 then fresh = 0 end
  local reset_in = tonumber(ARGV[a + 2])
  local reset, earliest = -1, -1
  if reset_in >= 0 then
    reset = now + reset_in
    earliest = reset - ago
  end
  local old_limit = tonumber(h[i]) or -1
  if limit <= 0 then limit = old_limit end
  local avail = tonumber(h[i + 1])
  local cur = tonumber(h[i + 2]) or -1
  local wend = tonumber(h[i + 3]) or -1
  if avail then
    if cur >= 0 and now >= cur then
      wend = cur
      cur = -1
      if old_limit > 0 then avail = old_limit end
    end
    if earliest >= 0 and wend >= 0 and earliest <= wend then return nil end
    if reset >= 0 and reset <= now then return nil end
    if (cur >= 0 and (earliest < 0 or earliest <= cur)) or (cur < 0 and wend >= 0) then
      if fresh < avail then avail = fresh end
      if reset > cur then cur = reset end
    else
      avail = fresh
      if reset >= 0 then cur = reset end
    end
  else
    avail = fresh
    cur = reset
  end
  redis.call('HSET', KEYS[1], p .. 'limit', limit, p .. 'avail', avail, p .. 'reset', cur,
             p .. 'wend', wend)
  return cur
end
local r = observe('', 1, 2)
local tr = observe('t', 5, 6)
if not r and not tr then return 0 end
redis.call('HDEL', KEYS[1], 'probe')
local last = math.max(r or tonumber(h[3]) or -1, tr or tonumber(h[7]) or -1)
local ttl = 600000
if last > now then ttl = ttl + last - now end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
)lua";

// The fleet's probe ended without a report: KEYS[1] the quota's hash, ARGV[1]
// 1 when its response came without a request or token quota (the key is marked
// avail = -1, decided locally by every replica until a quota shows up), 0
// when it ended before any header (nothing learned: the next request probes).
constexpr std::string_view kProbeEndScript = R"lua(
redis.call('HDEL', KEYS[1], 'probe')
if ARGV[1] == '1' and not redis.call('HGET', KEYS[1], 'avail') then
  redis.call('HSET', KEYS[1], 'limit', -1, 'avail', -1, 'reset', -1)
  redis.call('PEXPIRE', KEYS[1], 600000)
end
return 1
)lua";

std::string hexDigest(const EVP_MD* md, std::string_view text, size_t hex_chars) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, md, nullptr) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len && out.size() < hex_chars; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

std::string randomInstanceId() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t v = dist(rd);
  std::string out;
  for (int i = 0; i < 16; ++i, v >>= 4) out.push_back(kHex[v & 0xf]);
  return out;
}

// Which SharedState's client serves the calling worker thread.
struct CurrentClient {
  const SharedState* owner = nullptr;
  RedisClient* client = nullptr;
};
thread_local CurrentClient t_current;

int64_t integerAt(const redisReply* reply, size_t i) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements <= i) return -2;
  const redisReply* e = reply->element[i];
  return e->type == REDIS_REPLY_INTEGER ? e->integer : -2;
}

std::string respBulk(std::string_view arg) {
  std::string out;
  appendRespBulk(out, arg);
  return out;
}

// An integer as text on the stack (the scripts' arguments).
class IntText {
 public:
  explicit IntText(int64_t v) : end_(std::to_chars(buf_, buf_ + sizeof(buf_), v).ptr) {}
  std::string_view view() const { return {buf_, static_cast<size_t>(end_ - buf_)}; }

 private:
  char buf_[24];
  char* end_;
};

// One reserve waiting for its reply: what the reply's handler needs. The
// handler holds only a pointer to it (which std::function keeps inline), and
// the calls are recycled per worker thread (a reply comes on the thread that
// asked: RedisClient's contract), so a reserve allocates nothing — the
// handler, the key's copy and the caller's `done` were three allocations.
struct ReserveCall {
  std::shared_ptr<QuotaReportGate> gate;
  const Clock* clock = nullptr;
  std::string key;  // the quota key (a hash; keeps its capacity for the next call)
  GlobalQuota::Done done;
};

class ReserveCalls {
 public:
  ReserveCall* take() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<ReserveCall>());
      return all_.back().get();
    }
    ReserveCall* call = free_.back();
    free_.pop_back();
    return call;
  }
  void give(ReserveCall* call) {
    call->gate.reset();
    call->done = nullptr;
    free_.push_back(call);
  }

 private:
  // Every call this thread made, in flight or free: a call whose client was
  // destroyed with it pending is never given back, and is freed here.
  std::vector<std::unique_ptr<ReserveCall>> all_;
  std::vector<ReserveCall*> free_;
};
thread_local ReserveCalls t_reserve_calls;

class RedisQuota final : public GlobalQuota {
 public:
  RedisQuota(SharedState& shared, const Clock& clock, std::string key_prefix, int64_t reserve)
      : shared_(shared),
        clock_(clock),
        key_prefix_(std::move(key_prefix)),
        reserve_head_(respCommandHead(6, {"EVALSHA", shared.reserveSha(), "1"})),
        reserve_arg_(respBulk(std::to_string(reserve))),
        gate_(std::make_shared<QuotaReportGate>(reserve, kReportRefresh)) {}

  bool reserve(const std::string& key, uint64_t token_need, Done done) override {
    RedisClient* client = shared_.client();
    if (client == nullptr) return false;
    const IntText need(static_cast<int64_t>(std::min<uint64_t>(token_need, kMaxTokenNeed)));
    // EVALSHA <sha> 1 <key_prefix_ + key> <reserve> <need>, formatted in a
    // per-thread buffer from the parts that never change: no allocation.
    thread_local std::string resp;
    resp.assign(reserve_head_);
    appendRespBulk(resp, key_prefix_, key);
    resp.append(reserve_arg_);
    appendRespBulk(resp, need.view());
    // The reply may come after this quota's ConfigSnapshot was replaced by a
    // reload: nothing of `this` is used, the gate is shared.
    ReserveCall* call = t_reserve_calls.take();
    call->gate = gate_;
    call->clock = &clock_;
    call->key.assign(key);
    call->done = std::move(done);
    const bool sent = client->commandFormatted(
        resp, [call](const redisReply* reply) { onReserveReply(call, reply); }, "quota");
    if (!sent) t_reserve_calls.give(call);  // `done` is never called
    return sent;
  }

  void report(const std::string& key, const Report& report) override {
    const MonotonicTime now = clock_.now();
    // Each counter goes only when it could change the fleet's count.
    const bool requests = report.requests && passes(key, *report.requests, Counter::kRequests, now);
    const bool tokens = report.tokens && passes(key, *report.tokens, Counter::kTokens, now);
    if (!requests && !tokens) return;
    RedisClient* client = shared_.client();
    // Kept for later (the latest per key): then it carries every counter it has.
    const bool all = client == nullptr;
    const CounterArgs r(requests || all ? report.requests : std::nullopt);
    const CounterArgs t(tokens || all ? report.tokens : std::nullopt);
    const IntText ago(std::max<int64_t>(report.sent_ago.count(), 0));
    std::string redis_key = key_prefix_ + key;
    std::string resp;
    if (tokens || (all && report.tokens)) {
      appendRespArray(resp,
                      {"EVALSHA", shared_.observeSha(), "1", redis_key, ago.view(), r.limit.view(),
                       r.remaining.view(), r.reset.view(), r.unanswered.view(), t.limit.view(),
                       t.remaining.view(), t.reset.view(), t.unanswered.view()});
    } else {  // no token counter: its arguments are left out
      appendRespArray(resp,
                      {"EVALSHA", shared_.observeSha(), "1", redis_key, ago.view(), r.limit.view(),
                       r.remaining.view(), r.reset.view(), r.unanswered.view()});
    }
    if (client == nullptr || !client->commandFormatted(resp, nullptr, "quota")) {
      shared_.keepForLater(std::move(redis_key), std::move(resp));
    }
  }

  void endProbe(const std::string& key, bool answered_without_quota) override {
    RedisClient* client = shared_.client();
    // Down: the permit expires by itself (2 s).
    if (client == nullptr) return;
    client->command(
        {"EVAL", kProbeEndScript, "1", key_prefix_ + key, answered_without_quota ? "1" : "0"},
        nullptr, "quota");
  }

 private:
  // One report per key and second goes even when it changes nothing (QuotaReportGate).
  static constexpr milliseconds kReportRefresh{1000};
  // Token needs are estimates; larger ones are clamped to the quota's limit anyway.
  static constexpr uint64_t kMaxTokenNeed = uint64_t{1} << 40;
  using Counter = QuotaReportGate::Counter;

  // One counter of an observe call; absent: remaining -1 (the script leaves it as it is).
  struct CounterArgs {
    explicit CounterArgs(const std::optional<GlobalQuota::Counter>& c)
        : limit(c ? c->limit : -1),
          remaining(c ? c->remaining : -1),
          reset(c && c->reset_in ? std::max<int64_t>(c->reset_in->count(), 0) : -1),
          unanswered(c ? c->unanswered : 0) {}
    IntText limit, remaining, reset, unanswered;
  };

  bool passes(const std::string& key, const GlobalQuota::Counter& c, Counter counter,
              MonotonicTime now) {
    std::optional<MonotonicTime> reset_at;
    if (c.reset_in) reset_at = now + *c.reset_in;
    return gate_->shouldReport(key, c.remaining, c.unanswered, reset_at, now, counter);
  }

  static void onReserveReply(ReserveCall* call, const redisReply* reply) {
    Answer answer;
    const int64_t kind = integerAt(reply, 0);
    const int64_t wait = integerAt(reply, 1);
    if (kind == 0) {
      answer.kind = Answer::Kind::Unknown;
    } else if (kind == 1) {
      answer.kind = Answer::Kind::Admit;
      learn(*call->gate, *call->clock, call->key, reply);
    } else if (kind == 2) {
      answer.kind = Answer::Kind::Wait;
      // A reset in Redis is a peer's report (or anyone's write): never trusted
      // beyond the longest reset a provider's header may set.
      if (wait >= 0) answer.wait = milliseconds(std::min<int64_t>(wait, kMaxQuotaReset.count()));
    } else if (kind == 3) {
      answer.kind = Answer::Kind::Probe;
    }
    // Free before `done` runs: it may reserve again.
    Done done = std::move(call->done);
    t_reserve_calls.give(call);
    done(answer);
  }

  static void learn(QuotaReportGate& gate, const Clock& clock, const std::string& key,
                    const redisReply* reply) {
    const MonotonicTime now = clock.now();
    // {1, 0, avail, reset_in, tavail, treset_in}; avail -1: not global.
    for (const Counter counter : {Counter::kRequests, Counter::kTokens}) {
      const size_t at = counter == Counter::kRequests ? 2 : 4;
      const int64_t avail = integerAt(reply, at);
      const int64_t reset_in = integerAt(reply, at + 1);
      if (avail < 0) continue;
      std::optional<MonotonicTime> reset_at;
      if (reset_in >= 0) {
        reset_at = now + milliseconds(std::min<int64_t>(reset_in, kMaxQuotaReset.count()));
      }
      gate.learned(key, avail, reset_at, now, counter);
    }
  }

  SharedState& shared_;
  const Clock& clock_;
  const std::string key_prefix_;
  const std::string reserve_head_;  // a reserve's RESP up to its key (respCommandHead)
  const std::string reserve_arg_;   // ARGV[1], the reserve, as a RESP bulk string
  const std::shared_ptr<QuotaReportGate> gate_;
};

// The open circuit of one scope as Redis keeps it for replicas that missed
// the message: `<prefix>c:<scope>:open` = "<instance> <open ms>", expiring
// when the circuit's cooldown ends.
std::string openKey(const std::string& prefix, const std::string& scope) {
  return prefix + "c:" + scope + ":open";
}

// Takes the fleet's probe permit (KEYS[1]) for this instance (ARGV[1]) for
// ARGV[2] ms: 1 = won. The permit is free, or already this instance's: the
// replica whose trip or failed probe opened the fleet holds it through that
// cooldown (RedisCircuit::publish), so a peer that has not heard the re-open
// yet cannot probe in between.
constexpr std::string_view kClaimProbeScript =
    "local holder = redis.call('GET', KEYS[1]) "
    "if holder and holder ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1";

// Deletes a probe permit (KEYS[1]) if this instance (ARGV[1]) holds it.
constexpr std::string_view kReleaseProbeScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

// Reads an open key: {value or "", PTTL}.
constexpr std::string_view kOpenStateScript =
    "return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}";

/** Sends the trip of `scope` (open for `open_for`) to the peers and keeps it for late ones. */
void announceOpen(RedisClient& client, const std::string& channel, const std::string& key,
                  const std::string& scope, const std::string& instance, milliseconds open_for) {
  const std::string ms = std::to_string(std::max<int64_t>(open_for.count(), 1));
  // The key first: a peer that subscribes after the message reads the key
  // after its subscription took effect (SharedState::replayCircuits).
  client.command({"SET", key, instance + " " + ms, "PX", ms}, nullptr, "circuit");
  client.command({"PUBLISH", channel, scope + " " + instance + " open " + ms}, nullptr, "circuit");
}

class RedisCircuit final : public GlobalCircuit {
 public:
  RedisCircuit(SharedState& shared, std::string scope, std::string channel)
      : shared_(shared),
        scope_(std::move(scope)),
        probe_key_(shared.config().prefix + "c:" + scope_ + ":probe"),
        open_key_(openKey(shared.config().prefix, scope_)),
        channel_(std::move(channel)) {}

  void publish(CircuitState to, milliseconds open_for) override {
    RedisClient* client = shared_.client();
    if (client == nullptr) {
      // Not lost for good: an open circuit is announced again on reconnect
      // (SharedState::replayCircuits).
      shared_.countError("circuit");
      return;
    }
    if (to == CircuitState::Open) {
      announceOpen(*client, channel_, open_key_, scope_, shared_.instance(), open_for);
      // A trip or a failed probe ends any peer's permit, and this replica
      // keeps it until the cooldown it announced ends. Deleting it instead let
      // a peer whose claim crossed the message win it and probe a second time
      // before it heard the re-open. This replica's own next claim wins.
      const std::string ms = std::to_string(std::max<int64_t>(open_for.count(), 1));
      client->command({"SET", probe_key_, shared_.instance(), "PX", ms}, nullptr, "circuit");
    } else {
      client->command({"PUBLISH", channel_, scope_ + " " + shared_.instance() + " closed 0"},
                      nullptr, "circuit");
      client->command({"DEL", open_key_}, nullptr, "circuit");
      // Recovered: the permit is over, the next half-open asks again.
      client->command({"DEL", probe_key_}, nullptr, "circuit");
    }
  }

  std::optional<bool> claimProbe(std::function<void(bool won)> done) override {
    RedisClient* client = shared_.client();
    if (client == nullptr) return true;
    // Held until the probe's verdict is published, or for 10 s if its holder vanished.
    const bool sent = client->command(
        {"EVAL", kClaimProbeScript, "1", probe_key_, shared_.instance(), "10000"},
        [done = std::move(done)](const redisReply* reply) {
          if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
            done(true);  // no answer: decide locally
          } else {
            done(reply->type == REDIS_REPLY_INTEGER && reply->integer == 1);  // 0: a peer holds it
          }
        },
        "circuit");
    if (!sent) return true;
    return std::nullopt;
  }

  void releaseProbe() override {
    RedisClient* client = shared_.client();
    if (client == nullptr) return;  // it expires (10 s)
    // Only this replica's own permit: a peer may have won it since.
    client->command({"EVAL", kReleaseProbeScript, "1", probe_key_, shared_.instance()}, nullptr,
                    "circuit");
  }

 private:
  SharedState& shared_;
  const std::string scope_;
  const std::string probe_key_;
  const std::string open_key_;
  const std::string channel_;
};

}  // namespace

std::string sharedScope(std::string_view upstream, std::string_view endpoint) {
  std::string text(upstream);
  text.push_back('\n');
  text.append(endpoint);
  return hexDigest(EVP_sha256(), text, 16);
}

SharedState::SharedState(const config::SharedStateConfig& config, Metrics& metrics,
                         const Clock& clock, SslCtxPtr ssl_ctx)
    : config_(config),
      clock_(clock),
      ssl_ctx_(std::move(ssl_ctx)),
      series_(metrics.sharedState()),
      instance_(randomInstanceId()),
      channel_(config.prefix + "circuit"),
      reserve_sha_(hexDigest(EVP_sha1(), kReserveScript, 40)),
      observe_sha_(hexDigest(EVP_sha1(), kObserveScript, 40)) {
  series_.up->Set(0);
}

SharedState::~SharedState() { detach(); }

void SharedState::attach(const std::vector<Dispatcher*>& loops) {
  loops_.resize(loops.size());
  down_count_ = static_cast<int>(loops.size()) + (loops.empty() ? 0 : 1);
  for (size_t i = 0; i < loops.size(); ++i) {
    Loop* loop = &loops_[i];
    loop->dispatcher = loops[i];
    const bool with_subscriber = i == 0;
    loops[i]->post([this, loop, with_subscriber] {
      const std::vector<std::vector<std::string>> scripts{
          {"SCRIPT", "LOAD", std::string(kReserveScript)},
          {"SCRIPT", "LOAD", std::string(kObserveScript)}};
      RedisClient::Hooks hooks;
      hooks.on_error = [this](std::string_view op) { countError(op); };
      // Called on this loop only: it reads this loop's client, never
      // another's (worker 0 may still be creating its own).
      hooks.on_state = [this, loop, with_subscriber](bool up, std::string_view reason) {
        onClientState(loop->client.get(), up, reason, /*replays_circuits=*/with_subscriber);
      };
      hooks.on_connect_failed = [this](std::string_view reason) { onConnectFailed(reason); };
      loop->client = std::make_unique<RedisClient>(*loop->dispatcher, config_.redis, ssl_ctx_.get(),
                                                   config_.tls, config_.timeout, hooks, scripts);
      t_current = CurrentClient{this, loop->client.get()};
      loop->client->start();
      if (with_subscriber) {
        RedisClient::Hooks sub_hooks;
        sub_hooks.on_error = [this](std::string_view op) { countError(op); };
        sub_hooks.on_state = [this](bool up, std::string_view reason) {
          onClientState(nullptr, up, reason, /*replays_circuits=*/false);
        };
        sub_hooks.on_connect_failed = [this](std::string_view reason) { onConnectFailed(reason); };
        // What was published before the subscription took effect is in the
        // open keys: read them now (and again whenever worker 0's client
        // comes up), so no trip falls between the two.
        sub_hooks.on_subscribed = [loop, this] {
          if (loop->client != nullptr && loop->client->up()) {
            replayCircuits(*loop->client);
            recheckRuns(*loop->client);
          }
        };
        loop->subscriber = std::make_unique<RedisClient>(
            *loop->dispatcher, config_.redis, ssl_ctx_.get(), config_.tls, config_.timeout,
            sub_hooks, std::vector<std::vector<std::string>>{}, channel_,
            [this](std::string_view, std::string_view message) { onMessage(message); },
            subscriber_ping_);
        loop->subscriber->start();
      }
    });
  }
}

void SharedState::detach() {
  for (Loop& loop : loops_) {
    loop.subscriber.reset();
    loop.client.reset();
  }
  loops_.clear();
}

RedisClient* SharedState::client() const {
  if (t_current.owner != this || t_current.client == nullptr || !t_current.client->up()) {
    return nullptr;
  }
  return t_current.client;
}

void SharedState::countError(std::string_view op) const { series_.errors(op).Increment(); }

void SharedState::onClientState(RedisClient* client, bool up, std::string_view reason,
                                bool replays_circuits) {
  int down = 0;
  {
    // Count, gauge and log together: two workers coming up at once must not
    // leave the gauge at 0 (one counted down to 1, the other to 0, and the
    // first wrote its stale "not all up" last — seen as a test that waited
    // 10 s for sluice_shared_state_up after "shared state is up" was logged).
    std::lock_guard lock(up_mu_);
    down = up ? --down_count_ : ++down_count_;
    series_.up->Set(down == 0 ? 1 : 0);
    if (up && down == 0) {
      logged_reason_.clear();
      logInfo("sluice: shared state is up: " + config_.redis.address(),
              {{"event", "shared_state_up"}, {"redis", config_.redis.address()}});
    } else if (!up && down == 1) {
      logged_reason_ = std::string(reason);
      logWarn("sluice: shared state is down (" + logged_reason_ +
                  "), deciding on local state: " + config_.redis.address(),
              {{"event", "shared_state_down"},
               {"redis", config_.redis.address()},
               {"reason", logged_reason_},
               {"required", config_.required}});
    }
  }
  if (up && client != nullptr) flushKept(*client);
  if (up && client != nullptr && replays_circuits) {
    replayCircuits(*client);
    recheckRuns(*client);
  }
}

void SharedState::onConnectFailed(std::string_view reason) {
  std::lock_guard lock(up_mu_);
  // While everything is up a failed reconnect cannot happen; while down, the
  // first failure (e.g. at start: Redis unreachable, a wrong password) and
  // each new reason are logged, not every backoff's retry.
  if (down_count_.load() == 0 || reason == logged_reason_) return;
  logged_reason_ = std::string(reason);
  logWarn("sluice: shared state is down (cannot connect: " + logged_reason_ +
              "), deciding on local state: " + config_.redis.address(),
          {{"event", "shared_state_down"},
           {"redis", config_.redis.address()},
           {"reason", logged_reason_},
           {"required", config_.required}});
}

std::vector<std::pair<std::string, std::vector<std::shared_ptr<CircuitBreaker>>>>
SharedState::liveCircuits(const std::string* only_scope) {
  std::vector<std::pair<std::string, std::vector<std::shared_ptr<CircuitBreaker>>>> out;
  std::lock_guard lock(mu_);
  for (const auto& [scope, list] : circuits_) {
    if (only_scope != nullptr && scope != *only_scope) continue;
    std::vector<std::shared_ptr<CircuitBreaker>> live;
    for (const auto& weak : list) {
      if (auto breaker = weak.lock()) live.push_back(std::move(breaker));
    }
    if (!live.empty()) out.emplace_back(scope, std::move(live));
  }
  return out;
}

void SharedState::replayCircuits(RedisClient& client) {
  // Pub/sub keeps nothing: what was published while this process was
  // disconnected (or before it started) is read back from the open keys, and
  // its own trips made meanwhile (never published) are announced now.
  for (const auto& [scope, breakers] : liveCircuits(nullptr)) {
    const std::string key = openKey(config_.prefix, scope);
    for (const auto& breaker : breakers) {
      if (breaker->state() != CircuitState::Open) continue;
      announceOpen(client, channel_, key, scope, instance_, breaker->cooldownLeft());
      break;
    }
    client.command(
        {"EVAL", kOpenStateScript, "1", key},
        [this, scope = std::string(scope)](const redisReply* reply) {
          applyStoredOpen(scope, reply);
        },
        "circuit");
  }
}

void SharedState::applyStoredOpen(const std::string& scope, const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) return;
  const redisReply* value = reply->element[0];
  const int64_t left_ms = integerAt(reply, 1);
  if (value->type != REDIS_REPLY_STRING || left_ms <= 0) return;
  const std::string_view text(value->str, value->len);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || text.substr(0, space) == instance_) return;
  for (const auto& [unused, breakers] : liveCircuits(&scope)) {
    for (const auto& breaker : breakers) {
      breaker->applyPeer(CircuitState::Open, milliseconds(left_ms));
    }
  }
}

void SharedState::keepForLater(std::string key, std::string resp) {
  std::lock_guard lock(mu_);
  // Bounded: past this many keys the newest reports are the ones lost.
  constexpr size_t kMaxKept = 4096;
  if (kept_.size() >= kMaxKept && kept_.count(key) == 0) return;
  kept_[std::move(key)] = std::move(resp);
}

void SharedState::flushKept(RedisClient& client) {
  std::map<std::string, std::string> kept;
  {
    std::lock_guard lock(mu_);
    kept.swap(kept_);
  }
  // Merged by the same script: the newest report (by reset time) wins.
  for (const auto& [key, resp] : kept) client.commandFormatted(resp, nullptr, "quota");
}

std::shared_ptr<GlobalQuota> SharedState::quota(std::string_view upstream,
                                                std::string_view endpoint, int64_t reserve) {
  return std::make_shared<RedisQuota>(
      *this, clock_, config_.prefix + "q:" + sharedScope(upstream, endpoint) + ":", reserve);
}

std::shared_ptr<GlobalCircuit> SharedState::circuit(const std::shared_ptr<CircuitBreaker>& breaker,
                                                    std::string_view upstream,
                                                    std::string_view endpoint) {
  std::string scope = sharedScope(upstream, endpoint);
  {
    std::lock_guard lock(mu_);
    auto& list = circuits_[scope];
    std::erase_if(list, [](const std::weak_ptr<CircuitBreaker>& w) { return w.expired(); });
    list.push_back(breaker);
  }
  return std::make_shared<RedisCircuit>(*this, std::move(scope), channel_);
}

void SharedState::linkRuns(const std::shared_ptr<RunTable>& table) {
  table->setFleet(runFleet());
  std::lock_guard lock(mu_);
  runs_ = table;
}

void SharedState::onWorker0(std::function<void(RedisClient*)> fn) {
  if (loops_.empty() || loops_[0].dispatcher == nullptr) {
    fn(nullptr);
    return;
  }
  Loop* loop = &loops_[0];
  loop->dispatcher->post([loop, fn = std::move(fn)] {
    fn(loop->client != nullptr && loop->client->up() ? loop->client.get() : nullptr);
  });
}

namespace {

// A run's spend counter: KEYS[1], ARGV[1] the USD to add, ARGV[2] its expiry in ms.
constexpr std::string_view kRunSpendScript = R"lua(
local total = redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return total
)lua";

std::optional<RunTable::Ending> endingOf(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING) return std::nullopt;
  const std::string_view v(r->str, r->len);
  if (v == "spend_cap") return RunTable::Ending::SpendCap;
  return RunTable::Ending::Cancelled;  // "cancelled" (or a value a newer version wrote)
}

std::optional<double> usdOf(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 64) {
    return std::nullopt;
  }
  const std::string text(r->str, r->len);
  char* end = nullptr;
  const double usd = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(usd)) return std::nullopt;
  return usd;
}

std::string usdText(double usd) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", usd);
  return buf;
}

}  // namespace

class RedisRunFleet final : public RunTable::Fleet {
 public:
  explicit RedisRunFleet(SharedState& shared) : shared_(shared) {}

  void lookup(const std::string& id, const std::string& parent,
              std::function<void(const Known&)> done) override {
    RedisClient* client = shared_.client();
    if (client == nullptr) {
      shared_.countError("runs");
      done(Known{});
      return;
    }
    const std::string ended = key(id, "ended");
    const std::string spend = key(id, "spend");
    const std::string parent_ended = parent.empty() ? std::string() : key(parent, "ended");
    auto reply = [done = std::move(done)](const redisReply* r) {
      Known known;
      if (r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        known.ended = endingOf(r->element[0]);
        known.spend_usd = usdOf(r->element[1]).value_or(0);
        if (r->elements >= 3) known.parent_ended = endingOf(r->element[2]);
      }
      done(known);
    };
    const bool sent =
        parent.empty()
            ? client->command({"MGET", ended, spend}, std::move(reply), "runs")
            : client->command({"MGET", ended, spend, parent_ended}, std::move(reply), "runs");
    if (!sent) done(Known{});
  }

  void addSpend(const std::string& id, double usd, std::chrono::milliseconds ttl,
                std::function<void(std::optional<double>)> done) override {
    // (The posted work holds the shared state, never this: the table that
    // owns this may be gone by the time worker 0 runs it.)
    SharedState* shared = &shared_;
    shared_.onWorker0([shared, key = key(id, "spend"), usd, ttl,
                       done = std::move(done)](RedisClient* client) mutable {
      if (client == nullptr) {
        shared->countError("runs");
        done(std::nullopt);
        return;
      }
      const std::string ms = std::to_string(std::max<int64_t>(1, ttl.count()));
      auto reply = [done](const redisReply* r) { done(usdOf(r)); };
      if (!client->command({"EVAL", kRunSpendScript, "1", key, usdText(usd), ms}, reply, "runs")) {
        done(std::nullopt);
      }
    });
  }

  void ended(const std::string& id, RunTable::Ending why, std::chrono::milliseconds ttl) override {
    SharedState* shared = &shared_;
    const bool capped = why == RunTable::Ending::SpendCap;
    shared_.onWorker0([shared, key = key(id, "ended"), capped, ttl,
                       message = "run " + shared_.instance_ +
                                 (capped ? " spend_cap " : " cancel ") + id](RedisClient* client) {
      if (client == nullptr) {
        shared->countError("runs");
        return;
      }
      client->command({"SET", key, capped ? "spend_cap" : "cancelled", "PX",
                       std::to_string(std::max<int64_t>(1, ttl.count()))},
                      nullptr, "runs");
      client->command({"PUBLISH", shared->channel_, message}, nullptr, "runs");
      // Out at once: this loop may have its own tasks of the run to cut in
      // the same turn (posted after this), and the peers' cuts wait for it.
      client->flush();
    });
  }

 private:
  std::string key(const std::string& id, std::string_view what) const {
    return shared_.config_.prefix + "r:" + id + ":" + std::string(what);
  }
  SharedState& shared_;
};

std::shared_ptr<RunTable::Fleet> SharedState::runFleet() {
  return std::make_shared<RedisRunFleet>(*this);
}

void SharedState::recheckRuns(RedisClient& client) {
  // Pub/sub keeps nothing: a run ended elsewhere while this process could
  // not hear it (its subscription down, or not yet made) left its
  // tombstone, which the ending writes before it publishes. Read after the
  // subscription took effect, the tombstones and the messages between them
  // miss no ending. (Runs new here are looked up on their first task.)
  std::shared_ptr<RunTable> table;
  {
    std::lock_guard lock(mu_);
    table = runs_.lock();
  }
  if (!table) return;
  const std::vector<std::string> ids = table->running(std::numeric_limits<size_t>::max());
  std::weak_ptr<RunTable> weak = table;
  for (size_t from = 0; from < ids.size(); from += kRecheckBatch) {
    const size_t to = std::min(ids.size(), from + kRecheckBatch);
    std::vector<std::string> argv{"MGET"};
    argv.reserve(1 + to - from);
    for (size_t i = from; i < to; ++i) argv.push_back(config_.prefix + "r:" + ids[i] + ":ended");
    std::string resp;
    appendRespArray(resp, argv);
    auto batch = std::vector<std::string>(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                          ids.begin() + static_cast<std::ptrdiff_t>(to));
    const bool sent = client.commandFormatted(
        resp,
        [weak, batch = std::move(batch)](const redisReply* r) {
          const auto runs = weak.lock();
          if (!runs || r == nullptr || r->type != REDIS_REPLY_ARRAY ||
              r->elements != batch.size()) {
            return;
          }
          for (size_t i = 0; i < batch.size(); ++i) {
            if (const auto why = endingOf(r->element[i])) runs->endedInFleet(batch[i], *why);
          }
        },
        "runs");
    if (!sent) return;
  }
}

void SharedState::linkSessions(const std::shared_ptr<McpSessionTable>& table,
                               std::string_view upstream,
                               const std::vector<std::string>& endpoints) {
  std::map<std::string, std::string> scope_of;  // endpoint name -> scope
  {
    std::lock_guard lock(mu_);
    for (const std::string& endpoint : endpoints) {
      std::string scope = sharedScope(upstream, endpoint);
      sessions_[scope] = SessionTarget{table, endpoint};
      scope_of.emplace(endpoint, std::move(scope));
    }
  }
  table->setPublisher(
      [this, scope_of = std::move(scope_of)](const std::string& key, const std::string& endpoint) {
        const auto it = scope_of.find(endpoint);
        if (it == scope_of.end()) return;
        RedisClient* c = client();
        if (c == nullptr) {
          countError("sessions");
          return;
        }
        c->command({"PUBLISH", channel_, "session " + instance_ + " " + it->second + " " + key},
                   nullptr, "sessions");
      });
}

void SharedState::onMessage(std::string_view message) {
  // "session <instance> <scope> <key>": a peer learned which endpoint has an MCP session.
  constexpr std::string_view kSession = "session ";
  if (message.substr(0, kSession.size()) == kSession) {
    const std::string_view rest = message.substr(kSession.size());
    const size_t first = rest.find(' ');
    if (first == std::string_view::npos || rest.substr(0, first) == instance_) return;
    const size_t second = rest.find(' ', first + 1);
    if (second == std::string_view::npos) return;
    const std::string scope(rest.substr(first + 1, second - first - 1));
    const std::string key(rest.substr(second + 1));
    if (key.empty() || key.find(' ') != std::string::npos) return;
    std::shared_ptr<McpSessionTable> table;
    std::string endpoint;
    {
      std::lock_guard lock(mu_);
      const auto it = sessions_.find(scope);
      if (it == sessions_.end()) return;
      table = it->second.table.lock();
      endpoint = it->second.endpoint;
    }
    // Not published again: the peer did.
    if (table) table->learn(key, endpoint, clock_.now(), /*publish=*/false);
    return;
  }
  // "run <instance> cancel|spend_cap <run id>": a peer cancelled a run, or
  // it reached its spend cap there.
  constexpr std::string_view kRun = "run ";
  if (message.substr(0, kRun.size()) == kRun) {
    const std::string_view rest = message.substr(kRun.size());
    const size_t space = rest.find(' ');
    if (space == std::string_view::npos || rest.substr(0, space) == instance_) return;
    constexpr std::string_view kCancel = "cancel ";
    constexpr std::string_view kSpendCap = "spend_cap ";
    const std::string_view tail = rest.substr(space + 1);
    std::string id;
    RunTable::Ending why = RunTable::Ending::Cancelled;
    if (tail.substr(0, kCancel.size()) == kCancel) {
      id = std::string(tail.substr(kCancel.size()));
    } else if (tail.substr(0, kSpendCap.size()) == kSpendCap) {
      id = std::string(tail.substr(kSpendCap.size()));
      why = RunTable::Ending::SpendCap;
    } else {
      return;
    }
    std::shared_ptr<RunTable> runs;
    {
      std::lock_guard lock(mu_);
      runs = runs_.lock();
    }
    if (!runs || id.empty()) return;
    if (why == RunTable::Ending::SpendCap) {
      runs->capFromPeer(id);
    } else {
      runs->cancel(id, /*from_peer=*/true);
    }
    return;
  }
  // "<scope> <instance> open|closed <open_ms>"
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= message.size() && parts.size() < 5) {
    const size_t space = message.find(' ', start);
    parts.push_back(message.substr(
        start, space == std::string_view::npos ? std::string_view::npos : space - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  if (parts.size() != 4 || parts[1] == instance_) return;
  const CircuitState to = parts[2] == "open" ? CircuitState::Open : CircuitState::Closed;
  if (parts[2] != "open" && parts[2] != "closed") return;
  int64_t open_ms = 0;
  for (char c : parts[3]) {
    if (c < '0' || c > '9' || open_ms > (int64_t{1} << 40)) return;
    open_ms = open_ms * 10 + (c - '0');
  }
  std::vector<std::shared_ptr<CircuitBreaker>> targets;
  {
    std::lock_guard lock(mu_);
    const auto it = circuits_.find(std::string(parts[0]));
    if (it == circuits_.end()) return;
    for (const auto& weak : it->second) {
      if (auto breaker = weak.lock()) targets.push_back(std::move(breaker));
    }
  }
  for (const auto& breaker : targets) breaker->applyPeer(to, milliseconds(open_ms));
}

}  // namespace sluice
