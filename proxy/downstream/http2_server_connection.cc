#include "proxy/downstream/http2_server_connection.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/clock.h"
#include "common/http_date.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "common/release_storage.h"
#include "proxy/event/peer_unread.h"
#include "proxy/http/http2_headers.h"
#include "proxy/http/request_target.h"

namespace sluice {

namespace {

/**
 * HPACK bomb bound: a header list is decoded past its limit only to answer
 * 431, and only up to this multiple of the limit (bytes as RFC 9113 counts
 * them, and fields). Beyond, the stream's fields are no longer validated or
 * handed over (RST_STREAM), so one header block costs at most this much
 * decoding whatever its references to the dynamic table expand to.
 */
constexpr size_t kHeaderOverflowFactor = 4;
/** Header blocks cut that way that a connection may send; the next one gets GOAWAY. */
constexpr uint32_t kMaxCutHeaderBlocks = 3;
/**
 * Per-response values (request ids, rate-limit counters) go into HPACK's
 * dynamic table on a connection's first response and every this many
 * after it, never-indexed otherwise: their names stay in the table
 * (Http2ResponseNv) without an entry per response churning it.
 */
constexpr uint32_t kPerResponseReindex = 32;

/**
 * Held streams per connection whose client's reading is awaited; beyond it a
 * stream's spend is booked as written (docs/reference/metrics.md).
 */
constexpr size_t kMaxHeldStreams = 64;
/** When a held stream's client is first looked at, and how far apart the looks get. */
constexpr std::chrono::milliseconds kFirstUnreadLook{5};
constexpr std::chrono::milliseconds kLastUnreadLookInterval{1000};

}  // namespace

// --- one stream: the DownstreamStream of one Exchange -------------------------------

class Http2ServerConnection::Stream final : public DeferredDeletable, public DownstreamStream {
 public:
  Stream(Http2ServerConnection& conn, int32_t id)
      : conn_(conn), id_(id), pending_(evbuffer_new()) {}

  // DownstreamStream
  void encodeHeaders(ResponseHead&& head, bool end_stream) override;
  void encodeData(const char* data, size_t len, bool end_stream) override;
  bool carriesTrailers() const override { return true; }
  void encodeTrailers(HeaderMap&& trailers) override;
  void resetStream() override;
  void resetStreamAfter(std::string_view final_bytes) override;
  bool canWriteWithoutWaiting(size_t len) const override;
  bool aboveHighWatermark() const override { return pending() > conn_.limits_.high_watermark; }
  size_t bufferedBytes() const override { return pending(); }
  void pauseRequestBody() override;
  void resumeRequestBody() override;
  void onExchangeDone() override;
  bool confirmsReads() const override { return track_ != nullptr && !conn_.closed_; }
  void holdUntilRead(std::unique_ptr<HeldDelivery> hold) override;
  const ClientInfo& clientInfo() const override { return conn_.client_info_; }

  size_t pending() const { return evbuffer_get_length(pending_.get()); }
  /** RST_STREAM with `error_code`; buffered response bytes are dropped. */
  void reset(uint32_t error_code);
  /** The code a cut of this stream's response carries: CANCEL or INTERNAL_ERROR. */
  uint32_t cutCode() const;
  /** Answers with a problem sluice makes itself, before any Exchange exists. */
  void respondLocally(const Problem& problem);
  /** Detaches the Exchange, if any, and tells it the client is gone (`reason`). */
  void disconnect(CancelReason reason = CancelReason::ClientDisconnect);
  /**
   * The request body is being read: body_read_timeout runs from now, sliding
   * per DATA. The connection's one body timer watches every such stream.
   */
  void startBodyTimer();
  void stopBodyTimer() { body_watched_ = false; }
  /** Sends the WINDOW_UPDATE held back for request body bytes taken while paused. */
  void giveBackWindow();
  /** No request body byte for body_read_timeout: 408. */
  void onBodyTimeout();

  Http2ServerConnection& conn_;
  const int32_t id_;

  // request
  Http2RequestHeadBuilder builder_;
  size_t header_list_bytes_ = 0;
  size_t header_count_ = 0;
  bool header_overflow_ = false;  // above the limit: 431 once the head is in
  bool header_cut_ = false;       // far above it: no longer decoded, reset
  bool head_request_ = false;
  bool request_complete_ = false;       // END_STREAM received
  RequestDecoder* exchange_ = nullptr;  // this stream's request (its Exchange)
  bool body_paused_ = false;            // the Exchange paused the upload: the stream window is held
  size_t unconsumed_ = 0;               // body bytes taken while paused, not yet acknowledged

  // response
  // The response's fields (handed over by the Exchange, not copied) and
  // status text while its HEADERS frame waits in nghttp2, which was given
  // views of them (Http2ResponseNv); released once the frame is out
  // (onFrameSend).
  HeaderMap response_fields_;
  Http2ResponseNv::StatusText status_text_{};
  EvBufferPtr pending_;  // body bytes the client's window has not admitted yet
  bool response_started_ = false;
  bool body_allowed_ = true;    // false for HEAD, 204, 304
  bool end_pending_ = false;    // the response's last byte is in pending_
  bool end_submitted_ = false;  // END_STREAM handed to nghttp2
  // Sent in a HEADERS frame after the last DATA (onDataSourceRead). Out of
  // line: rare, and a HeaderMap inline in every held stream.
  std::unique_ptr<HeaderMap> trailers_;
  bool deferred_ = false;    // the data provider is waiting for bytes
  bool above_high_ = false;  // the Exchange may have paused: tell it when we drain
  bool reset_ = false;
  bool closed_ = false;  // nghttp2 closed the stream
  // resetStreamAfter: RST_STREAM with this code once pending_ has been sent.
  std::optional<uint32_t> reset_after_pending_;
  // Where the response's DATA frames went (a client on this host), owned by
  // the connection: it outlives the stream while its spend is held.
  ReadTrack* track_ = nullptr;

