#include "proxy/shared_state/redis_client.h"

#include <event2/buffer.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "proxy/event/tls.h"

namespace sluice {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kBackoffFirst{100};
constexpr milliseconds kBackoffMax{2000};
// A connect on a busy machine may need more than a 50 ms call timeout.
constexpr milliseconds kMinConnectTimeout{200};

bool isError(const redisReply* reply) {
  return reply == nullptr || reply->type == REDIS_REPLY_ERROR;
}

// Why a connection failed, for the operational log: a socket error by name.
std::string socketErrorReason(int err) {
  if (err == ECONNREFUSED) return "refused";
  if (err == ETIMEDOUT) return "timeout";
  if (err == 0) return "connection error";
  return std::string("connection error: ") + std::strerror(err);
}

void appendLengthLine(std::string& out, char type, size_t n) {
  char line[24];
  line[0] = type;
  char* end = std::to_chars(line + 1, line + sizeof(line) - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out.append(line, end);
}

template <class Range>
void appendResp(std::string& out, const Range& argv) {
  appendLengthLine(out, '*', std::size(argv));
  for (const auto& a : argv) appendRespBulk(out, std::string_view(std::data(a), std::size(a)));
}

}  // namespace

void appendRespArray(std::string& out, std::initializer_list<std::string_view> argv) {
  appendResp(out, argv);
}

void appendRespArray(std::string& out, const std::vector<std::string>& argv) {
  appendResp(out, argv);
}

std::string respCommandHead(size_t argc, std::initializer_list<std::string_view> head) {
  std::string out;
  appendLengthLine(out, '*', argc);
  for (std::string_view a : head) appendRespBulk(out, a);
  return out;
}

void appendRespBulk(std::string& out, std::string_view arg) { appendRespBulk(out, arg, {}); }

void appendRespBulk(std::string& out, std::string_view first, std::string_view second) {
  // One resize and plain copies: four appends each checked the capacity
  // (a reserve formats three bulk strings per request).
  char line[24];
  line[0] = '$';
  char* line_end =
      std::to_chars(line + 1, line + sizeof(line) - 2, first.size() + second.size()).ptr;
  *line_end++ = '\r';
  *line_end++ = '\n';
  const size_t line_len = static_cast<size_t>(line_end - line);
  const size_t at = out.size();
  out.resize(at + line_len + first.size() + second.size() + 2);
  char* p = out.data() + at;
  std::memcpy(p, line, line_len);
  p += line_len;
  if (!first.empty()) std::memcpy(p, first.data(), first.size());
  p += first.size();
  if (!second.empty()) std::memcpy(p, second.data(), second.size());
  p += second.size();
  p[0] = '\r';
  p[1] = '\n';
}

RedisClient::RedisClient(Dispatcher& dispatcher, const config::RedisUrl& url, SSL_CTX* ssl_ctx,
                         const config::UpstreamTlsConfig& tls, milliseconds timeout, Hooks hooks,
                         std::vector<std::vector<std::string>> init, std::string subscribe_to,
                         Message on_message, milliseconds ping_interval)
    : dispatcher_(dispatcher),
      url_(url),
      ssl_ctx_(ssl_ctx),
      tls_(tls),
      timeout_(timeout),
      hooks_(std::move(hooks)),
      init_(std::move(init)),
      channel_(std::move(subscribe_to)),
      on_message_(std::move(on_message)),
      ping_interval_(ping_interval),
      timer_(dispatcher.base(), [this] { expire(); }) {}

RedisClient::~RedisClient() {
  *alive_ = false;
  dropConnection();
  // Nobody waits for these any more: no callbacks from a destructor.
  pending_.clear();
}

void RedisClient::start() {
  if (state_ != State::Idle && state_ != State::Backoff) return;
  connect_deadline_ = dispatcher_.clock().now() + std::max(timeout_, kMinConnectTimeout);
  setState(State::Connecting);
  // The host name is resolved by the loop's evdns: getaddrinfo() would block the worker.
  BufferEventPtr bev = connectClient(dispatcher_, url_.host, url_.port, ssl_ctx_, tls_);
  if (!bev) {
    fail("connect", "cannot start a connection");
    return;
  }
  io_ = std::make_unique<SocketIo>(dispatcher_.base(), std::move(bev),
                                   static_cast<SocketIoCallbacks&>(*this),
                                   &dispatcher_.writeFlusher());
  reader_ = replies_.makeReader();
  armTimer();
}

void RedisClient::onIoEvent(short events) {
  if ((events & BEV_EVENT_CONNECTED) != 0) {
    // Small commands, each awaited: Nagle would hold one back until the
    // previous one's ACK (hiredis sets TCP_NODELAY too).
    if (const evutil_socket_t fd = io_->fd(); fd >= 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    io_->useSocketIfPlain();  // plain TCP: off the bufferevent from here on
    if (state_ == State::Connecting) handshake();
    return;
  }
  if ((events & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) != 0) {
    const int err = EVUTIL_SOCKET_ERROR();
    std::string reason;
    if ((events & BEV_EVENT_EOF) != 0) {
      reason = "closed by the server";
    } else if ((events & BEV_EVENT_TIMEOUT) != 0) {
      reason = "timeout";
    } else if (ssl_ctx_ != nullptr && err == 0) {
      reason = "tls error";
    } else {
      reason = socketErrorReason(err);
    }
    fail("connect", reason);
  }
}

void RedisClient::handshake() {
  setState(State::Handshake);
  // `what` names the step in the reason (never its arguments: AUTH's are secret).
  const auto step = [this](std::string_view what) {
    return [this, what](const redisReply* reply) {
      // fail() fails the calls after this one too: only the first failure counts.
      if (!isError(reply) || state_ != State::Handshake) return;
      std::string reason(what);
      if (reply != nullptr) {
        // Redis's own words ("WRONGPASS invalid username-password pair"), bounded.
        reason += ": " + std::string(reply->str, std::min<size_t>(reply->len, 120));
      }
      fail("connect", reason);
    };
  };
  std::string resp;
  const auto sendOwned = [&](const std::vector<std::string>& argv, std::string_view what) {
    resp.clear();
    appendRespArray(resp, argv);
    send(resp, step(what), "");
  };
  if (!url_.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!url_.username.empty()) auth.push_back(url_.username);
    auth.push_back(url_.password);
    sendOwned(auth, "auth");
  }
  if (url_.db != 0) sendOwned({"SELECT", std::to_string(url_.db)}, "select");
  for (const auto& argv : init_) sendOwned(argv, "setup");
  // Up once everything before it was answered (replies come in order).
  sendArgv(
      {"PING"},
      [this](const redisReply* reply) {
        if (state_ != State::Handshake) return;
        if (isError(reply)) {
          if (reply != nullptr) {
            fail("connect", "ping: " + std::string(reply->str, std::min<size_t>(reply->len, 120)));
          }
          return;
        }
        // (A subscriber's backoff restarts once its SUBSCRIBE took effect.)
        if (channel_.empty()) backoff_ = milliseconds(0);
        if (!channel_.empty()) {
          // Its confirmation and the messages after it arrive as pushes (onPushed).
          std::string subscribe;
          appendRespArray(subscribe, {"SUBSCRIBE", channel_});
          evbuffer_add(io_->output(), subscribe.data(), subscribe.size());
          if (ping_interval_.count() > 0) {
            next_ping_at_ = dispatcher_.clock().now() + ping_interval_;
            pong_deadline_ = MonotonicTime::max();
          }
        }
        setState(State::Up);
        armTimer();
      },
      "");
}

bool RedisClient::command(std::initializer_list<std::string_view> argv, Reply done,
                          std::string_view op) {
  if (state_ != State::Up || !channel_.empty()) return false;
  return sendArgv(argv, std::move(done), op);
}

bool RedisClient::commandFormatted(std::string_view resp, Reply done, std::string_view op) {
  if (state_ != State::Up || !channel_.empty()) return false;
  return send(resp, std::move(done), op);
}

void RedisClient::flush() {
  if (io_) io_->writeNow();
}

bool RedisClient::sendArgv(std::initializer_list<std::string_view> argv, Reply done,
                           std::string_view op) {
  format_buffer_.clear();
  appendRespArray(format_buffer_, argv);
  return send(format_buffer_, std::move(done), op);
}

bool RedisClient::send(std::string_view resp, Reply done, std::string_view op) {
  if (!io_) return false;
  // SocketIo writes what one loop turn queued in one go, after this returns.
  if (evbuffer_add(io_->output(), resp.data(), resp.size()) != 0) return false;
  pending_.push_back(Pending{dispatcher_.clock().now() + timeout_, std::move(done), op});
  armTimer();
  return true;
}

void RedisClient::onIoRead() {
  // A slice at a time, each parsed before the next is fed: what the reader
  // holds is at most one reply in part (bounded), however much arrived.
  constexpr size_t kSlice = 16 * 1024;
  while (io_ != nullptr) {
    evbuffer* in = io_->input();
    if (evbuffer_get_length(in) == 0) return;
    evbuffer_iovec chunk;
    if (evbuffer_peek(in, -1, nullptr, &chunk, 1) < 1) return;
    const size_t n = std::min(chunk.iov_len, kSlice);
    redisReaderFeed(reader_.get(), static_cast<const char*>(chunk.iov_base), n);
    evbuffer_drain(in, n);
    if (!feedAndDispatch()) return;
  }
}

bool RedisClient::feedAndDispatch() {
  const std::weak_ptr<bool> alive = alive_;
  while (io_ != nullptr) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
      // Not RESP, or past a limit (RedisReplyArena refuses the value):
      // whatever answers there is not a Redis to trust.
      fail("protocol", "protocol error or a reply past the limits");
      return false;
    }
    if (raw == nullptr) break;
    dispatch(RedisReplyArena::reply(raw));
    if (alive.expired()) return false;
    // The reply is done with; its values serve the next one.
    replies_.reset();
  }
  if (io_ == nullptr) return false;
  if (reader_->len - reader_->pos > kMaxBufferedBytes) {
    fail("protocol", "a reply past the limits");
    return false;
  }
  return true;
}

