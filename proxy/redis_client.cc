#include "proxy/redis_client.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <hiredis/adapters/libevent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

namespace sluice {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kBackoffFirst{100};
constexpr milliseconds kBackoffMax{2000};
// A connect on a busy machine may need more than a 50 ms call timeout.
constexpr milliseconds kMinConnectTimeout{200};

bool isIpLiteral(const std::string& host) {
  in6_addr addr6;
  in_addr addr4;
  return inet_pton(AF_INET, host.c_str(), &addr4) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &addr6) == 1;
}

bool isError(const redisReply* reply) {
  return reply == nullptr || reply->type == REDIS_REPLY_ERROR;
}

}  // namespace

RedisClient::RedisClient(Dispatcher& dispatcher, const config::RedisUrl& url, milliseconds timeout,
                         Hooks hooks, std::vector<std::vector<std::string>> init,
                         std::string subscribe_to, Message on_message)
    : dispatcher_(dispatcher),
      url_(url),
      timeout_(timeout),
      hooks_(std::move(hooks)),
      init_(std::move(init)),
      channel_(std::move(subscribe_to)),
      on_message_(std::move(on_message)),
      timer_(dispatcher.base(), [this] { expire(); }) {}

RedisClient::~RedisClient() {
  *alive_ = false;
  if (resolving_ != nullptr) evdns_getaddrinfo_cancel(resolving_);
  resolving_ = nullptr;
  dropContext();
  // Nobody waits for these any more: no callbacks from a destructor.
  pending_.clear();
}

void RedisClient::start() {
  if (state_ != State::Idle && state_ != State::Backoff) return;
  connect_deadline_ = dispatcher_.clock().now() + std::max(timeout_, kMinConnectTimeout);
  if (isIpLiteral(url_.host)) {
    connectTo(url_.host);
  } else {
    // getaddrinfo() would block the worker: resolve with the loop's evdns.
    setState(State::Resolving);
    evutil_addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    resolving_ = evdns_getaddrinfo(dispatcher_.dns(), url_.host.c_str(), nullptr, &hints,
                                   &RedisClient::onResolved, this);
  }
  armTimer();
}

void RedisClient::onResolved(int result, evutil_addrinfo* res, void* arg) {
  auto* self = static_cast<RedisClient*>(arg);
  if (result == EVUTIL_EAI_CANCEL) {
    if (res != nullptr) evutil_freeaddrinfo(res);
    return;
  }
  self->resolving_ = nullptr;
  if (result != 0 || res == nullptr) {
    if (res != nullptr) evutil_freeaddrinfo(res);
    self->fail("connect");
    return;
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      res->ai_family == AF_INET6
          ? static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6*>(res->ai_addr)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr);
  evutil_inet_ntop(res->ai_family, addr, text, sizeof(text));
  evutil_freeaddrinfo(res);
  self->connectTo(text);
}

void RedisClient::connectTo(const std::string& ip) {
  setState(State::Connecting);
  // An IP literal: hiredis's getaddrinfo() returns at once, nothing blocks.
  ac_ = redisAsyncConnect(ip.c_str(), url_.port);
  if (ac_ == nullptr || ac_->err != 0) {
    if (ac_ != nullptr) redisAsyncFree(ac_);
    ac_ = nullptr;
    fail("connect");
    return;
  }
  ac_->data = this;
  redisLibeventAttach(ac_, dispatcher_.base());
  redisAsyncSetConnectCallback(ac_, &RedisClient::onConnect);
  redisAsyncSetDisconnectCallback(ac_, &RedisClient::onDisconnect);
}

void RedisClient::onConnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self == nullptr || ac != self->ac_) return;
  if (status != REDIS_OK) {
    self->ac_ = nullptr;  // hiredis frees a context whose connect failed
    self->fail("connect");
    return;
  }
  self->handshake();
}

void RedisClient::onDisconnect(const redisAsyncContext* ac, int) {
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self == nullptr || ac != self->ac_) return;  // we dropped it ourselves
  self->ac_ = nullptr;                             // hiredis frees it after this callback
  self->fail("connect");
}

void RedisClient::handshake() {
  setState(State::Handshake);
  const auto step = [this](const redisReply* reply) {
    if (isError(reply)) fail("connect");
  };
  if (!url_.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!url_.username.empty()) auth.push_back(url_.username);
    auth.push_back(url_.password);
    send(auth, step, "");
  }
  if (url_.db != 0) send({"SELECT", std::to_string(url_.db)}, step, "");
  for (const auto& argv : init_) send(argv, step, "");
  // Up once everything before it was answered (replies come in order).
  send(
      {"PING"},
      [this](const redisReply* reply) {
        if (isError(reply) || state_ != State::Handshake) return;
        backoff_ = milliseconds(0);
        if (!channel_.empty()) {
          std::vector<const char*> argv{"SUBSCRIBE", channel_.c_str()};
          std::vector<size_t> lens{9, channel_.size()};
          redisAsyncCommandArgv(ac_, &RedisClient::onMessageReply, nullptr, 2, argv.data(),
                                lens.data());
        }
        setState(State::Up);
      },
      "");
}

bool RedisClient::command(const std::vector<std::string>& argv, Reply done, std::string_view op) {
  if (state_ != State::Up || !channel_.empty()) return false;
  return send(argv, std::move(done), op);
}

