#include "tools/mock-llm/http2_connection.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "tools/mock-llm/router.h"
#include "tools/mock-llm/worker.h"

namespace mockllm {

namespace {

// Frames wait in nghttp2 while this much output is unsent.
constexpr size_t kOutputHighWater = 64 * 1024;
constexpr size_t kMaxBody = 64 * 1024 * 1024;
// Bounds one sendPending(): each round lets drained streams refill their buffers.
constexpr int kMaxSendRounds = 64;

std::string_view view(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

nghttp2_nv header(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

std::string lowerAscii(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

}  // namespace

// --- one stream ------------------------------------------------------------------

/**
 * One request/response on the connection and the ResponseSink of its player.
 * Body pieces wait in `pending` until nghttp2's data provider takes them — at
 * most one piece per DATA frame, so every SSE event travels in its own frame
 * as it does in its own chunk on HTTP/1.1. Ledger marks are kept by body
 * offset until the DATA frame carrying them is written, then move to the
 * connection's marks by output offset.
 */
class Http2Connection::Stream final : public ResponseSink {
 public:
  // How the stream ended, as far as the mock is concerned.
  enum class Outcome { kOpen, kEnded, kMockReset, kRefused, kClientReset };

  struct BodyMark {
    uint64_t offset;  // in body bytes
    MarkKind kind;
    int64_t count;
  };

  Stream(Http2Connection& conn, int32_t id)
      : conn(conn), id(id), timer(evtimer_new(conn.worker_.base(), &Stream::onTimerCb, this)) {}
  ~Stream() override {
    if (timer != nullptr) event_free(timer);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /** Plans the answer and starts playing it (or refuses the stream). */
  void answer();
  /** The data provider: hands nghttp2 up to `length` body bytes. */
  ssize_t readBody(uint8_t* buf, size_t length, uint32_t* data_flags);
  /** True once every byte of this stream has left the connection's output. */
  bool flushed() const;
  /** x-mock-reset-after-tokens / close-after-headers, once flushed. */
  void resetByMock();

  // ResponseSink
  void sendHead() override;
  void sendBody(std::string_view data) override;
  void addMark(MarkKind kind, int64_t count = 0) override;
  size_t unsentBytes() const override { return pending_bytes; }
  void armTimer(std::chrono::milliseconds delay) override;
  void end(Ending how) override;

  Http2Connection& conn;
  const int32_t id;
  event* timer;

  // The request as it arrives.
  Request req;
  std::string authority;
  bool body_too_large = false;

  // The response.
  ResponsePlan plan;
  std::unique_ptr<ResponsePlayer> player;
  Outcome outcome = Outcome::kOpen;
  std::deque<std::string> pending;  // body pieces nghttp2 has not taken (yet)
  size_t pending_offset = 0;        // bytes of pending.front() already taken
  size_t pending_bytes = 0;         // bytes waiting in `pending`
  std::deque<BodyMark> body_marks;
  uint64_t body_queued = 0;     // body bytes ever written
  uint64_t body_taken = 0;      // body bytes taken by the data provider
  uint64_t body_sent = 0;       // body bytes in DATA frames already written
  uint64_t last_frame_end = 0;  // connection offset after this stream's last written frame
  bool head_submitted = false;
  bool headers_sent = false;
  bool deferred = false;  // the data provider returned NGHTTP2_ERR_DEFERRED
  bool eof = false;       // the body is complete: END_STREAM after `pending`

 private:
  static void onTimerCb(evutil_socket_t fd, short what, void* arg);
  void resume();
  void record(const std::function<void(LedgerEntry&)>& mutate);
};

void Http2Connection::Stream::onTimerCb(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Stream*>(arg);
  Http2Connection& conn = self->conn;  // the stream may be gone after sendPending()
  if (conn.closed_) return;
  conn.processMarks();
  if (self->player) self->player->onTimer();
  conn.sendPending();
}

void Http2Connection::Stream::record(const std::function<void(LedgerEntry&)>& mutate) {
  if (req.entry) conn.state_.ledger.update(req.entry, mutate);
}

void Http2Connection::Stream::answer() {
  if (req.entry == nullptr && req.path() == "/_ledger") conn.worker_.syncLedgers();
  plan = planResponse(req, conn.state_);
  const int64_t now = monotonicMicros();
  switch (plan.refusal) {
    case Refusal::kRefuseStream:
      nghttp2_submit_rst_stream(conn.session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
      outcome = Outcome::kRefused;
      record([&](LedgerEntry& e) {
        e.refused = true;
        e.mock_rst_error_code = NGHTTP2_REFUSED_STREAM;
        e.finished_us = now;
      });
      return;
    case Refusal::kGoaway:
      conn.goawayBelow(id);
      outcome = Outcome::kRefused;
      record([&](LedgerEntry& e) {
        e.refused = true;
        e.finished_us = now;
      });
      return;
    case Refusal::kNone:
      break;
  }
  player = std::make_unique<ResponsePlayer>(plan, req.method == "HEAD", *this);
  player->start();
}

void Http2Connection::Stream::sendHead() {
  // HTTP/2 field names are lower-case; values go out verbatim.
  std::vector<std::pair<std::string, std::string>> fields;
  fields.reserve(plan.headers.size() + 1);
  fields.emplace_back(":status", std::to_string(plan.status));
  for (const auto& [name, value] : plan.headers) fields.emplace_back(lowerAscii(name), value);
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& [name, value] : fields) nva.push_back(header(name, value));
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = &Http2Connection::readBody;
  nghttp2_submit_response(conn.session_, id, nva.data(), nva.size(), &provider);
  head_submitted = true;
}

void Http2Connection::Stream::sendBody(std::string_view data) {
  if (data.empty()) return;
  pending.emplace_back(data);
  pending_bytes += data.size();
  body_queued += data.size();
  resume();
}

void Http2Connection::Stream::addMark(MarkKind kind, int64_t count) {
  if (req.entry) body_marks.push_back(BodyMark{body_queued, kind, count});
}

void Http2Connection::Stream::armTimer(std::chrono::milliseconds d) {
  const timeval tv{static_cast<time_t>(d.count() / 1000),
                   static_cast<suseconds_t>((d.count() % 1000) * 1000)};
  evtimer_add(timer, &tv);
}

void Http2Connection::Stream::end(Ending how) {
  switch (how) {
    case Ending::kComplete:
      addMark(MarkKind::kEnd);
      eof = true;
      resume();
      break;
    case Ending::kCloseAfterHeaders:
    case Ending::kReset:
      // Like HTTP/1.1: what was written leaves first, then the reset.
      conn.resets_.push_back(id);
      break;
    case Ending::kGarbage:
      conn.terminate();
      break;
  }
}

void Http2Connection::Stream::resume() {
  if (!deferred || !head_submitted) return;
  deferred = false;
  nghttp2_session_resume_data(conn.session_, id);
}

ssize_t Http2Connection::Stream::readBody(uint8_t* buf, size_t length, uint32_t* data_flags) {
  size_t n = 0;
  if (!pending.empty()) {
    const std::string& piece = pending.front();
    n = std::min(length, piece.size() - pending_offset);
    std::memcpy(buf, piece.data() + pending_offset, n);
    pending_offset += n;
    if (pending_offset == piece.size()) {
      pending.pop_front();
      pending_offset = 0;
    }
  }
  pending_bytes -= n;
  body_taken += n;
  while (!body_marks.empty() && body_marks.front().offset <= body_taken) {
    const BodyMark& m = body_marks.front();
    conn.packed_.push_back(Mark{0, req.entry, m.kind, m.count});
    body_marks.pop_front();
  }
  if (!pending.empty()) return static_cast<ssize_t>(n);
  if (eof) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    outcome = Outcome::kEnded;
    return static_cast<ssize_t>(n);
  }
  if (player && player->awaitingDrain()) conn.drained_.push_back(id);
  if (n == 0) {
    deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

bool Http2Connection::Stream::flushed() const {
  return body_sent == body_queued && (!head_submitted || headers_sent) &&
         last_frame_end <= conn.flushedOffset();
}

void Http2Connection::Stream::resetByMock() {
  nghttp2_submit_rst_stream(conn.session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
  outcome = Outcome::kMockReset;
  const int64_t now = monotonicMicros();
  record([&](LedgerEntry& e) {
    e.mock_reset = true;
    e.mock_rst_error_code = NGHTTP2_INTERNAL_ERROR;
    if (e.finished_us == 0) e.finished_us = now;
  });
}

// --- the connection ------------------------------------------------------------------

Http2Connection::Http2Connection(Worker& worker, bufferevent* bev, uint64_t id)
    : worker_(worker), state_(worker.state()), bev_(bev), id_(id) {}

Http2Connection::~Http2Connection() {
  if (session_ != nullptr) nghttp2_session_del(session_);
  streams_.clear();
  if (bev_ != nullptr) bufferevent_free(bev_);
}

nghttp2_session_callbacks* Http2Connection::makeCallbacks() {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return nullptr;
  nghttp2_session_callbacks_set_send_callback(cbs, &Http2Connection::onSend);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &Http2Connection::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Http2Connection::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Http2Connection::onDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Http2Connection::onFrameRecv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &Http2Connection::onFrameSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Http2Connection::onStreamClose);
  return cbs;
}

void Http2Connection::start() {
  nghttp2_session_callbacks* cbs = makeCallbacks();
  const int rv = cbs == nullptr ? -1 : nghttp2_session_server_new(&session_, cbs, this);
  if (cbs != nullptr) nghttp2_session_callbacks_del(cbs);
  if (rv != 0) {
    session_ = nullptr;
    close();
    return;
  }
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, worker_.http2Settings().max_concurrent_streams}};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  bufferevent_setcb(bev_, &Http2Connection::onReadCb, &Http2Connection::onWriteCb,
                    &Http2Connection::onEventCb, this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
  // The ProtocolDetector has read the client preface (or more) already.
  if (evbuffer_get_length(bufferevent_get_input(bev_)) > 0) {
    onRead();
  } else {
    sendPending();
  }
}

// --- libevent callbacks ----------------------------------------------------------

void Http2Connection::onReadCb(bufferevent*, void* arg) {
  static_cast<Http2Connection*>(arg)->onRead();
}
void Http2Connection::onWriteCb(bufferevent*, void* arg) {
  static_cast<Http2Connection*>(arg)->onWrite();
}
void Http2Connection::onEventCb(bufferevent*, short what, void* arg) {
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) static_cast<Http2Connection*>(arg)->peerClosed();
}

void Http2Connection::onRead() {
  if (closed_) return;
  evbuffer* in = bufferevent_get_input(bev_);
  const size_t total = evbuffer_get_length(in);
  const int n = evbuffer_peek(in, -1, nullptr, nullptr, 0);
  std::vector<evbuffer_iovec> vec(static_cast<size_t>(n > 0 ? n : 0));
  evbuffer_peek(in, -1, nullptr, vec.data(), n);
  for (const evbuffer_iovec& v : vec) {
    const ssize_t rv =
        nghttp2_session_mem_recv(session_, static_cast<const uint8_t*>(v.iov_base), v.iov_len);
    if (rv < 0) {
      // Not HTTP/2 after all, or a fatal session error: nothing sensible to answer.
      close();
      return;
    }
  }
  evbuffer_drain(in, total);
  processMarks();
  startReadyStreams();
  sendPending();
}

void Http2Connection::onWrite() {
  if (closed_) return;
  processMarks();
  if (closing_) {
    if (outputLength() == 0) close();
    return;
  }
  sendPending();
}

void Http2Connection::peerClosed() {
  if (closed_) return;
  processMarks();
  const int64_t now = monotonicMicros();
  for (const auto& [stream_id, stream] : streams_) {
    if (!stream->req.entry) continue;
    state_.ledger.update(stream->req.entry, [&](LedgerEntry& e) {
      if (e.completed || e.finished_us != 0) return;
      e.peer_closed = true;
      e.peer_closed_us = now;
      e.finished_us = now;
    });
  }
  close();
}

// --- sending --------------------------------------------------------------------------

void Http2Connection::sendPending() {
  if (closed_ || sending_) return;
  sending_ = true;
  bool failed = false;
  for (int round = 0; round < kMaxSendRounds; ++round) {
    if (nghttp2_session_send(session_) != 0) {
      failed = true;
      break;
    }
    if (!serviceStreams()) break;
  }
  sending_ = false;
  if (failed) {
    close();
  } else if (nghttp2_session_want_read(session_) == 0 &&
             nghttp2_session_want_write(session_) == 0) {
    closeWhenFlushed();
  }
}

bool Http2Connection::serviceStreams() {
  bool acted = false;
  std::vector<int32_t> drained;
  drained.swap(drained_);
  for (const int32_t stream_id : drained) {
    Stream* s = find(stream_id);
    if (s == nullptr || !s->player || !s->player->awaitingDrain()) continue;
    s->player->onDrained();
    acted = true;
  }
  std::vector<int32_t> waiting;
  for (const int32_t stream_id : resets_) {
    Stream* s = find(stream_id);
    if (s == nullptr || s->outcome != Stream::Outcome::kOpen) continue;
    if (!s->flushed()) {
      waiting.push_back(stream_id);
      continue;
    }
    processMarks();
    s->resetByMock();
    acted = true;
  }
  resets_.swap(waiting);
  return acted;
}

ssize_t Http2Connection::onSend(nghttp2_session*, const uint8_t* data, size_t length, int,
                                void* user_data) {
  auto* self = static_cast<Http2Connection*>(user_data);
  if (self->bev_ == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (self->outputLength() >= kOutputHighWater) return NGHTTP2_ERR_WOULDBLOCK;
  bufferevent_write(self->bev_, data, length);
  self->bytes_queued_ += length;
  return static_cast<ssize_t>(length);
}

ssize_t Http2Connection::readBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                  uint32_t* data_flags, nghttp2_data_source* source, void*) {
  return static_cast<Stream*>(source->ptr)->readBody(buf, length, data_flags);
}

int Http2Connection::onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Connection*>(user_data);
  // The frame that carried the packed marks' bytes is in the output now.
  for (Mark& m : self->packed_) {
    m.offset = self->bytes_queued_;
    self->marks_.push_back(std::move(m));
  }
  self->packed_.clear();
  Stream* s = self->find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  s->last_frame_end = self->bytes_queued_;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    s->headers_sent = true;
    if (s->req.entry) {
      self->marks_.push_back(Mark{self->bytes_queued_, s->req.entry, MarkKind::kHeaders, 0});
    }
  } else if (frame->hd.type == NGHTTP2_DATA) {
    s->body_sent = s->body_taken;
  }
  return 0;
}

// --- receiving ------------------------------------------------------------------------

int Http2Connection::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Connection*>(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  const int32_t stream_id = frame->hd.stream_id;
  self->streams_[stream_id] = std::make_unique<Stream>(*self, stream_id);
  return 0;
}

int Http2Connection::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                              size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                              void* user_data) {
  Stream* s = static_cast<Http2Connection*>(user_data)->find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  const std::string_view n = view(name, namelen);
  const std::string_view v = view(value, valuelen);
  if (n == ":method") {
    s->req.method = v;
  } else if (n == ":path") {
    s->req.target = v;
  } else if (n == ":authority") {
    s->authority = v;
  } else if (!n.empty() && n.front() != ':') {
    s->req.headers.emplace_back(n, v);
  }
  return 0;
}

int Http2Connection::onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                                 size_t len, void* user_data) {
  Stream* s = static_cast<Http2Connection*>(user_data)->find(stream_id);
  if (s == nullptr || s->body_too_large) return 0;
  if (s->req.body.size() + len > kMaxBody) {
    s->body_too_large = true;  // answered with 400 once the request ends
    s->req.body.clear();
    return 0;
  }
  s->req.body.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int Http2Connection::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Connection*>(user_data);
  Stream* s = self->find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
      if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) s->req.received_us = monotonicMicros();
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) self->requestComplete(*s);
      break;
    case NGHTTP2_DATA:
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) self->requestComplete(*s);
      break;
    case NGHTTP2_RST_STREAM:
      self->clientReset(*s, frame->rst_stream.error_code);
      break;
    default:
      break;
  }
  return 0;
}

