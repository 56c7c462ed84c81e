#include "tools/mock-llm/connection.h"

#include <event2/buffer.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "tools/mock-llm/worker.h"

namespace mockllm {

namespace {

// Streams queue tokens until this much output is waiting, then wait for a drain.
constexpr size_t kHighWater = 64 * 1024;
constexpr size_t kMaxBody = 64 * 1024 * 1024;
constexpr size_t kMaxQueuedRequests = 1024;
constexpr char kGarbageBytes[] =
    "SSH-2.0-definitely-not-http\r\n\x00\xff\xfe\x15\x03\x01 mock-llm garbage\r\n\r\n";
constexpr std::string_view kGarbage(kGarbageBytes, sizeof(kGarbageBytes) - 1);

char lowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

}  // namespace

Connection::Connection(Worker& worker, bufferevent* bev, uint64_t id)
    : worker_(worker),
      state_(worker.state()),
      bev_(bev),
      timer_(evtimer_new(worker.base(), &Connection::onTimerCb, this)),
      id_(id) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

Connection::~Connection() {
  if (timer_ != nullptr) event_free(timer_);
  if (bev_ != nullptr) bufferevent_free(bev_);
}

void Connection::start() {
  bufferevent_setcb(bev_, &Connection::onReadCb, &Connection::onWriteCb, &Connection::onEventCb,
                    this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
}

// --- libevent callbacks ------------------------------------------------------

void Connection::onReadCb(bufferevent*, void* arg) { static_cast<Connection*>(arg)->onRead(); }
void Connection::onWriteCb(bufferevent*, void* arg) { static_cast<Connection*>(arg)->onWrite(); }
void Connection::onTimerCb(evutil_socket_t, short, void* arg) {
  static_cast<Connection*>(arg)->onTimer();
}

void Connection::onEventCb(bufferevent*, short what, void* arg) {
  auto* self = static_cast<Connection*>(arg);
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) self->peerClosed();
}

void Connection::onRead() {
  if (closed_) return;
  evbuffer* in = bufferevent_get_input(bev_);
  const size_t total = evbuffer_get_length(in);
  if (!parse_failed_) {
    const int n = evbuffer_peek(in, -1, nullptr, nullptr, 0);
    std::vector<evbuffer_iovec> vec(static_cast<size_t>(n > 0 ? n : 0));
    evbuffer_peek(in, -1, nullptr, vec.data(), n);
    for (const evbuffer_iovec& v : vec) {
      if (!parse(static_cast<const char*>(v.iov_base), v.iov_len)) break;
    }
    if (overflow_) {
      close(false);
      return;
    }
  }
  evbuffer_drain(in, total);
  maybeStartNext();
}

bool Connection::parse(const char* data, size_t len) {
  size_t offset = 0;
  while (offset < len) {
    const size_t parsed =
        http_parser_execute(&parser_, &parserSettings(), data + offset, len - offset);
    if (overflow_) return false;
    const bool error = HTTP_PARSER_ERRNO(&parser_) != HPE_OK;
    if (!error && parser_.upgrade && parser_.method != HTTP_CONNECT) {
      // An Upgrade (e.g. h2c) request is complete; decline by answering in HTTP/1.1.
      parser_.upgrade = 0;
      offset += parsed;
      continue;
    }
    if (error || parser_.upgrade || parsed != len - offset) {
      // Answer what came before in order, then a 400, then close.
      parse_failed_ = true;
      Request bad;
      bad.method = "?";
      bad.target = "/";
      bad.malformed = true;
      bad.keep_alive = false;
      bad.received_us = monotonicMicros();
      bad.entry = makeLedgerEntry(bad, id_, state_);
      state_.ledger.append(bad.entry);
      queue_.push_back(std::move(bad));
      return false;
    }
    offset += parsed;
  }
  return true;
}

void Connection::onWrite() {
  if (closed_) return;
  processMarks();
  if (!active_) return;
  if (active_->awaiting_drain) {
    active_->awaiting_drain = false;
    generate();
  } else if (active_->phase == Phase::kFlushing && outputLength() == 0) {
    onFlushed();
  }
}

void Connection::onTimer() {
  if (closed_ || !active_) return;
  processMarks();
  switch (active_->phase) {
    case Phase::kStallBeforeHeaders:
      afterStall();
      break;
    case Phase::kGenerating:
      generate();
      break;
    case Phase::kFlushing:
      if (outputLength() == 0) onFlushed();
      break;
  }
}

// --- http-parser callbacks -------------------------------------------------------

namespace {
Connection* self(http_parser* p) { return static_cast<Connection*>(p->data); }
}  // namespace

const http_parser_settings& Connection::parserSettings() {
  static const http_parser_settings settings = [] {
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_message_begin = &Connection::onMessageBegin;
    s.on_url = &Connection::onUrl;
    s.on_header_field = &Connection::onHeaderField;
    s.on_header_value = &Connection::onHeaderValue;
    s.on_headers_complete = &Connection::onHeadersComplete;
    s.on_body = &Connection::onBody;
    s.on_message_complete = &Connection::onMessageComplete;
    return s;
  }();
  return settings;
}

int Connection::onMessageBegin(http_parser* p) {
  Connection* c = self(p);
  c->parsing_ = Request();
  c->header_name_.clear();
  c->header_value_.clear();
  c->in_header_value_ = false;
  return 0;
}

int Connection::onUrl(http_parser* p, const char* at, size_t len) {
  self(p)->parsing_.target.append(at, len);
  return 0;
}

void Connection::flushPendingHeader() {
  if (header_name_.empty()) return;
  while (!header_value_.empty() && (header_value_.back() == ' ' || header_value_.back() == '\t')) {
    header_value_.pop_back();
  }
  parsing_.headers.emplace_back(std::move(header_name_), std::move(header_value_));
  header_name_.clear();
  header_value_.clear();
}

int Connection::onHeaderField(http_parser* p, const char* at, size_t len) {
  Connection* c = self(p);
  if (c->in_header_value_) {
    c->flushPendingHeader();
    c->in_header_value_ = false;
  }
  for (size_t i = 0; i < len; ++i) c->header_name_ += lowerAscii(at[i]);
  return 0;
}

int Connection::onHeaderValue(http_parser* p, const char* at, size_t len) {
  Connection* c = self(p);
  c->in_header_value_ = true;
  c->header_value_.append(at, len);
  return 0;
}

int Connection::onHeadersComplete(http_parser* p) {
  Connection* c = self(p);
  c->flushPendingHeader();
  c->in_header_value_ = false;
  Request& r = c->parsing_;
  r.method = http_method_str(static_cast<http_method>(p->method));
  r.http10 = p->http_major == 1 && p->http_minor == 0;
  r.received_us = monotonicMicros();
  // A client waiting for 100-continue gets it when nothing else is being answered.
  if (const std::string* expect = r.header("expect");
      expect != nullptr && c->active_ == nullptr && c->queue_.empty()) {
    std::string v;
    for (char ch : *expect) v += lowerAscii(ch);
    if (v == "100-continue") c->write("HTTP/1.1 100 Continue\r\n\r\n");
  }
  return 0;
}

int Connection::onBody(http_parser* p, const char* at, size_t len) {
  Connection* c = self(p);
  if (c->parsing_.body.size() + len > kMaxBody) return -1;  // parse error → 400
  c->parsing_.body.append(at, len);
  return 0;
}

int Connection::onMessageComplete(http_parser* p) {
  Connection* c = self(p);
  Request& r = c->parsing_;
  r.keep_alive = http_should_keep_alive(p) != 0;
  if (!isControlPath(r.path())) {
    inspectBody(r);
    r.entry = makeLedgerEntry(r, c->id_, c->state_);
    c->state_.ledger.append(r.entry);
  }
  c->queue_.push_back(std::move(r));
  c->parsing_ = Request();
  if (c->queue_.size() > kMaxQueuedRequests) {
    c->overflow_ = true;
    return -1;
  }
  return 0;
}

// --- playing out responses ---------------------------------------------------

void Connection::maybeStartNext() {
  if (closed_ || active_ || queue_.empty()) return;
  auto a = std::make_unique<Active>();
  a->req = std::move(queue_.front());
  queue_.pop_front();
  if (a->req.entry == nullptr && a->req.path() == "/_ledger") worker_.syncLedgers();
  a->plan = planResponse(a->req, state_);
  active_ = std::move(a);
  const int64_t stall = active_->plan.stall_before_headers_ms;
  if (stall > 0) {
    armTimer(std::chrono::milliseconds(stall));
  } else if (stall == 0) {
    afterStall();
  }
  // stall < 0: never answer; only the peer leaving (or stop) ends this.
}

void Connection::afterStall() {
  Active& a = *active_;
  const ResponsePlan& p = a.plan;
  if (p.garbage) {
    write(kGarbage);
    closeWhenFlushed(AfterFlush::kClose);
    return;
  }
  if (p.sse) {
    sendHead();
    if (p.close_after_headers) {
      closeWhenFlushed(AfterFlush::kClose);
      return;
    }
    for (const SsePiece& piece : p.sse->prologue()) {
      writeBody(piece.text);
      if (piece.carries_usage) addMark(MarkKind::kUsage);
    }
  }
  a.phase = Phase::kGenerating;
  generate();
}

void Connection::generate() {
  Active& a = *active_;
  const ResponsePlan& p = a.plan;
  while (true) {
    const int64_t i = a.next_token;
    if (i == p.stall_after_tokens && !a.stall_done) {
      a.stall_done = true;
      if (p.stall_ms < 0) return;  // stalled for good: only the peer leaving ends it
      if (p.stall_ms > 0) {
        armTimer(std::chrono::milliseconds(p.stall_ms));
        return;
      }
    }
    if (i == p.reset_after_tokens) {
      closeWhenFlushed(AfterFlush::kReset);
      return;
    }
    if (i >= p.tokens) {
      finishBody();
      return;
    }
    if (p.sse) {
      writeBody(p.sse->token(i));
      addMark(MarkKind::kTokens, 1);
      a.next_token = i + 1;
    } else if (p.token_interval.count() > 0) {
      a.next_token = i + 1;
    } else {
      // Non-streaming and untimed: jump to the next scripted event.
      int64_t next = p.tokens;
      if (!a.stall_done && p.stall_after_tokens > i) next = std::min(next, p.stall_after_tokens);
      if (p.reset_after_tokens > i) next = std::min(next, p.reset_after_tokens);
      a.next_token = next;
      continue;
    }
    if (a.next_token < p.tokens && p.token_interval.count() > 0) {
      armTimer(p.token_interval);
      return;
    }
    if (outputLength() > kHighWater) {
      a.awaiting_drain = true;
      return;
    }
  }
}

void Connection::finishBody() {
  Active& a = *active_;
  const ResponsePlan& p = a.plan;
  if (p.sse) {
    for (const SsePiece& piece : p.sse->epilogue()) {
      writeBody(piece.text);
      if (piece.carries_usage) addMark(MarkKind::kUsage);
    }
    if (p.chunked) write("0\r\n\r\n");
  } else {
    sendHead();
    if (p.close_after_headers) {
      closeWhenFlushed(AfterFlush::kClose);
      return;
    }
    if (a.req.method != "HEAD") write(p.body);
    if (p.tokens > 0) addMark(MarkKind::kTokens, p.tokens);
    if (p.usage_in_body) addMark(MarkKind::kUsage);
  }
  addMark(MarkKind::kEnd);
  closeWhenFlushed(p.keep_alive ? AfterFlush::kNextRequest : AfterFlush::kClose);
}

void Connection::sendHead() {
  write(active_->plan.head);
  addMark(MarkKind::kHeaders);
}

void Connection::closeWhenFlushed(AfterFlush how) {
  active_->phase = Phase::kFlushing;
  active_->after = how;
  flushThen();
}

void Connection::flushThen() {
  // Normally the write callback reports the drain; with nothing queued, a
  // zero timer does (never recurse into the next request from here).
  if (outputLength() == 0) armTimer(std::chrono::milliseconds(0));
}

void Connection::onFlushed() {
  evtimer_del(timer_);
  processMarks();
  const AfterFlush after = active_->after;
  if (const LedgerEntryPtr& entry = active_->req.entry) {
    const int64_t now = monotonicMicros();
    state_.ledger.update(entry, [&](LedgerEntry& e) {
      if (e.finished_us == 0) e.finished_us = now;
    });
  }
  active_.reset();
  switch (after) {
    case AfterFlush::kNextRequest:
      maybeStartNext();
      break;
    case AfterFlush::kClose:
      close(false);
      break;
    case AfterFlush::kReset:
      close(true);
      break;
  }
}

void Connection::peerClosed() {
  if (closed_) return;
  processMarks();
  const int64_t now = monotonicMicros();
  const auto markClosed = [&](const LedgerEntryPtr& entry) {
    if (!entry) return;
    state_.ledger.update(entry, [&](LedgerEntry& e) {
      if (e.completed) return;
      e.peer_closed = true;
      e.peer_closed_us = now;
      if (e.finished_us == 0) e.finished_us = now;
    });
  };
  if (active_) markClosed(active_->req.entry);
  for (const Request& r : queue_) markClosed(r.entry);
  close(false);
}

void Connection::close(bool reset) {
  if (closed_) return;
  closed_ = true;
  if (timer_ != nullptr) {
    event_free(timer_);
    timer_ = nullptr;
  }
  if (bev_ != nullptr) {
    if (reset) {
      // SO_LINGER {on, 0}: close() sends RST instead of FIN.
      const evutil_socket_t fd = bufferevent_getfd(bev_);
      const linger lg{1, 0};
      if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    bufferevent_free(bev_);
    bev_ = nullptr;
  }
  // Requests still queued will never be answered.
  const int64_t now = monotonicMicros();
  for (const Request& r : queue_) {
    if (!r.entry) continue;
    state_.ledger.update(r.entry, [&](LedgerEntry& e) {
      if (e.finished_us == 0) e.finished_us = now;
    });
  }
  active_.reset();
  queue_.clear();
  worker_.retire(this);
}

// --- output and ledger bookkeeping --------------------------------------------

void Connection::syncLedger() {
  if (!closed_) processMarks();
}

size_t Connection::outputLength() const {
  return evbuffer_get_length(bufferevent_get_output(bev_));
}

void Connection::write(const char* data, size_t len) {
  bufferevent_write(bev_, data, len);
  bytes_queued_ += len;
}

void Connection::writeBody(std::string_view s) {
  if (!active_->plan.chunked) {
    write(s);
    return;
  }
  char size_line[24];
  const int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", s.size());
  write(size_line, static_cast<size_t>(n));
  write(s);
  write("\r\n", 2);
}

void Connection::addMark(MarkKind kind, int64_t count) {
  if (active_->req.entry) active_->marks.push_back(Mark{bytes_queued_, kind, count});
}

void Connection::processMarks() {
  if (!active_ || active_->marks.empty() || bev_ == nullptr) return;
  // Bytes that left the output buffer have been handed to the socket (or TLS).
  const uint64_t flushed = bytes_queued_ - outputLength();
  auto& marks = active_->marks;
  if (marks.front().offset > flushed) return;
  const int64_t now = monotonicMicros();
  state_.ledger.update(active_->req.entry, [&](LedgerEntry& e) {
    while (!marks.empty() && marks.front().offset <= flushed) {
      const Mark& m = marks.front();
      switch (m.kind) {
        case MarkKind::kHeaders:
          e.headers_sent_us = now;
          break;
        case MarkKind::kTokens:
          e.tokens_emitted += m.count;
          e.last_token_us = now;
          break;
        case MarkKind::kUsage:
          e.usage_reported = true;
          break;
        case MarkKind::kEnd:
          e.completed = true;
          e.finished_us = now;
          break;
      }
      marks.pop_front();
    }
  });
}

void Connection::armTimer(std::chrono::milliseconds d) {
  const timeval tv{static_cast<time_t>(d.count() / 1000),
                   static_cast<suseconds_t>((d.count() % 1000) * 1000)};
  evtimer_add(timer_, &tv);
}

}  // namespace mockllm