void RedisClient::dispatch(const redisReply* reply) {
  if (pending_.empty()) {
    if (!channel_.empty() && reply->type == REDIS_REPLY_ERROR) {
      // The SUBSCRIBE refused (e.g. NOPERM: the ACL denies the channel): not
      // up as a subscriber; connect again later.
      fail("connect", "subscribe: " + std::string(reply->str, std::min<size_t>(reply->len, 120)));
    } else if (!channel_.empty()) {
      onPushed(reply);
    } else {
      fail("protocol", "a reply nobody asked for");  // the stream is out of step
    }
    return;
  }
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (reply->type == REDIS_REPLY_ERROR && hooks_.on_error && !p.op.empty()) hooks_.on_error(p.op);
  if (p.done) p.done(reply);
}

void RedisClient::onPushed(const redisReply* reply) {
  // ["message", channel, payload]; the subscribe confirmation is ["subscribe", channel, n];
  // a PING's answer is ["pong", ""].
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2) return;
  const redisReply* kind = reply->element[0];
  if (kind->type != REDIS_REPLY_STRING) return;
  const std::string_view what(kind->str, kind->len);
  if (what == "pong") {
    pong_deadline_ = MonotonicTime::max();  // alive: the next PING is already scheduled
    return;
  }
  if (reply->elements != 3) return;
  if (what == "subscribe") {
    backoff_ = milliseconds(0);
    if (hooks_.on_subscribed) hooks_.on_subscribed();
    return;
  }
  if (what != "message") return;
  const redisReply* channel = reply->element[1];
  const redisReply* payload = reply->element[2];
  if (channel->type != REDIS_REPLY_STRING || payload->type != REDIS_REPLY_STRING) return;
  if (on_message_) {
    on_message_(std::string_view(channel->str, channel->len),
                std::string_view(payload->str, payload->len));
  }
}