int Http2Connection::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data) {
  auto* self = static_cast<Http2Connection*>(user_data);
  if (Stream* s = self->find(stream_id)) self->streamClosed(*s);
  return 0;
}

void Http2Connection::requestComplete(Stream& s) {
  Request& r = s.req;
  r.protocol = Protocol::kHttp2;
  r.stream_id = s.id;
  r.keep_alive = true;
  // Like an HTTP/2-to-1.1 gateway: :authority stands in for a missing Host.
  if (!s.authority.empty() && r.header("host") == nullptr) {
    r.headers.insert(r.headers.begin(), {"host", s.authority});
  }
  r.malformed = s.body_too_large;
  if (!isControlPath(r.path())) {
    inspectBody(r);
    r.entry = makeLedgerEntry(r, id_, state_);
    state_.ledger.append(r.entry);
  }
  ready_.push_back(s.id);
}

void Http2Connection::startReadyStreams() {
  std::vector<int32_t> ready;
  ready.swap(ready_);
  for (const int32_t stream_id : ready) {
    if (Stream* s = find(stream_id)) s->answer();
  }
}

void Http2Connection::clientReset(Stream& s, uint32_t error_code) {
  if (s.outcome != Stream::Outcome::kOpen && s.outcome != Stream::Outcome::kEnded) return;
  s.outcome = Stream::Outcome::kClientReset;
  const LedgerEntryPtr& entry = s.req.entry;
  if (!entry) return;  // the request had not been received whole: nothing was recorded
  processMarks();
  dropMarks(entry);
  const int64_t now = monotonicMicros();
  state_.ledger.update(entry, [&](LedgerEntry& e) {
    if (e.completed) return;
    e.peer_closed = true;
    e.peer_closed_us = now;
    e.client_reset = true;
    e.rst_error_code = error_code;
    if (e.finished_us == 0) e.finished_us = now;
  });
}

