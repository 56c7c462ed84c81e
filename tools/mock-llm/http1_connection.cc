#include "tools/mock-llm/http1_connection.h"

#include <event2/buffer.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "tools/mock-llm/worker.h"

namespace mockllm {

namespace {

constexpr size_t kMaxBody = 64 * 1024 * 1024;
constexpr size_t kMaxQueuedRequests = 1024;
constexpr char kGarbageBytes[] =
    "SSH-2.0-definitely-not-http\r\n\x00\xff\xfe\x15\x03\x01 mock-llm garbage\r\n\r\n";
constexpr std::string_view kGarbage(kGarbageBytes, sizeof(kGarbageBytes) - 1);

char lowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

}  // namespace

Http1Connection::Http1Connection(Worker& worker, bufferevent* bev, uint64_t id)
    : worker_(worker),
      state_(worker.state()),
      bev_(bev),
      timer_(evtimer_new(worker.base(), &Http1Connection::onTimerCb, this)),
      id_(id) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

Http1Connection::~Http1Connection() {
  if (timer_ != nullptr) event_free(timer_);
  if (bev_ != nullptr) bufferevent_free(bev_);
}

void Http1Connection::start() {
  bufferevent_setcb(bev_, &Http1Connection::onReadCb, &Http1Connection::onWriteCb,
                    &Http1Connection::onEventCb, this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
  // A ProtocolDetector may have read the first bytes already.
  if (evbuffer_get_length(bufferevent_get_input(bev_)) > 0) onRead();
}

// --- libevent callbacks ------------------------------------------------------

void Http1Connection::onReadCb(bufferevent*, void* arg) {
  static_cast<Http1Connection*>(arg)->onRead();
}
void Http1Connection::onWriteCb(bufferevent*, void* arg) {
  static_cast<Http1Connection*>(arg)->onWrite();
}
void Http1Connection::onTimerCb(evutil_socket_t, short, void* arg) {
  static_cast<Http1Connection*>(arg)->onTimer();
}

void Http1Connection::onEventCb(bufferevent*, short what, void* arg) {
  auto* self = static_cast<Http1Connection*>(arg);
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) self->peerClosed();
}

void Http1Connection::onRead() {
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

bool Http1Connection::parse(const char* data, size_t len) {
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

void Http1Connection::onWrite() {
  if (closed_) return;
  processMarks();
  if (!active_) return;
  if (active_->player->awaitingDrain()) {
    active_->player->onDrained();
  } else if (active_->flushing && outputLength() == 0) {
    onFlushed();
  }
}

void Http1Connection::onTimer() {
  if (closed_ || !active_) return;
  processMarks();
  if (!active_->flushing) {
    active_->player->onTimer();
  } else if (outputLength() == 0) {
    onFlushed();
  }
}

// --- http-parser callbacks -------------------------------------------------------

namespace {
Http1Connection* self(http_parser* p) { return static_cast<Http1Connection*>(p->data); }
}  // namespace

const http_parser_settings& Http1Connection::parserSettings() {
  static const http_parser_settings settings = [] {
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_message_begin = &Http1Connection::onMessageBegin;
    s.on_url = &Http1Connection::onUrl;
    s.on_header_field = &Http1Connection::onHeaderField;
    s.on_header_value = &Http1Connection::onHeaderValue;
    s.on_headers_complete = &Http1Connection::onHeadersComplete;
    s.on_body = &Http1Connection::onBody;
    s.on_message_complete = &Http1Connection::onMessageComplete;
    return s;
  }();
  return settings;
}

int Http1Connection::onMessageBegin(http_parser* p) {
  Http1Connection* c = self(p);
  c->parsing_ = Request();
  c->header_fields_.reset();
  return 0;
}

int Http1Connection::onUrl(http_parser* p, const char* at, size_t len) {
  self(p)->parsing_.target.append(at, len);
  return 0;
}

void Http1Connection::flushPendingHeader() {
  header_fields_.flush([this](std::string& name, std::string& value) {
    if (name.empty()) return;
    for (char& ch : name) ch = lowerAscii(ch);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    parsing_.headers.emplace_back(std::move(name), std::move(value));
  });
}

int Http1Connection::onHeaderField(http_parser* p, const char* at, size_t len) {
  Http1Connection* c = self(p);
  c->flushPendingHeader();
  c->header_fields_.appendField({at, len});
  return 0;
}

int Http1Connection::onHeaderValue(http_parser* p, const char* at, size_t len) {
  self(p)->header_fields_.appendValue({at, len});
  return 0;
}

int Http1Connection::onHeadersComplete(http_parser* p) {
  Http1Connection* c = self(p);
  c->flushPendingHeader();
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

int Http1Connection::onBody(http_parser* p, const char* at, size_t len) {
  Http1Connection* c = self(p);
  if (c->parsing_.body.size() + len > kMaxBody) return -1;  // parse error → 400
  c->parsing_.body.append(at, len);
  return 0;
}

int Http1Connection::onMessageComplete(http_parser* p) {
  Http1Connection* c = self(p);
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

void Http1Connection::maybeStartNext() {
  if (closed_ || active_ || queue_.empty()) return;
  auto a = std::make_unique<Active>();
  a->req = std::move(queue_.front());
  queue_.pop_front();
  if (a->req.entry == nullptr && a->req.path() == "/_ledger") worker_.syncLedgers();
  a->plan = planResponse(a->req, state_);
  ResponseSink& sink = *this;
  a->player = std::make_unique<ResponsePlayer>(a->plan, a->req.method == "HEAD", sink);
  active_ = std::move(a);
  active_->player->start();
}

void Http1Connection::sendHead() {
  write(http1Head(active_->plan));
  addMark(MarkKind::kHeaders);
}

void Http1Connection::end(Ending how) {
  switch (how) {
    case Ending::kComplete:
      if (active_->plan.chunked) write("0\r\n\r\n");
      addMark(MarkKind::kEnd);
      closeWhenFlushed(active_->plan.keep_alive ? AfterFlush::kNextRequest : AfterFlush::kClose);
      break;
    case Ending::kCloseAfterHeaders:
      closeWhenFlushed(AfterFlush::kClose);
      break;
    case Ending::kReset:
      closeWhenFlushed(AfterFlush::kReset);
      break;
    case Ending::kGarbage:
      write(kGarbage);
      closeWhenFlushed(AfterFlush::kClose);
      break;
  }
}

void Http1Connection::closeWhenFlushed(AfterFlush how) {
  active_->flushing = true;
  active_->after = how;
  // Normally the write callback reports the drain; with nothing queued, a
  // zero timer does (never recurse into the next request from here).
  if (outputLength() == 0) armTimer(std::chrono::milliseconds(0));
}

void Http1Connection::onFlushed() {
  evtimer_del(timer_);
  processMarks();
  const AfterFlush after = active_->after;
  if (const LedgerEntryPtr& entry = active_->req.entry) {
    const int64_t now = monotonicMicros();
    state_.ledger.update(entry, [&](LedgerEntry& e) {
      if (e.finished_us == 0) e.finished_us = now;
      if (after == AfterFlush::kReset) e.mock_reset = true;
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

void Http1Connection::peerClosed() {
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

void Http1Connection::close(bool reset) {
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

void Http1Connection::syncLedger() {
  if (!closed_) processMarks();
}

size_t Http1Connection::outputLength() const {
  return evbuffer_get_length(bufferevent_get_output(bev_));
}

void Http1Connection::write(const char* data, size_t len) {
  bufferevent_write(bev_, data, len);
  bytes_queued_ += len;
}

void Http1Connection::sendBody(std::string_view s) {
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

void Http1Connection::addMark(MarkKind kind, int64_t count) {
  if (active_->req.entry) active_->marks.push_back(Mark{bytes_queued_, kind, count});
}

void Http1Connection::processMarks() {
  if (!active_ || active_->marks.empty() || bev_ == nullptr) return;
  // Bytes that left the output buffer have been handed to the socket (or TLS).
  const uint64_t flushed = bytes_queued_ - outputLength();
  auto& marks = active_->marks;
  if (marks.front().offset > flushed) return;
  const int64_t now = monotonicMicros();
  state_.ledger.update(active_->req.entry, [&](LedgerEntry& e) {
    while (!marks.empty() && marks.front().offset <= flushed) {
      applyMark(e, marks.front().kind, marks.front().count, now);
      marks.pop_front();
    }
  });
}

void Http1Connection::armTimer(std::chrono::milliseconds d) {
  const timeval tv{static_cast<time_t>(d.count() / 1000),
                   static_cast<suseconds_t>((d.count() % 1000) * 1000)};
  evtimer_add(timer_, &tv);
}

}  // namespace mockllm