  // slow client
  bool body_watched_ = false;  // body_read_timeout runs (Http2ServerConnection::onBodyTimer)
  MonotonicTime last_body_byte_{};
};

void Http2ServerConnection::Stream::encodeHeaders(ResponseHead&& head, bool end_stream) {
  if (closed_ || reset_ || response_started_ || conn_.closed_) return;
  response_started_ = true;
  body_allowed_ = mayHaveBody(head_request_, head.status);
  response_fields_ = std::move(head.headers);
  // RFC 9110 §6.6.1: sluice's own answers and forwarded ones without a Date.
  if (!response_fields_.has("date")) {
    response_fields_.add("date", httpDate(conn_.host_.dispatcher().clock()));
  }
  const bool reindex = conn_.responses_started_++ % kPerResponseReindex == 0;
  const Http2ResponseNv nv(response_fields_, head.status, status_text_, reindex);
  if (!end_stream && body_allowed_ && conn_.reads_known_) track_ = conn_.newTrack(id_);
  int rv;
  if (end_stream) {
    end_submitted_ = true;
    rv = nghttp2_submit_response(conn_.session_.get(), id_, nv.data(), nv.size(), nullptr);
  } else {
    nghttp2_data_provider provider{};
    provider.source.ptr = this;
    provider.read_callback = &Http2ServerConnection::onDataSourceRead;
    rv = nghttp2_submit_response(conn_.session_.get(), id_, nv.data(), nv.size(), &provider);
  }
  if (rv != 0) {
    reset(NGHTTP2_INTERNAL_ERROR);
    return;
  }
  conn_.scheduleSend();
}

void Http2ServerConnection::Stream::encodeData(const char* data, size_t len, bool end_stream) {
  if (closed_ || reset_ || !response_started_ || end_pending_ || end_submitted_ || conn_.closed_) {
    return;
  }
  if (len > 0 && body_allowed_) {
    if (track_ != nullptr) track_->body_in += len;
    evbuffer_add(pending_.get(), data, len);
    if (pending() > conn_.limits_.high_watermark) above_high_ = true;
  }
  if (end_stream) end_pending_ = true;
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_.session_.get(), id_);
  }
  conn_.scheduleSend();
}

void Http2ServerConnection::Stream::encodeTrailers(HeaderMap&& trailers) {
  if (closed_ || reset_ || !response_started_ || end_pending_ || end_submitted_ || conn_.closed_) {
    return;
  }
  if (!trailers.empty()) trailers_ = std::make_unique<HeaderMap>(std::move(trailers));
  encodeData(nullptr, 0, true);
}

uint32_t Http2ServerConnection::Stream::cutCode() const {
  // A deliberate cancel (budget, drain) is CANCEL; an upstream that broke
  // mid-response (cancel_reason upstream_reset) is INTERNAL_ERROR. Either way
  // the client knows the response is incomplete, and the connection's other
  // streams are untouched.
  const auto reason = exchange_ != nullptr ? exchange_->cancelReason() : std::nullopt;
  const bool cancelled = reason && *reason != CancelReason::UpstreamReset;
  return cancelled ? NGHTTP2_CANCEL : NGHTTP2_INTERNAL_ERROR;
}

void Http2ServerConnection::Stream::resetStream() {
  const uint32_t code = cutCode();
  exchange_ = nullptr;
  reset(code);
}

void Http2ServerConnection::Stream::resetStreamAfter(std::string_view final_bytes) {
  const uint32_t code = cutCode();
  exchange_ = nullptr;
  if (closed_ || reset_ || conn_.closed_) return;
  encodeData(final_bytes.data(), final_bytes.size(), false);
  // onFrameSend resets the stream once the DATA frame with the last byte left.
  reset_after_pending_ = code;
  if (pending() == 0) reset(code);
}

bool Http2ServerConnection::Stream::canWriteWithoutWaiting(size_t len) const {
  if (closed_ || reset_ || conn_.closed_ || !response_started_ || !body_allowed_) return false;
  nghttp2_session* session = conn_.session_.get();
  const int32_t window = std::min(nghttp2_session_get_stream_remote_window_size(session, id_),
                                  nghttp2_session_get_remote_window_size(session));
  return window > 0 && pending() + len <= static_cast<size_t>(window);
}

void Http2ServerConnection::Stream::reset(uint32_t error_code) {
  if (closed_ || reset_ || conn_.closed_) return;
  reset_ = true;
  if (track_ != nullptr) {
    track_->dropped += pending();  // the Exchange counted none of it delivered
    track_->done = true;           // no DATA after the RST_STREAM
  }
  evbuffer_drain(pending_.get(), pending());
  nghttp2_submit_rst_stream(conn_.session_.get(), NGHTTP2_FLAG_NONE, id_, error_code);
  conn_.scheduleSend();
}

void Http2ServerConnection::Stream::pauseRequestBody() {
  if (body_paused_) return;
  body_paused_ = true;
  stopBodyTimer();  // waiting for the upstream is not the client's fault
}

void Http2ServerConnection::Stream::resumeRequestBody() {
  if (!body_paused_) return;
  body_paused_ = false;
  giveBackWindow();
  if (!request_complete_ && exchange_ != nullptr) startBodyTimer();
}