void appendRespArray(std::string& out, const std::vector<std::string>& argv) {
  char digits[24];
  const auto appendLine = [&](char type, size_t n) {
    const auto r = std::to_chars(digits, digits + sizeof(digits), n);
    out.push_back(type);
    out.append(digits, r.ptr);
    out.append("\r\n", 2);
  };
  appendLine('*', argv.size());
  for (const std::string& a : argv) {
    appendLine('$', a.size());
    out.append(a);
    out.append("\r\n", 2);
  }
}

bool RedisClient::send(const std::vector<std::string>& argv, Reply done, std::string_view op) {
  if (ac_ == nullptr) return false;
  // RESP formatted here, into one reused buffer: hiredis's own argv
  // formatting (sds strings grown piece by piece) was ~10k instructions of
  // the two calls an admitted request makes (bench/profile.py --shared-state).
  format_buffer_.clear();
  appendRespArray(format_buffer_, argv);
  const uint64_t id = next_id_++;
  if (redisAsyncFormattedCommand(ac_, &RedisClient::onReply, reinterpret_cast<void*>(id),
                                 format_buffer_.data(), format_buffer_.size()) != REDIS_OK) {
    return false;
  }
  pending_.push_back(
      Pending{id, dispatcher_.clock().now() + timeout_, std::move(done), std::string(op)});
  armTimer();
  return true;
}

void RedisClient::onReply(redisAsyncContext* ac, void* reply, void* privdata) {
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self == nullptr || ac != self->ac_) return;  // a dropped connection's leftovers
  const auto id = reinterpret_cast<uint64_t>(privdata);
  // Replies come in order: anything before `id` was failed by a timeout already.
  while (!self->pending_.empty() && self->pending_.front().id < id) self->pending_.pop_front();
  if (self->pending_.empty() || self->pending_.front().id != id) return;
  Pending p = std::move(self->pending_.front());
  self->pending_.pop_front();
  const auto* r = static_cast<const redisReply*>(reply);
  const std::weak_ptr<bool> alive = self->alive_;
  if (isError(r) && self->hooks_.on_error && !p.op.empty()) {
    self->hooks_.on_error(p.op);
  }
  if (p.done) p.done(r);
  if (alive.expired()) return;
  self->armTimer();
}

void RedisClient::onMessageReply(redisAsyncContext* ac, void* reply, void*) {
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self == nullptr || ac != self->ac_ || reply == nullptr) return;
  const auto* r = static_cast<const redisReply*>(reply);
  // ["message", channel, payload]; the subscribe confirmation is ["subscribe", channel, n].
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
  const redisReply* kind = r->element[0];
  if (kind->type != REDIS_REPLY_STRING || std::string_view(kind->str, kind->len) != "message") {
    return;
  }
  if (self->on_message_) {
    self->on_message_(std::string_view(r->element[1]->str, r->element[1]->len),
                      std::string_view(r->element[2]->str, r->element[2]->len));
  }
}

void RedisClient::armTimer() {
  MonotonicTime at = MonotonicTime::max();
  if (state_ == State::Backoff) at = reconnect_at_;
  if (state_ == State::Resolving || state_ == State::Connecting) at = connect_deadline_;
  if (!pending_.empty()) at = std::min(at, pending_.front().deadline);
  if (at == MonotonicTime::max()) {
    timer_.disarm();
    return;
  }
  timer_.arm(at - dispatcher_.clock().now());
}

void RedisClient::expire() {
  const MonotonicTime now = dispatcher_.clock().now();
  if (state_ == State::Backoff) {
    if (now >= reconnect_at_) {
      start();
      return;
    }
  } else if ((state_ == State::Resolving || state_ == State::Connecting) &&
             now >= connect_deadline_) {
    fail("connect");
    return;
  } else if (!pending_.empty() && now >= pending_.front().deadline) {
    // The oldest call is overdue: Redis is slow or gone. Fail it and drop the
    // connection (later replies would queue behind it).
    // Every pending call is counted as its own op; a handshake as one connect.
    fail(state_ == State::Handshake ? "connect" : "");
    return;
  }
  armTimer();
}

void RedisClient::fail(std::string_view cause) {
  const std::weak_ptr<bool> alive = alive_;
  if (hooks_.on_error && !cause.empty()) hooks_.on_error(cause);
  if (resolving_ != nullptr) {
    evdns_getaddrinfo_cancel(resolving_);
    resolving_ = nullptr;
  }
  dropContext();
  backoff_ = backoff_.count() == 0 ? kBackoffFirst : std::min(backoff_ * 2, kBackoffMax);
  reconnect_at_ = dispatcher_.clock().now() + backoff_;
  setState(State::Backoff);
  if (alive.expired()) return;
  // Everything still waiting fails now (each counted once, as its op).
  std::deque<Pending> failed;
  failed.swap(pending_);
  for (Pending& p : failed) {
    if (hooks_.on_error && !p.op.empty()) hooks_.on_error(p.op);
    if (p.done) p.done(nullptr);
    if (alive.expired()) return;
  }
  armTimer();
}

void RedisClient::dropContext() {
  redisAsyncContext* ac = ac_;
  ac_ = nullptr;  // callbacks hiredis makes while freeing see a stranger and return
  if (ac != nullptr) redisAsyncFree(ac);
}

void RedisClient::setState(State state) {
  state_ = state;
  const bool up = state == State::Up;
  if (up == reported_up_) return;
  reported_up_ = up;
  if (hooks_.on_state) hooks_.on_state(up);
}

}  // namespace sluice