void RedisClient::armTimer() {
  MonotonicTime at = MonotonicTime::max();
  if (state_ == State::Backoff) at = reconnect_at_;
  if (state_ == State::Connecting) at = connect_deadline_;
  if (!pending_.empty()) at = std::min(at, pending_.front().deadline);
  if (state_ == State::Up) at = std::min({at, next_ping_at_, pong_deadline_});
  if (at == MonotonicTime::max() || at >= timer_at_) return;  // it fires by then and looks again
  timer_at_ = at;
  timer_.arm(at - dispatcher_.clock().now());
}

void RedisClient::expire() {
  timer_at_ = MonotonicTime::max();
  const MonotonicTime now = dispatcher_.clock().now();
  if (state_ == State::Backoff) {
    if (now >= reconnect_at_) {
      start();
      return;
    }
  } else if (state_ == State::Connecting && now >= connect_deadline_) {
    fail("connect", "timeout");
    return;
  } else if (!pending_.empty() && now >= pending_.front().deadline) {
    // The oldest call is overdue: Redis is slow or gone. Fail it and drop the
    // connection (later replies would queue behind it).
    // Every pending call is counted as its own op; a handshake as one connect.
    fail(state_ == State::Handshake ? "connect" : "", "timeout");
    return;
  } else if (state_ == State::Up) {
    onPingTimer(now);
    if (state_ != State::Up) return;
  }
  armTimer();
}

void RedisClient::onPingTimer(MonotonicTime now) {
  if (now >= pong_deadline_) {
    // No pong: the flow is dead (or Redis is). Replaced like any lost connection.
    fail("connect", "timeout: no answer to a keepalive PING");
    return;
  }
  if (now < next_ping_at_ || io_ == nullptr) return;
  std::string ping;
  appendRespArray(ping, {"PING"});
  evbuffer_add(io_->output(), ping.data(), ping.size());
  next_ping_at_ = now + ping_interval_;
  if (pong_deadline_ == MonotonicTime::max()) {
    pong_deadline_ = now + std::max(timeout_, ping_interval_);
  }
}

void RedisClient::fail(std::string_view cause, std::string_view reason) {
  const std::weak_ptr<bool> alive = alive_;
  const bool connecting = state_ != State::Up;
  if (hooks_.on_error && !cause.empty()) hooks_.on_error(cause);
  if (alive.expired()) return;
  if (connecting && hooks_.on_connect_failed) hooks_.on_connect_failed(reason);
  if (alive.expired()) return;
  dropConnection();
  next_ping_at_ = MonotonicTime::max();
  pong_deadline_ = MonotonicTime::max();
  backoff_ = backoff_.count() == 0 ? kBackoffFirst : std::min(backoff_ * 2, kBackoffMax);
  reconnect_at_ = dispatcher_.clock().now() + backoff_;
  setState(State::Backoff, reason);
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

void RedisClient::dropConnection() {
  // SocketIo may be destroyed from inside its own callback (its contract).
  io_.reset();
}

void RedisClient::setState(State state, std::string_view reason) {
  state_ = state;
  const bool up = state == State::Up;
  if (up == reported_up_) return;
  reported_up_ = up;
  if (hooks_.on_state) hooks_.on_state(up, reason);
}

}  // namespace sluice