void Http2ServerConnection::Stream::giveBackWindow() {
  const size_t n = unconsumed_;
  unconsumed_ = 0;
  if (n == 0 || closed_ || conn_.closed_) return;
  nghttp2_session_consume_stream(conn_.session_.get(), id_, n);
  conn_.scheduleSend();  // the WINDOW_UPDATE goes next turn, never from the Exchange's call
}

void Http2ServerConnection::Stream::onExchangeDone() {
  exchange_ = nullptr;
  body_paused_ = false;
  giveBackWindow();
  // An Exchange that ends without finishing its response leaves it truncated:
  // the client must not mistake it for complete. (A resetStreamAfter resets
  // it itself, once its last bytes are out.)
  if (!end_pending_ && !end_submitted_ && !reset_after_pending_) reset(NGHTTP2_INTERNAL_ERROR);
}

void Http2ServerConnection::Stream::holdUntilRead(std::unique_ptr<HeldDelivery> hold) {
  if (track_ == nullptr || conn_.closed_) {
    hold->settle(0);  // nothing to ask any more
    return;
  }
  conn_.holdTrack(*track_, std::move(hold));
}

void Http2ServerConnection::Stream::respondLocally(const Problem& problem) {
  conn_.host_.countUnparsedRequest(problem.status);
  LocalReply reply = makeProblemReply(problem);
  encodeHeaders(std::move(reply.head), false);
  encodeData(reply.body.data(), reply.body.size(), true);
}

void Http2ServerConnection::Stream::startBodyTimer() {
  if (conn_.limits_.body_read_timeout.count() <= 0) return;
  last_body_byte_ = conn_.host_.dispatcher().clock().now();
  body_watched_ = true;
  // A deadline set now is the latest of all: an armed timer wakes no later than it.
  if (!conn_.body_timer_.armed()) conn_.body_timer_.arm(conn_.limits_.body_read_timeout);
}

void Http2ServerConnection::Stream::onBodyTimeout() {
  body_watched_ = false;
  if (closed_ || reset_ || request_complete_ || exchange_ == nullptr || conn_.closed_) return;
  conn_.host_.countRejection(Rejection::BodyTimeout);
  // Nothing went upstream yet (bodies are buffered first). The 408 ends the
  // stream; onFrameSend then resets it with NO_ERROR so the client stops uploading.
  exchange_->sendLocalReply(
      makeProblem(problems::kRequestTimeout,
                  "no request body byte for limits.body_read_timeout (" +
                      std::to_string(conn_.limits_.body_read_timeout.count()) + "ms)",
                  CancelReason::ClientDisconnect));
}

void Http2ServerConnection::Stream::disconnect(CancelReason reason) {
  if (exchange_ == nullptr) return;
  RequestDecoder* ex = exchange_;
  exchange_ = nullptr;
  ex->onDownstreamDisconnect(reason);
}

// --- the connection ---------------------------------------------------------------------

Http2ServerConnection::Http2ServerConnection(DownstreamConnectionHost& host, BufferEventPtr bev,
                                             std::string peer_address, bool tls, Http2Limits limits)
    : host_(host),
      limits_(limits),
      io_(std::make_unique<SocketIo>(host.dispatcher().base(), std::move(bev),
                                     static_cast<SocketIoCallbacks&>(*this),
                                     &host.dispatcher().writeFlusher())),
      idle_timer_(host.dispatcher().base(), [this] { onIdleTimer(); }),
      body_timer_(host.dispatcher().base(), [this] { onBodyTimer(); }),
      send_watch_(host.dispatcher(), limits.send_timeout, [this] { onSendStalled(); }),
      peer_address_(std::move(peer_address)) {
  client_info_.address = peer_address_;
  client_info_.tls = tls;

  const Nghttp2CallbacksPtr callbacks = newNghttp2Callbacks();
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks.get(), &onBeginFrame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks.get(), &onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks.get(), &onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks.get(), &onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks.get(), &onDataChunkRecv);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks.get(), &onFrameSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks.get(), &onStreamClose);
  nghttp2_session_callbacks_set_send_data_callback(callbacks.get(), &onSendData);

  const Nghttp2OptionPtr option = newNghttp2Option();
  // Request body windows are acknowledged by hand (onDataChunkRecv): a
  // streamed upload whose upstream is slow holds its stream's window.
  nghttp2_option_set_no_auto_window_update(option.get(), 1);

  nghttp2_session* session = nullptr;
  nghttp2_session_server_new2(&session, callbacks.get(), this, option.get());
  session_.reset(session);

  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(limits_.stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.max_header_list_bytes)},
  };
  nghttp2_submit_settings(session_.get(), NGHTTP2_FLAG_NONE, settings,
                          sizeof(settings) / sizeof(settings[0]));
  nghttp2_session_set_local_window_size(session_.get(), NGHTTP2_FLAG_NONE, 0,
                                        limits_.connection_window);

  event_base* base = host.dispatcher().base();
  process_event_.reset(event_new(base, -1, 0, &Http2ServerConnection::onProcessCb, this));
  // The write callback fires when the socket drained to the low watermark: pump more.
  io_->setWriteLowWatermark(limits_.output_low_watermark);
  io_->useSocketIfPlain();  // accepted: connected
  // Delivered means read: a plain-TCP client on this host, whose socket can be
  // looked at (TLS: its wire bytes are not the responses').
  reads_known_ = !tls && host.peerUnreadProbe() != nullptr && io_->bufferEvent() == nullptr &&
                 io_->fd() >= 0 && PeerUnreadProbe::peerMayBeLocal(io_->fd());
  send_watch_.watch(io_->output());
  // Send our SETTINGS and process the preface the detector already read, next turn.
  scheduleSend();
  armIdleTimer();
}