void Http2Connection::streamClosed(Stream& s) {
  // Streams above the last-stream-id of our GOAWAY were not processed.
  if (s.outcome == Stream::Outcome::kOpen && s.req.entry) {
    const bool refused = goaway_last_stream_id_ && s.id > *goaway_last_stream_id_;
    const int64_t now = monotonicMicros();
    state_.ledger.update(s.req.entry, [&](LedgerEntry& e) {
      if (refused) e.refused = true;
      if (e.finished_us == 0) e.finished_us = now;
    });
  }
  streams_.erase(s.id);
}

// --- ending the connection ---------------------------------------------------------

void Http2Connection::goawayBelow(int32_t stream_id) {
  const int32_t last = std::max(0, stream_id - 2);
  goaway_last_stream_id_ = std::min(last, goaway_last_stream_id_.value_or(last));
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, nullptr, 0);
}

void Http2Connection::terminate() {
  nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
}

void Http2Connection::closeWhenFlushed() {
  closing_ = true;
  if (outputLength() == 0) close();
}

void Http2Connection::close() {
  if (closed_) return;
  closed_ = true;
  // Requests still open will never be answered.
  const int64_t now = monotonicMicros();
  for (const auto& [stream_id, stream] : streams_) {
    if (!stream->req.entry) continue;
    state_.ledger.update(stream->req.entry, [&](LedgerEntry& e) {
      if (e.finished_us == 0 && !e.completed) e.finished_us = now;
    });
  }
  if (session_ != nullptr) {
    nghttp2_session_del(session_);
    session_ = nullptr;
  }
  streams_.clear();
  if (bev_ != nullptr) {
    bufferevent_free(bev_);
    bev_ = nullptr;
  }
  marks_.clear();
  packed_.clear();
  worker_.retire(this);
}

// --- ledger bookkeeping ---------------------------------------------------------------

Http2Connection::Stream* Http2Connection::find(int32_t stream_id) {
  const auto it = streams_.find(stream_id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void Http2Connection::syncLedger() {
  if (!closed_) processMarks();
}

size_t Http2Connection::outputLength() const {
  return evbuffer_get_length(bufferevent_get_output(bev_));
}

void Http2Connection::processMarks() {
  if (marks_.empty() || bev_ == nullptr) return;
  // Bytes that left the output buffer have been handed to the socket (or TLS).
  const uint64_t flushed = flushedOffset();
  const int64_t now = monotonicMicros();
  while (!marks_.empty() && marks_.front().offset <= flushed) {
    const Mark& m = marks_.front();
    state_.ledger.update(m.entry, [&](LedgerEntry& e) { applyMark(e, m.kind, m.count, now); });
    marks_.pop_front();
  }
}

void Http2Connection::dropMarks(const LedgerEntryPtr& entry) {
  std::erase_if(marks_, [&](const Mark& m) { return m.entry == entry; });
  std::erase_if(packed_, [&](const Mark& m) { return m.entry == entry; });
}

}  // namespace mockllm