Http2ServerConnection::~Http2ServerConnection() {
  disconnectAll();  // safety net: close() normally did this
  // The streams go before the session: nghttp2_session_del runs no callbacks.
  streams_.clear();
}

Http2ServerConnection::Stream* Http2ServerConnection::findStream(int32_t stream_id) const {
  auto it = streams_.find(stream_id);
  return it == streams_.end() ? nullptr : it->second.get();
}

// --- input ------------------------------------------------------------------------------

void Http2ServerConnection::onProcessCb(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  auto* self = static_cast<Http2ServerConnection*>(arg);
  self->send_scheduled_ = false;
  self->onRead();
}

void Http2ServerConnection::onRead() {
  if (closed_) return;
  if (!flushing_) {
    evbuffer* input = io_->input();
    while (!closed_ && evbuffer_get_length(input) > 0) {
      const size_t len = evbuffer_get_contiguous_space(input);
      const unsigned char* data = evbuffer_pullup(input, static_cast<ssize_t>(len));
      const ssize_t rv = nghttp2_session_mem_recv(session_.get(), data, len);
      if (closed_) return;
      if (rv < 0 && connection_error_ != NGHTTP2_NO_ERROR) {
        // A connection error sluice detected in a callback: GOAWAY naming it.
        nghttp2_session_terminate_session(session_.get(), connection_error_);
        closeAfterFlush();
        return;
      }
      if (rv < 0) {
        // Not HTTP/2 after all (bad preface), a flood, or memory: nothing to save.
        close();
        return;
      }
      evbuffer_drain(input, static_cast<size_t>(rv));
    }
    if (goaway_received_) {
      // docs/design.md §3: GOAWAY from the client is a disconnect of all its requests.
      disconnectAll();
      nghttp2_session_terminate_session(session_.get(), NGHTTP2_NO_ERROR);
      closeAfterFlush();
      return;
    }
  }
  sendPending();
  maybeFinish();
}

int Http2ServerConnection::onBeginFrame(nghttp2_session* session, const nghttp2_frame_hd* hd,
                                        void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  // Even ids and everything else: nghttp2 judges. Odd: a client's stream.
  if (hd->type != NGHTTP2_HEADERS || hd->stream_id % 2 == 0) return 0;
  if (hd->stream_id > self->last_client_stream_id_) {
    self->last_client_stream_id_ = hd->stream_id;
    return 0;
  }
  // Trailers on a stream still open, or on one sluice closed before the
  // client saw it (an early answer, then RST_STREAM(NO_ERROR)): not an error.
  if (nghttp2_session_find_stream(session, hd->stream_id) != nullptr ||
      self->closedEarly(hd->stream_id)) {
    return 0;
  }
  // RFC 9113 §5.1.1: a new stream's id must exceed every id the client used
  // (h2spec http2/5.1.1/2); nghttp2 only ignores such a HEADERS.
  self->connection_error_ = NGHTTP2_PROTOCOL_ERROR;
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

void Http2ServerConnection::onBodyTimer() {
  if (closed_) return;
  // DATA only notes the time (last_body_byte_): streams whose deadline
  // slid are looked at again at the earliest deadline left.
  const MonotonicTime now = host_.dispatcher().clock().now();
  std::optional<MonotonicTime> next;
  std::vector<int32_t> expired;
  for (const auto& [id, stream] : streams_) {
    if (!stream->body_watched_) continue;
    const MonotonicTime deadline = stream->last_body_byte_ + limits_.body_read_timeout;
    if (now >= deadline) {
      expired.push_back(id);
    } else if (!next || deadline < *next) {
      next = deadline;
    }
  }
  if (next) body_timer_.arm(*next - now);
  // Answering may run the Exchange: streams are looked up again, one by one.
  for (const int32_t id : expired) {
    if (closed_) return;
    if (Stream* stream = findStream(id); stream != nullptr && stream->body_watched_) {
      stream->onBodyTimeout();
    }
  }
}

bool Http2ServerConnection::closedEarly(int32_t stream_id) const {
  return std::find(closed_early_.begin(), closed_early_.end(), stream_id) != closed_early_.end();
}

int Http2ServerConnection::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame,
                                          void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  // nghttp2 calls this only for streams it admits: refused ones (above
  // SETTINGS_MAX_CONCURRENT_STREAMS) and ones after our GOAWAY never get here.
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  const int32_t id = frame->hd.stream_id;
  auto& slot = self->streams_[id];
  slot = std::make_unique<Stream>(*self, id);
  // Its fields come next, one onHeader each: no map look-up for them.
  self->header_stream_id_ = id;
  self->header_stream_ = slot.get();
  self->idle_timer_.disarm();  // busy until its last stream closes
  return 0;
}

int Http2ServerConnection::onHeader(nghttp2_session*, const nghttp2_frame* frame,
                                    const uint8_t* name, size_t namelen, const uint8_t* value,
                                    size_t valuelen, uint8_t, void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;  // trailers: not forwarded (LLM APIs do not use them)
  }
  Stream* stream = frame->hd.stream_id == self->header_stream_id_
                       ? self->header_stream_
                       : self->findStream(frame->hd.stream_id);
  if (stream == nullptr || stream->header_cut_) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  // RFC 9113 §6.5.2 sizes a header list as name + value + 32 per field.
  stream->header_list_bytes_ += namelen + valuelen + 32;
  if (n.empty() || n.front() != ':') ++stream->header_count_;
  const Http2Limits& limits = self->limits_;
  if (stream->header_list_bytes_ > kHeaderOverflowFactor * limits.max_header_list_bytes ||
      stream->header_count_ > kHeaderOverflowFactor * limits.max_headers) {
    return self->cutHeaderBlock(*stream);
  }
  if (stream->header_overflow_) return 0;  // decoded only to answer 431: keep nothing
  if (stream->header_list_bytes_ > limits.max_header_list_bytes ||
      stream->header_count_ > limits.max_headers) {
    stream->header_overflow_ = true;
    return 0;
  }
  // nghttp2's HTTP messaging checks refused any name with an upper-case letter.
  stream->builder_.addValidated(n, v);
  return 0;
}

int Http2ServerConnection::cutHeaderBlock(Stream& stream) {
  stream.header_cut_ = true;
  host_.countRejection(Rejection::HeaderTooLarge);
  if (++cut_header_blocks_ > kMaxCutHeaderBlocks) {
    connection_error_ = NGHTTP2_ENHANCE_YOUR_CALM;  // it keeps doing it: GOAWAY
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  // nghttp2 resets the stream (RST_STREAM(INTERNAL_ERROR)) and reads the rest
  // of the block only to keep the HPACK state: no validation, no callbacks.
  return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

int Http2ServerConnection::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame,
                                       void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      Stream* stream = self->findStream(frame->hd.stream_id);
      if (stream == nullptr || stream->header_cut_) break;
      if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) self->onRequestHeaders(*stream);
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) self->onRequestComplete(*stream);
      break;
    }
    case NGHTTP2_DATA:
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        if (Stream* stream = self->findStream(frame->hd.stream_id))
          self->onRequestComplete(*stream);
      }
      break;
    case NGHTTP2_GOAWAY:
      self->goaway_received_ = true;  // acted on once nghttp2 returns (onRead)
      break;
    default:
      break;
  }
  return 0;
}

int Http2ServerConnection::onDataChunkRecv(nghttp2_session* session, uint8_t, int32_t stream_id,
                                           const uint8_t* data, size_t len, void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  // The connection's window is never held: one paused upload must not stall
  // the connection's other streams.
  nghttp2_session_consume_connection(session, len);
  Stream* stream = self->findStream(stream_id);
  // Bytes of a request already answered (404, 413, 431) are read and dropped.
  if (stream != nullptr && stream->exchange_ != nullptr) {
    stream->last_body_byte_ = self->host_.dispatcher().clock().now();
    stream->exchange_->decodeData(reinterpret_cast<const char*>(data), len);
  }
  // The stream's window comes back once the Exchange took the bytes, or
  // when it resumes a paused upload: the client's window is the backpressure.
  if (stream != nullptr && stream->body_paused_) {
    stream->unconsumed_ += len;
  } else {
    nghttp2_session_consume_stream(session, stream_id, len);
  }
  return 0;
}

void Http2ServerConnection::onRequestHeaders(Stream& stream) {
  if (stream.header_overflow_) {
    host_.countRejection(Rejection::HeaderTooLarge);
    stream.respondLocally(
        makeProblem(problems::kHeaderTooLarge, "request headers exceed sluice's limits"));
    return;
  }
  // The same method rule as HTTP/1.1's.
  if (auto why = methodRefusal(stream.builder_.method())) {
    stream.respondLocally(makeProblem(problems::kBadRequest, *why));
    return;
  }
  RequestHead head = stream.builder_.finish();
  stream.head_request_ = head.method == "HEAD";
  // The same path rule as HTTP/1.1's: dot segments resolved before routing.
  if (normalizePath(head.path) == PathNormalization::AboveRoot) {
    stream.respondLocally(makeProblem(problems::kBadRequest, std::string(kPathAboveRoot)));
    return;
  }
  const MonotonicTime start = host_.dispatcher().clock().now();
  RequestDecoder& ex = host_.newStream(head, stream, start);
  stream.exchange_ = &ex;  // decodeHeaders may answer at once (404, 400) and let go of us
  // A body follows unless END_STREAM came with the headers (onRequestComplete stops it).
  stream.startBodyTimer();
  ex.decodeHeaders(std::move(head));
}

void Http2ServerConnection::onRequestComplete(Stream& stream) {
  stream.request_complete_ = true;
  stream.stopBodyTimer();
  if (stream.exchange_ != nullptr) stream.exchange_->decodeComplete();
}

// --- output -----------------------------------------------------------------------------

void Http2ServerConnection::scheduleSend() {
  // A response is usually a head and a body in the same turn: one activation.
  if (closed_ || send_scheduled_) return;
  send_scheduled_ = true;
  event_active(process_event_.get(), 0, 0);
}

void Http2ServerConnection::sendPending() {
  if (closed_ || sending_) return;
  sending_ = true;
  evbuffer* output = io_->output();
  // Bounded: frames (and the stream bytes they carry) stay inside nghttp2 and
  // the streams' own buffers until the socket drains (onWrite pumps again).
  while (evbuffer_get_length(output) < limits_.output_high_watermark) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_.get(), &data);
    if (n < 0) {
      sending_ = false;
      close();
      return;
    }
    if (n == 0) break;
    evbuffer_add(output, data, static_cast<size_t>(n));
    bytes_out_ += static_cast<uint64_t>(n);
  }
  sending_ = false;
  notifyWritable();
}

bool Http2ServerConnection::submitTrailers(Stream& stream) {
  const std::unique_ptr<HeaderMap> trailers = std::move(stream.trailers_);
  std::vector<nghttp2_nv> nv;
  nv.reserve(trailers->size());
  for (const auto field : *trailers) {
    // Copied by nghttp2 (no NO_COPY flag): the map goes when this returns.
    nv.push_back(nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(field.name.data())),
                            reinterpret_cast<uint8_t*>(const_cast<char*>(field.value.data())),
                            field.name.size(), field.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nghttp2_submit_trailer(session_.get(), stream.id_, nv.data(), nv.size()) == 0;
}

ssize_t Http2ServerConnection::onDataSourceRead(nghttp2_session*, int32_t, uint8_t*, size_t length,
                                                uint32_t* data_flags, nghttp2_data_source* source,
                                                void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  auto* stream = static_cast<Stream*>(source->ptr);
  if (stream->reset_) return NGHTTP2_ERR_DEFERRED;  // the RST_STREAM closes it
  // The payload stays in pending_ until onSendData moves it to the output,
  // later in the same nghttp2_session_mem_send call (nghttp2 prepares a
  // DATA frame and hands it to send_data without returning in between).
  const size_t have = stream->pending();
  const size_t taken = std::min(have, length);
  const size_t left = have - taken;
  if (left == 0) {
    if (stream->end_pending_) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      stream->end_pending_ = false;
      stream->end_submitted_ = true;
      // The trailer section ends the stream instead of this DATA frame.
      if (stream->trailers_ && self->submitTrailers(*stream)) {
        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    } else if (taken == 0) {
      stream->deferred_ = true;  // encodeData resumes it
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  // (An empty frame that only carries END_STREAM nghttp2 writes itself.)
  if (taken > 0) *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (stream->above_high_ && left < self->limits_.low_watermark) {
    stream->above_high_ = false;
    self->writable_.push_back(stream->id_);  // told after nghttp2 returns
  }
  return static_cast<ssize_t>(taken);
}

int Http2ServerConnection::onSendData(nghttp2_session*, nghttp2_frame* frame,
                                      const uint8_t* framehd, size_t length,
                                      nghttp2_data_source* source, void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  auto* stream = static_cast<Stream*>(source->ptr);
  evbuffer* output = self->io_->output();
  // sluice sets no padding callback; a padded frame would carry its pad
  // length byte first and the padding after the payload (RFC 9113 §6.1).
  const size_t padlen = frame->data.padlen;
  if (padlen == 0) {
    evbuffer_add(output, framehd, 9);
    self->bytes_out_ += 9;
  } else {
    uint8_t head[10];
    std::memcpy(head, framehd, 9);
    head[9] = static_cast<uint8_t>(padlen - 1);
    evbuffer_add(output, head, sizeof(head));
    self->bytes_out_ += sizeof(head);
  }
  if (evbuffer_remove_buffer(stream->pending_.get(), output, length) != static_cast<int>(length)) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;  // cannot happen: onDataSourceRead sized it
  }
  if (stream->track_ != nullptr) stream->track_->addFrame(self->bytes_out_, length);
  self->bytes_out_ += length;
  if (padlen > 1) {
    static constexpr uint8_t kZeros[256] = {};
    evbuffer_add(output, kZeros, padlen - 1);
    self->bytes_out_ += padlen - 1;
  }
  return 0;
}

int Http2ServerConnection::onFrameSend(nghttp2_session* session, const nghttp2_frame* frame,
                                       void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  const uint8_t type = frame->hd.type;
  if (type != NGHTTP2_HEADERS && type != NGHTTP2_DATA) return 0;
  // One look-up for the three checks below (the stream stays: nothing here
  // closes it synchronously).
  Stream* stream = self->findStream(frame->hd.stream_id);
  if (stream == nullptr) return 0;
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && stream->track_ != nullptr) {
    stream->track_->done = true;  // the response's last byte is out
  }
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !stream->request_complete_ &&
      !stream->reset_) {
    // Answered before the request ended (404, 413, 431): ask the client to
    // stop sending without an error (RFC 9113 §8.1).
    stream->reset_ = true;
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream->id_, NGHTTP2_NO_ERROR);
  }
  if (type == NGHTTP2_HEADERS) {
    // The response head is serialized: nghttp2 no longer reads its fields.
    releaseStorage(stream->response_fields_);
  } else if (stream->reset_after_pending_ && stream->pending() == 0) {
    stream->reset(*stream->reset_after_pending_);  // the final bytes are out: cut now
  }
  return 0;
}

int Http2ServerConnection::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t,
                                         void* user_data) {
  auto* self = static_cast<Http2ServerConnection*>(user_data);
  auto it = self->streams_.find(stream_id);
  if (it == self->streams_.end()) return 0;
  std::unique_ptr<Stream> stream = std::move(it->second);
  self->streams_.erase(it);
  if (stream_id == self->header_stream_id_) {
    self->header_stream_id_ = 0;
    self->header_stream_ = nullptr;
  }
  stream->closed_ = true;
  stream->stopBodyTimer();
  if (ReadTrack* track = std::exchange(stream->track_, nullptr)) {
    // What is still pending never goes out: unread (the Exchange counted it).
    track->done = true;
    if (!track->delivery) {
      track->settled = true;  // never held (the client left, or nothing to book)
      self->pruneTracks();
    }
  }
  if (!stream->request_complete_) {
    // The client may not know yet: its trailers may still come (onBeginFrame).
    self->closed_early_[self->closed_early_next_++ % self->closed_early_.size()] = stream_id;
  }
  // Still attached: the client reset this stream (or nghttp2 did, on a
  // protocol error). Only this stream's Exchange learns of it.
  stream->disconnect();
  self->host_.dispatcher().deferredDelete(std::move(stream));
  if (self->streams_.empty()) self->armIdleTimer();
  return 0;
}

void Http2ServerConnection::notifyWritable() {
  if (writable_.empty()) return;
  std::vector<int32_t> ids;
  ids.swap(writable_);
  for (int32_t id : ids) {
    if (closed_) return;
    Stream* stream = findStream(id);
    if (stream != nullptr && stream->exchange_ != nullptr)
      stream->exchange_->onDownstreamWritable();
  }
}

void Http2ServerConnection::onWrite() {
  if (closed_) return;
  sendPending();
  if (flushing_) {
    if (!closed_ && evbuffer_get_length(io_->output()) == 0) close();
    return;
  }
  maybeFinish();
}

// --- connection lifecycle ---------------------------------------------------------------

void Http2ServerConnection::onEvent(short events) {
  if (closed_) return;
  if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
    // Held streams: a FIN (Linux sends one only for a socket closed with
    // nothing unread) or a reset after the client's FIN (EPIPE: only bytes
    // sent after its close met it) — a last look, else read; a reset
    // (ECONNRESET: closed with data unread, an abortive close, or a failed
    // write) — the last look for a stream it saw held, else read
    // (settleAllHeld).
    if (held_ > 0) {
      const int err = EVUTIL_SOCKET_ERROR();
      const bool reset = (events & BEV_EVENT_ERROR) != 0 && err != EPIPE;
      settleAllHeld(reset ? HeldEnd::Reset : HeldEnd::Look);
    }
    close();  // every stream's client is gone
  }
}

void Http2ServerConnection::disconnectAll(CancelReason reason) {
  std::vector<Stream*> attached;
  for (auto& [id, stream] : streams_) {
    if (stream->exchange_ != nullptr) attached.push_back(stream.get());
  }
  for (Stream* stream : attached) stream->disconnect(reason);
}

void Http2ServerConnection::maybeFinish() {
  if (closed_ || flushing_) return;
  const bool over = nghttp2_session_want_read(session_.get()) == 0 &&
                    nghttp2_session_want_write(session_.get()) == 0;
  if (over || (draining_ && streams_.empty())) closeAfterFlush();
}

void Http2ServerConnection::closeAfterFlush() {
  if (closed_ || flushing_) return;
  flushing_ = true;
  disconnectAll();
  io_->disableRead();
  sendPending();  // what nghttp2 still holds (our GOAWAY)
  if (!closed_ && evbuffer_get_length(io_->output()) == 0) close();
}

void Http2ServerConnection::armIdleTimer() {
  if (closed_ || limits_.idle_timeout.count() <= 0) return;
  idle_since_ = host_.dispatcher().clock().now();
  idle_timer_.arm(limits_.idle_timeout);
}

void Http2ServerConnection::onIdleTimer() {
  if (closed_ || flushing_ || !streams_.empty()) return;
  const MonotonicTime deadline = idle_since_ + limits_.idle_timeout;
  const MonotonicTime now = host_.dispatcher().clock().now();
  if (now < deadline) {
    idle_timer_.arm(deadline - now);
    return;
  }
  host_.countRejection(Rejection::IdleTimeout);
  // GOAWAY(NO_ERROR) names the last stream processed: the client knows
  // nothing was lost and opens a new connection for its next request.
  nghttp2_submit_goaway(session_.get(), NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_.get()), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  closeAfterFlush();
}

void Http2ServerConnection::closeWhenIdle() {
  if (closed_ || draining_) return;
  draining_ = true;
  // Streams up to the last one processed finish; later ones were never seen,
  // so the client may retry them elsewhere (RFC 9113 §6.8).
  nghttp2_submit_goaway(session_.get(), NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_.get()), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  scheduleSend();
}

void Http2ServerConnection::onSendStalled() {
  if (closed_) return;
  host_.countRejection(Rejection::SendTimeout);
  closeWith(CancelReason::ClientStalled);
}

void Http2ServerConnection::close() { closeWith(CancelReason::ClientDisconnect); }

void Http2ServerConnection::closeWith(CancelReason reason) {
  if (closed_) return;
  // Held streams: a client that stopped taking bytes read none of them;
  // sluice closing (idle_timeout, drain, shutdown, GOAWAY): a last look.
  if (held_ > 0) {
    settleAllHeld(reason == CancelReason::ClientStalled ? HeldEnd::Stalled : HeldEnd::Look);
  }
  closed_ = true;
  if (look_timer_) look_timer_->disarm();
  disconnectAll(reason);
  if (io_) io_->stop();
  event_del(process_event_.get());
  idle_timer_.disarm();
  body_timer_.disarm();
  send_watch_.stop();
  host_.connectionClosed(*this);
}

// --- delivered means read (docs/reference/metrics.md) -------------------------------------

void Http2ServerConnection::ReadTrack::addFrame(uint64_t start, uint64_t body) {
  if (body == 0) return;
  if (!frames.empty() && frames.back().end == start) {
    frames.back().end += body;  // right after the last one: one span
    frames.back().body += body;
    return;
  }
  if (frames.size() == kMaxFrames) {
    // Bounded: neighbours merge pairwise (a read point inside a merged span
    // maps to its body bytes by proportion).
    size_t out = 0;
    for (size_t i = 0; i + 1 < frames.size(); i += 2) {
      frames[out++] =
          Frame{frames[i].start, frames[i + 1].end, frames[i].body + frames[i + 1].body};
    }
    frames.resize(out);
  }
  frames.push_back(Frame{start, start + body, body});
}

uint64_t Http2ServerConnection::ReadTrack::readBody(uint64_t read_point) const {
  uint64_t read = 0;
  for (const Frame& f : frames) {
    if (read_point >= f.end) {
      read += f.body;
    } else {
      if (read_point > f.start) {
        read += static_cast<uint64_t>(static_cast<unsigned __int128>(read_point - f.start) *
                                      f.body / (f.end - f.start));
      }
      break;  // frames are in wire order
    }
  }
  return read;
}

uint64_t Http2ServerConnection::ReadTrack::unreadBody(uint64_t read_point) const {
  const uint64_t read = readBody(read_point);
  const uint64_t unread = body_in > read ? body_in - read : 0;
  return unread > dropped ? unread - dropped : 0;
}

Http2ServerConnection::ReadTrack* Http2ServerConnection::newTrack(int32_t stream_id) {
  auto track = std::make_unique<ReadTrack>();
  track->id = stream_id;
  tracks_.push_back(std::move(track));
  return tracks_.back().get();
}

void Http2ServerConnection::holdTrack(ReadTrack& track, std::unique_ptr<HeldDelivery> hold) {
  if (held_ >= kMaxHeldStreams) {
    hold->settle(0);  // bounded: booked as written
    return;
  }
  track.delivery = std::move(hold);
  track.held_at = host_.dispatcher().clock().now();
  track.looks_at_hold = looks_;
  ++held_;
  lookWithin(kFirstUnreadLook);
}

void Http2ServerConnection::lookWithin(std::chrono::milliseconds delay) {
  if (closed_) return;
  const MonotonicTime now = host_.dispatcher().clock().now();
  look_interval_ = delay;
  if (look_timer_ && look_timer_->armed() && next_look_ <= now + delay) return;
  if (!look_timer_) {
    look_timer_ = std::make_unique<Timer>(host_.dispatcher().base(), [this] { onLookTimer(); });
  }
  next_look_ = now + delay;
  look_timer_->arm(delay);
}

void Http2ServerConnection::onLookTimer() {
  if (closed_ || held_ == 0) return;
  const std::optional<uint64_t> read_point = lookAtReadPoint();
  if (!read_point) return;  // its socket is gone (a reset on its way): the last look stands
  settleReadThrough(*read_point);
  if (held_ == 0) return;
  const auto next = std::min(look_interval_ * 4, kLastUnreadLookInterval);
  next_look_ = host_.dispatcher().clock().now() + next;
  look_interval_ = next;
  look_timer_->arm(next);
}

std::optional<uint64_t> Http2ServerConnection::lookAtReadPoint() {
  if (!io_ || io_->fd() < 0) return std::nullopt;
  const std::optional<uint64_t> kernel = host_.peerUnreadProbe()->unreadBytes(io_->fd());
  if (!kernel) return std::nullopt;
  const uint64_t unread = *kernel + evbuffer_get_length(io_->output());
  const uint64_t read_point = bytes_out_ > unread ? bytes_out_ - unread : 0;
  last_read_point_ = read_point;
  ++looks_;
  return read_point;
}

void Http2ServerConnection::settleReadThrough(uint64_t read_point) {
  bool any = false;
  // Settling books metrics and writes an access log line: nothing re-enters
  // the connection.
  const MonotonicTime now = host_.dispatcher().clock().now();
  for (const std::unique_ptr<ReadTrack>& track : tracks_) {
    if (!track->delivery || read_point < track->end()) continue;
    // Not done: the rest waits for the client's flow-control window. A client
    // that read all that went out and opened no window for idle_timeout did
    // not read the rest either.
    if (!track->done &&
        (limits_.idle_timeout.count() <= 0 || now - track->held_at < limits_.idle_timeout)) {
      continue;
    }
    track->delivery->settle(track->unreadBody(read_point));
    track->delivery.reset();
    track->settled = true;
    --held_;
    any = true;
  }
  if (any) pruneTracks();
}

void Http2ServerConnection::settleAllHeld(HeldEnd end) {
  uint64_t read_point = 0;  // Stalled: nothing read
  std::optional<CancelReason> reason;
  switch (end) {
    case HeldEnd::Look:
      // Nothing says otherwise (no look possible): read.
      read_point = lookAtReadPoint().value_or(bytes_out_);
      break;
    case HeldEnd::Reset:
      // The last look's read point, for the streams held before it. A
      // stream with no look since it ended: the client reset within the
      // first look's few milliseconds after it, so it was reading it — read
      // (an earlier stream's look says nothing about this one).
      read_point = last_read_point_.value_or(bytes_out_);
      break;
    case HeldEnd::Stalled:
      reason = CancelReason::ClientStalled;
      break;
  }
  for (const std::unique_ptr<ReadTrack>& track : tracks_) {
    if (!track->delivery) continue;
    const bool unseen = end == HeldEnd::Reset && looks_ == track->looks_at_hold;
    const uint64_t unread =
        reason ? UINT64_MAX : track->unreadBody(unseen ? bytes_out_ : read_point);
    track->delivery->settle(unread, reason);
    track->delivery.reset();
    track->settled = true;
  }
  held_ = 0;
  pruneTracks();
}

void Http2ServerConnection::pruneTracks() {
  // Settled tracks go; a stream still open forgets its own first.
  for (const std::unique_ptr<ReadTrack>& track : tracks_) {
    if (!track->settled) continue;
    if (Stream* stream = findStream(track->id);
        stream != nullptr && stream->track_ == track.get()) {
      stream->track_ = nullptr;
    }
  }
  tracks_.erase(std::remove_if(tracks_.begin(), tracks_.end(),
                               [](const std::unique_ptr<ReadTrack>& t) { return t->settled; }),
                tracks_.end());
}

}  // namespace sluice
