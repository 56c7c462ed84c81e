#include "proxy/downstream/http1_server_connection.h"

#include <llhttp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/clock.h"
#include "common/http_date.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "proxy/http/http1_head_writer.h"
#include "proxy/http/request_target.h"

namespace sluice {

namespace {

// When a held response's client on this host is first looked at, and how
// often at most after that (the interval grows fourfold from the first).
constexpr std::chrono::milliseconds kFirstUnreadLook{5};
constexpr std::chrono::milliseconds kLastUnreadLookInterval{1000};

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Http1ServerConnection::Http1ServerConnection(DownstreamConnectionHost& host, evutil_socket_t fd,
                                             std::string peer_address, Http1Limits limits)
    : Http1ServerConnection(
          host,
          BufferEventPtr(bufferevent_socket_new(host.dispatcher().base(), fd,
                                                BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS)),
          std::move(peer_address), /*tls=*/false, limits) {}

Http1ServerConnection::Http1ServerConnection(DownstreamConnectionHost& host, BufferEventPtr bev,
                                             std::string peer_address, bool tls, Http1Limits limits,
                                             std::optional<MonotonicTime> accepted_at)
    : host_(host),
      limits_(limits),
      io_(std::make_unique<SocketIo>(host.dispatcher().base(), std::move(bev),
                                     static_cast<SocketIoCallbacks&>(*this),
                                     &host.dispatcher().writeFlusher())),
      peer_address_(std::move(peer_address)),
      read_timer_(
          evtimer_new(host.dispatcher().base(), &Http1ServerConnection::onReadTimerCb, this)),
      send_watch_(host.dispatcher(), limits.send_timeout,
                  static_cast<SendStallWatch::Alarm&>(*this)) {
  client_info_.address = peer_address_;
  client_info_.tls = tls;

  parser_ = newLlhttp();
  llhttp_init(parser_.get(), HTTP_REQUEST, &parserSettings());
  parser_->data = this;
  // Any HTTP/<digit>.<digit> parses, as with http-parser: checkHead answers
  // a version sluice does not serve with 505, not 400.
  parser_->lenient_flags |= LENIENT_VERSION;

  // The write callback fires when the client has drained us to the low watermark.
  io_->setWriteLowWatermark(limits_.low_watermark);
  io_->useSocketIfPlain();  // accepted: connected
  send_watch_.watch(io_->output());
  // The first head's deadline runs from accept, handshake and sniffing included.
  if (limits_.header_read_timeout.count() > 0) {
    read_deadline_ =
        accepted_at.value_or(host.dispatcher().clock().now()) + limits_.header_read_timeout;
    armReadTimer(read_deadline_);
  }
  // Bytes the protocol detector already read will not raise a read event:
  // parse them on the next loop turn (never from inside the constructor).
  if (evbuffer_get_length(io_->input()) > 0) {
    activateLater(resume_event_, &Http1ServerConnection::onResumeCb);
    free_resume_event_ = true;
  }
}

void Http1ServerConnection::activateLater(EventPtr& event, event_callback_fn cb) {
  // Made on first use: a connection that serves one request never needs
  // either (128 bytes each per held stream otherwise).
  if (!event) event.reset(event_new(host_.dispatcher().base(), -1, 0, cb, this));
  event_active(event.get(), 0, 0);
}

const llhttp_settings_t& Http1ServerConnection::parserSettings() {
  static const llhttp_settings_t settings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = &Http1ServerConnection::onMessageBegin;
    s.on_url = &Http1ServerConnection::onUrl;
    s.on_header_field = &Http1ServerConnection::onHeaderField;
    s.on_header_field_complete = &Http1ServerConnection::onHeaderFieldComplete;
    s.on_header_value = &Http1ServerConnection::onHeaderValue;
    s.on_headers_complete = &Http1ServerConnection::onHeadersComplete;
    s.on_body = &Http1ServerConnection::onBody;
    s.on_message_complete = &Http1ServerConnection::onMessageComplete;
    return s;
  }();
  return settings;
}

Http1ServerConnection::~Http1ServerConnection() {
  if (exchange_ != nullptr) {
    RequestDecoder* ex = exchange_;
    exchange_ = nullptr;
    ex->onDownstreamDisconnect(CancelReason::ClientDisconnect);
  }
}

// --- reading ------------------------------------------------------------------------

void Http1ServerConnection::onIoRead() { parseInput(); }

void Http1ServerConnection::parseInput() {
  evbuffer* input = io_->input();
  if (lingering_) {
    evbuffer_drain(input, evbuffer_get_length(input));  // only its FIN or reset matters now
    return;
  }
  if (closed_ || closing_) return;
  if (evbuffer_get_length(input) > 0) {
    // The next request's first byte: its head must be in within header_read_timeout.
    if (read_phase_ == ReadPhase::Idle) {
      // ... and the client read the last response to its end before asking again.
      if (held_) settleHeld(0);
      enterReadPhase(ReadPhase::Head);
    }
    if (read_phase_ == ReadPhase::FirstHead) head_bytes_seen_ = true;
  }
  while (!closed_ && !closing_ && evbuffer_get_length(input) > 0) {
    if (llhttp_get_errno(parser_.get()) == HPE_PAUSED) break;  // a request is being served
    if (body_paused_) break;  // the upload waits for its upstream (resumeRequestBody)
    evbuffer_iovec vec;
    if (evbuffer_peek(input, -1, nullptr, &vec, 1) < 1) break;
    const char* data = static_cast<const char*>(vec.iov_base);
    size_t len = vec.iov_len;
    if (!head_scanner_.done()) {
      const std::optional<size_t> head_bytes = head_scanner_.scan(data, len);
      if (!head_bytes && head_scanner_.tooLarge()) {
        host_.countRejection(Rejection::HeaderTooLarge);
        if (head_scanner_.inRequestLine()) {
          rejectRequest(problems::kUriTooLong, uriTooLongDetail());
        } else {
          rejectRequest(problems::kHeaderTooLarge, "request headers exceed sluice's limits");
        }
        return;
      }
      if (!head_bytes) {
        rejectRequest(problems::kBadRequest,
                      "obsolete line folding or whitespace before a header field's colon "
                      "(RFC 9112 §5)");
        return;
      }
      // The head alone first: its framing decides how the body bytes are checked.
      len = *head_bytes;
    } else if (chunked_request_) {
      const ChunkScanner::Step step = chunk_scanner_.scan(data, len);
      if (!step.ok) {
        rejectRequest(problems::kMalformedRequest,
                      "the request is not valid HTTP/1.1: chunked framing with a bare LF or a "
                      "missing CRLF (RFC 9112 §7.1)");
        return;
      }
      if (step.parse == 0 && step.skip > 0) {
        evbuffer_drain(input, step.skip);  // a chunk extension: never parsed
        continue;
      }
      len = step.parse;  // up to an extension, if one starts in these bytes
    }
    const llhttp_errno_t err = llhttp_execute(parser_.get(), data, len);
    if (closed_) {
      header_fields_.reset();  // drops what the header callbacks borrowed, unread
      return;
    }
    header_fields_.keepBorrowed();  // the header callbacks borrowed from `data`, soon drained
    if (err != HPE_OK && err != HPE_PAUSED) {
      rejectParseError(err);
      return;
    }
    // Paused at a request's end: the bytes up to there are parsed, the rest waits.
    const size_t consumed =
        err == HPE_PAUSED ? static_cast<size_t>(llhttp_get_error_pos(parser_.get()) - data) : len;
    evbuffer_drain(input, consumed);
    if (err == HPE_PAUSED) break;
  }
  // Pipelined bytes beyond a bound: stop reading until the current request is done.
  if (!closed_ && llhttp_get_errno(parser_.get()) == HPE_PAUSED &&
      evbuffer_get_length(input) > limits_.max_pipelined_bytes) {
    io_->disableRead();
  }
}

void Http1ServerConnection::rejectParseError(int err) {
  if (refusal_) {
    // A callback refused the request and already chose the answer.
    const Problem refusal = std::move(*refusal_);
    refusal_.reset();
    if (refusal.status == 431 || refusal.status == 414) {
      host_.countRejection(Rejection::HeaderTooLarge);
    }
    rejectRequest(refusal);
  } else if (err == HPE_INVALID_METHOD || parser_->method == HTTP_PRI) {
    // The method rule HTTP/2 applies too (methodRefusal). llhttp knows PRI
    // only as HTTP/2's preface, so any other PRI request is an error there.
    rejectRequest(problems::kBadRequest, "the request method is not one sluice proxies");
  } else {
    rejectRequest(problems::kMalformedRequest, std::string("the request is not valid HTTP/1.1: ") +
                                                   llhttp_get_error_reason(parser_.get()));
  }
}

void Http1ServerConnection::resetRequestState() {
  head_ = RequestHead{};
  header_fields_.reset();
  header_bytes_ = 0;
  field_name_bytes_ = 0;
  request_complete_ = false;
  response_complete_ = false;
  head_request_ = false;
  chunked_response_ = false;
  close_delimited_ = false;
  response_started_ = false;
  chunked_request_ = false;
}

bool Http1ServerConnection::countHeaderBytes(size_t len) {
  header_bytes_ += len;
  if (header_bytes_ > limits_.max_header_bytes) {
    refuseHeaderTooLarge();
    return false;
  }
  return true;
}

int Http1ServerConnection::refuse(const ProblemKind& kind, std::string detail) {
  refusal_ = std::make_unique<Problem>(makeProblem(kind, std::move(detail)));
  return -1;
}

std::string Http1ServerConnection::uriTooLongDetail() const {
  return "the request target exceeds sluice's limit on a request head (limits.max_header_bytes, " +
         std::to_string(std::min(limits_.max_header_bytes, HeadScanner::kMaxHeadBytes)) + " bytes)";
}

int Http1ServerConnection::refuseHeaderTooLarge() {
  return refuse(problems::kHeaderTooLarge, "request headers exceed sluice's limits");
}

std::optional<size_t> Http1ServerConnection::HeadScanner::scan(const char* data, size_t len) {
  const std::optional<size_t> head = scanLines(data, len);
  if (!head) return head;
  head_bytes_ += *head;
  if (tooLarge()) return std::nullopt;
  return head;
}

namespace {

// The bytes that end a header name for HeadScanner: whitespace (refused),
// the colon (the value starts), LF (a line without a colon: llhttp refuses it).
constexpr std::array<bool, 256> kNameEnd = [] {
  std::array<bool, 256> end{};
  end[' '] = end['\t'] = end[':'] = end['\n'] = true;
  return end;
}();

}  // namespace

std::optional<size_t> Http1ServerConnection::HeadScanner::scanLines(const char* data, size_t len) {
  // Line by line: the request line and values to their LF with memchr, names
  // byte by byte in a tight loop (a table look-up each), line starts alone.
  // Every byte of the head used to be a step of the state machine
  // (PROFILE.md, sixth round: 3.1k instructions per request, now ~1k).
  size_t i = 0;
  while (i < len && state_ != State::Done) {
    switch (state_) {
      case State::RequestLine: {
        const auto* lf = static_cast<const char*>(std::memchr(data + i, '\n', len - i));
        const size_t end = lf == nullptr ? len : static_cast<size_t>(lf - data);
        // Empty lines (CR LF or LF) before the request line are skipped.
        for (size_t k = i; !request_line_text_ && k < end; ++k) {
          if (data[k] != '\r') request_line_text_ = true;
        }
        if (lf == nullptr) return len;
        if (request_line_text_) state_ = State::LineStart;
        i = end + 1;
        break;
      }
      case State::LineStart: {
        const char c = data[i++];
        if (c == ' ' || c == '\t') return std::nullopt;  // obs-fold (RFC 9112 §5.2)
        state_ = c == '\r' ? State::EndCr : c == '\n' ? State::Done : State::Name;
        break;
      }
      case State::Name: {
        while (i < len && !kNameEnd[static_cast<unsigned char>(data[i])]) ++i;
        if (i == len) return len;
        const char c = data[i++];
        if (c == ' ' || c == '\t') return std::nullopt;       // whitespace before the colon (§5.1)
        state_ = c == ':' ? State::Value : State::LineStart;  // LF: no colon, the parser rejects it
        break;
      }
      case State::Value: {
        // Values are most of a head: jump to the line's end.
        const void* lf = std::memchr(data + i, '\n', len - i);
        if (lf == nullptr) return len;
        i = static_cast<size_t>(static_cast<const char*>(lf) - data) + 1;
        state_ = State::LineStart;
        break;
      }
      case State::EndCr:
        ++i;
        state_ = State::Done;  // CRLF ends the head; anything else, the parser judges
        break;
      case State::Done:
        break;
    }
  }
  return i;
}

void Http1ServerConnection::ChunkScanner::reset() {
  state_ = State::Size;
  remaining_ = 0;
  cut_extension_ = false;
}

Http1ServerConnection::ChunkScanner::Step Http1ServerConnection::ChunkScanner::scan(
    const char* data, size_t len) {
  static constexpr Step kBroken{false, 0, 0};
  size_t i = 0;
  for (; i < len && state_ != State::Done; ++i) {
    const char c = data[i];
    switch (state_) {
      case State::Size:
        if (c == '\r') {
          state_ = State::SizeLf;
        } else if (c == '\n') {
          return kBroken;  // a bare LF ends no line here
        } else if (const int digit = hexDigit(c); digit >= 0) {
          // Saturates: llhttp refuses a size this large anyway.
          remaining_ = remaining_ > (UINT64_MAX >> 4)
                           ? UINT64_MAX
                           : (remaining_ << 4) | static_cast<uint64_t>(digit);
        } else {
          // ';' or whitespace starts an extension, cut out from here; any
          // other byte goes to the parser, which refuses it.
          state_ = State::Extension;
          cut_extension_ = c == ';' || c == ' ' || c == '\t';
          if (cut_extension_) return {true, i, 0};
        }
        break;
      case State::Extension: {
        const size_t start = i;
        for (; i < len && data[i] != '\r'; ++i) {
          if (data[i] == '\n') return kBroken;  // a bare LF inside a chunk extension
        }
        if (cut_extension_) {
          // Cut up to the CR; the next scan starts at the CR, which is parsed.
          if (i < len) cut_extension_ = false;
          return {true, start, i - start};
        }
        if (i == len) return {true, len, 0};
        state_ = State::SizeLf;  // the CR
        break;
      }
      case State::SizeLf:
        if (c != '\n') return kBroken;
        state_ = remaining_ == 0 ? State::TrailerLineStart : State::Data;
        break;
      case State::Data: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, len - i));
        remaining_ -= take;
        i += take - 1;
        if (remaining_ == 0) state_ = State::DataCr;
        break;
      }
      case State::DataCr:
        if (c != '\r') return kBroken;
        state_ = State::DataLf;
        break;
      case State::DataLf:
        if (c != '\n') return kBroken;
        state_ = State::Size;
        break;
      case State::TrailerLineStart:
        if (c == '\r') {
          state_ = State::FinalLf;
        } else {
          state_ = c == '\n' ? State::Done : State::TrailerLine;
        }
        break;
      case State::TrailerLine:
        if (c == '\n') state_ = State::TrailerLineStart;
        break;
      case State::FinalLf:
        if (c != '\n') return kBroken;
        state_ = State::Done;
        break;
      case State::Done:
        break;
    }
  }
  return {true, i, 0};
}

int Http1ServerConnection::onMessageBegin(llhttp_t* p) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  self->resetRequestState();
  self->in_request_ = true;
  return 0;
}

int Http1ServerConnection::onUrl(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  // The target is the head's first counted bytes: past the limit here, it
  // is the target that is too long (RFC 9112 §3: 414, not 431).
  self->header_bytes_ += len;
  if (self->header_bytes_ > self->limits_.max_header_bytes) {
    return self->refuse(problems::kUriTooLong, self->uriTooLongDetail());
  }
  self->head_.path.append(at, len);
  return 0;
}

int Http1ServerConnection::onHeaderField(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  if (!self->countHeaderBytes(len)) return -1;
  // A chunked body's trailer section: counted, never forwarded, never part
  // of a head (this request's went to its Exchange already).
  if (p->flags & F_TRAILING) {
    self->field_name_bytes_ += len;  // an empty name is still refused (onHeaderFieldComplete)
    return 0;
  }
  if (self->header_fields_.flush(self->head_.headers) &&
      self->head_.headers.size() >= self->limits_.max_headers) {
    return self->refuseHeaderTooLarge();
  }
  self->header_fields_.borrowField({at, len});
  self->field_name_bytes_ += len;
  return 0;
}

int Http1ServerConnection::onHeaderFieldComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  // ": value" — llhttp 8.1 takes it as a field with an empty name; http-parser refused it.
  if (self->field_name_bytes_ == 0) {
    return self->refuse(problems::kMalformedRequest,
                        "the request is not valid HTTP/1.1: a header field without a name");
  }
  self->field_name_bytes_ = 0;
  return 0;
}

int Http1ServerConnection::onHeaderValue(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  if (!self->countHeaderBytes(len)) return -1;
  if (p->flags & F_TRAILING) return 0;  // a trailer's value: dropped (onHeaderField)
  self->header_fields_.borrowValue({at, len});
  return 0;
}

int Http1ServerConnection::onHeadersComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  self->header_fields_.flush(self->head_.headers);
  if (self->checkHead(*p) != 0) return -1;
  // An offer checkHead let through (h2c) is ignored: the bytes after this
  // head are still HTTP/1.1, not a new protocol for llhttp to stop at.
  p->upgrade = 0;
  self->chunked_request_ = (p->flags & F_CHUNKED) != 0;
  if (self->chunked_request_) self->chunk_scanner_.reset();
  self->head_.version_major = p->http_major;
  self->head_.version_minor = p->http_minor;
  self->head_request_ = p->method == HTTP_HEAD;
  self->keep_alive_ = llhttp_should_keep_alive(p) != 0 && !self->close_after_response_;

  const MonotonicTime start = self->host_.dispatcher().clock().now();
  // RFC 9110 §10.1.1: the expectation token is case-insensitive.
  const auto expect = self->head_.headers.get("expect");
  const bool expects_continue =
      expect && p->http_minor >= 1 && toLower(trimOws(*expect)) == "100-continue";
  self->head_.headers.remove("expect");
  self->client_minor_ = p->http_minor;
  // From here the body (if any) is read under body_read_timeout; onMessageComplete ends it.
  self->enterReadPhase(ReadPhase::Body);
  RequestDecoder& ex = self->host_.newStream(self->head_, *self, start);
  if (self->closed_) return -1;
  self->exchange_ = &ex;  // decodeHeaders may answer at once (404, 400, 413) and let go of us
  ex.decodeHeaders(std::move(self->head_));
  self->head_ = RequestHead{};
  if (self->closed_) return -1;
  if (expects_continue && self->exchange_ != nullptr && !self->response_started_) {
    // Not answered from the head alone (a Content-Length above max_body is
    // 413 at once, without it): the body is buffered by sluice, so let the
    // client send it now.
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    evbuffer_add(self->io_->output(), kContinue, sizeof(kContinue) - 1);
    self->noteOutput({sizeof(kContinue) - 1, 0, 0});
  }
  return 0;
}

int Http1ServerConnection::checkHead(const llhttp_t& p) {
  if (head_.headers.size() > limits_.max_headers) return refuseHeaderTooLarge();
  if (p.http_major != 1 || p.http_minor > 1) {
    return refuse(problems::kHttpVersionNotSupported,
                  "sluice serves HTTP/1.0, HTTP/1.1 and HTTP/2; the request says HTTP/" +
                      std::to_string(p.http_major) + "." + std::to_string(p.http_minor));
  }
  head_.method = llhttp_method_name(static_cast<llhttp_method_t>(p.method));
  if (auto why = methodRefusal(head_.method)) {
    return refuse(problems::kBadRequest, *why);
  }
  if (p.upgrade && !ignoreUpgradeOffer()) {
    return refuse(problems::kBadRequest,
                  "the request cannot be proxied: sluice does not switch protocols (Upgrade)");
  }
  // Both framings at once is how requests are smuggled (RFC 9112 §6.3).
  if ((p.flags & F_CHUNKED) && head_.headers.has("content-length")) {
    return refuse(problems::kBadRequest,
                  "Content-Length and Transfer-Encoding together (RFC 9112 §6.3)");
  }
  if (head_.headers.has("transfer-encoding")) {
    if (const int refused = checkTransferEncoding(p); refused != 0) return refused;
  }
  // RFC 9112 §3.2: exactly one Host on HTTP/1.1, at most one on HTTP/1.0.
  const size_t hosts = head_.headers.count("host");
  if (hosts > 1 || (hosts == 0 && p.http_minor >= 1)) {
    return refuse(problems::kBadRequest,
                  hosts > 1 ? "more than one Host header field (RFC 9112 §3.2)"
                            : "an HTTP/1.1 request needs a Host header field (RFC 9112 §3.2)");
  }
  if (!toOriginForm(head_)) {
    return refuse(problems::kBadRequest,
                  "the request target is neither origin-form (/path) nor an http(s) "
                  "absolute-form URI (RFC 9112 §3.2)");
  }
  if (normalizePath(head_.path) == PathNormalization::AboveRoot) {
    return refuse(problems::kBadRequest, std::string(kPathAboveRoot));
  }
  return 0;
}

int Http1ServerConnection::checkTransferEncoding(const llhttp_t& p) {
  // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding may be treated
  // as faulty (1.0 has no chunked coding; an intermediary may frame it by
  // Content-Length or close), and the connection closed after the answer.
  if (p.http_minor == 0) {
    return refuse(problems::kBadRequest,
                  "Transfer-Encoding on an HTTP/1.0 request (RFC 9112 §6.1)");
  }
  // The codings, in order, over every Transfer-Encoding field.
  size_t codings = 0;
  bool chunked_last = false, chunked_before = false;
  for (auto value : head_.headers.getAll("transfer-encoding")) {
    while (!value.empty()) {
      const auto comma = value.find(',');
      const auto token = trimOws(value.substr(0, comma));
      if (!token.empty()) {
        chunked_before = chunked_before || chunked_last;
        chunked_last = equalsIgnoreCase(token, "chunked");
        ++codings;
      }
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  // §6.3: chunked must be the last coding (once), else the length is unknowable.
  if (!chunked_last || chunked_before) {
    return refuse(problems::kBadRequest,
                  "a request Transfer-Encoding whose last coding is not chunked, or chunked "
                  "twice (RFC 9112 §6.3)");
  }
  // §6.1: sluice would have to decode gzip (or anything but chunked) to
  // forward the body honestly; it re-frames chunked only.
  if (codings > 1) {
    return refuse(problems::kNotImplemented,
                  "a request Transfer-Encoding other than chunked alone; sluice decodes no "
                  "transfer coding but chunked (RFC 9112 §6.1)");
  }
  return 0;
}

bool Http1ServerConnection::ignoreUpgradeOffer() {
  // `Upgrade: h2c` (RFC 7540 §3.2; curl --http2 and the JDK HttpClient send
  // it on http://) is only an offer: answer in HTTP/1.1, as nginx does. Any
  // other protocol (websocket, ...) would need a tunnel sluice does not make.
  bool offered = false;
  for (auto value : head_.headers.getAll("upgrade")) {
    while (!value.empty()) {
      const auto comma = value.find(',');
      const std::string token = toLower(trimOws(value.substr(0, comma)));
      if (!token.empty()) {
        if (token != "h2c") return false;
        offered = true;
      }
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  if (!offered) return false;
  head_.headers.remove("upgrade");
  head_.headers.remove("http2-settings");
  return true;
}

int Http1ServerConnection::onBody(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  self->last_body_byte_ = self->host_.dispatcher().clock().now();
  if (self->exchange_ != nullptr) self->exchange_->decodeData(at, len);
  return self->closed_ ? -1 : 0;
}

int Http1ServerConnection::onMessageComplete(llhttp_t* p) {
  auto* self = static_cast<Http1ServerConnection*>(p->data);
  self->request_complete_ = true;
  self->enterReadPhase(ReadPhase::Busy);
  if (self->exchange_ != nullptr) self->exchange_->decodeComplete();
  if (!self->closed_ && self->response_complete_) self->maybeNextRequest();
  // Stop here: the next pipelined request waits until this response is written.
  return HPE_PAUSED;
}

void Http1ServerConnection::rejectRequest(const ProblemKind& kind, std::string detail,
                                          std::optional<CancelReason> cancel_reason) {
  rejectRequest(makeProblem(kind, std::move(detail), cancel_reason));
}

void Http1ServerConnection::rejectRequest(const Problem& problem) {
  // The stream is unparseable from here on: answer (if no response is under way) and close.
  close_after_response_ = true;
  keep_alive_ = false;
  if (exchange_ != nullptr) {
    // The request broke mid-body (a bad chunk size, say). Its body was never
    // complete, so nothing went upstream: the Exchange answers 400 itself and
    // the connection closes after it (close_after_response_).
    io_->disableRead();
    exchange_->sendLocalReply(problem);
    if (exchange_ != nullptr) {  // it could not answer: drop the client
      RequestDecoder* ex = exchange_;
      exchange_ = nullptr;
      ex->onDownstreamDisconnect(CancelReason::ClientDisconnect);
      close();
    }
    return;
  }
  host_.countUnparsedRequest(problem.status);
  LocalReply reply = makeProblemReply(problem);
  head_request_ = false;
  encodeHeaders(std::move(reply.head), false);
  encodeData(reply.body.data(), reply.body.size(), true);
  closing_ = true;
  io_->disableRead();
  if (evbuffer_get_length(io_->output()) == 0) close();
}

// --- writing ------------------------------------------------------------------------

void Http1ServerConnection::encodeHeaders(ResponseHead&& head, bool end_stream) {
  if (closed_) return;
  response_started_ = true;
  Http1HeadWriter out;
  char status[32] = "HTTP/1.1 ";
  const auto written = std::to_chars(status + 9, status + sizeof(status) - 1, head.status);
  *written.ptr = ' ';
  out.add(std::string_view(status, written.ptr + 1 - status));
  out.add(head.reason.empty() ? reasonPhrase(head.status) : head.reason);
  out.add("\r\n");

  const bool no_body = !mayHaveBody(head_request_, head.status);
  const bool has_length = head.headers.has("content-length");
  chunked_response_ = false;
  close_delimited_ = false;
  if (head.status == 413) close_after_response_ = true;  // never read an oversized body
  if (!no_body && !has_length) {
    if (end_stream) {
      out.add("content-length: 0\r\n");
    } else if (client_minor_ >= 1) {
      // Unknown length: chunked for HTTP/1.1 clients, close-delimited for 1.0.
      chunked_response_ = true;
      out.add("transfer-encoding: chunked\r\n");
    } else {
      close_delimited_ = true;
      keep_alive_ = false;
    }
  }
  bool dated = false;
  for (const auto& [name, value] : head.headers) {
    if (name == "connection" || name == "transfer-encoding" || name == "keep-alive") continue;
    dated = dated || name == "date";
    out.addField(name, value);
  }
  // RFC 9110 §6.6.1: sluice's own answers and forwarded ones without a Date.
  if (!dated) out.addField("date", httpDate(host_.dispatcher().clock()));
  if (!keep_alive_ || close_after_response_) {
    out.add("connection: close\r\n");
  } else if (client_minor_ == 0) {
    out.add("connection: keep-alive\r\n");
  }
  out.add("\r\n");
  evbuffer_add(io_->output(), out.data(), out.size());
  response_body_wire_ = 0;
  response_body_ = 0;
  response_tail_ = 0;
  noteOutput({out.size(), 0, 0});
  response_tail_ = 0;  // (the head is not a tail)
  if (end_stream) encodeData(nullptr, 0, true);
}

namespace {

// Chunks up to this size are framed in a stack buffer and added at once.
constexpr size_t kFramedChunkMax = 4096;

// Adds a chunk — its size line, its data and the CRLF after it — to `output`:
// a streamed chunk (an SSE event, ~200 bytes) with one evbuffer_add, as
// every add takes the buffer's lock and runs its callbacks (the flush
// scheduling, the send-stall watch); three per chunk cost ~450 instructions
// more (PROFILE.md). A larger chunk goes in three adds: no copy through the
// stack. (A reservation in the buffer instead allocated 2.5 times as many
// chains: it needs contiguous room, an add fills the last chain's tail.)
void addChunk(evbuffer* output, std::string_view size_line, const char* data, size_t len) {
  if (len <= kFramedChunkMax) {
    char framed[kChunkSizeLineMax + kFramedChunkMax + 2];
    std::memcpy(framed, size_line.data(), size_line.size());
    std::memcpy(framed + size_line.size(), data, len);
    std::memcpy(framed + size_line.size() + len, "\r\n", 2);
    evbuffer_add(output, framed, size_line.size() + len + 2);
    return;
  }
  evbuffer_add(output, size_line.data(), size_line.size());
  evbuffer_add(output, data, len);
  evbuffer_add(output, "\r\n", 2);
}

}  // namespace

void Http1ServerConnection::encodeData(const char* data, size_t len, bool end_stream) {
  if (closed_) return;
  evbuffer* output = io_->output();
  if (len > 0 && !head_request_) {
    if (chunked_response_) {
      char size_line[kChunkSizeLineMax];
      const size_t n = chunkSizeLine(len, size_line);
      addChunk(output, std::string_view(size_line, n), data, len);
      noteOutput({n + len + 2, len, 2});
    } else {
      evbuffer_add(output, data, len);
      noteOutput({len, len, 0});
    }
  }
  if (!end_stream) return;
  if (chunked_response_ && !head_request_) {
    evbuffer_add(output, "0\r\n\r\n", 5);
    noteOutput({5, 0, 0});
  }
  response_complete_ = true;
  if (close_delimited_ || !keep_alive_ || close_after_response_) {
    closing_ = true;  // close once the client has it all (onWrite)
    // Never from inside the Exchange that is finishing its response: close()
    // would report a client disconnect to it. onExchangeDone closes instead.
    if (evbuffer_get_length(output) == 0 && exchange_ == nullptr) closeOrLinger();
  }
}

void Http1ServerConnection::resetStream() {
  // An HTTP/1.1 response cannot be aborted in-band: closing the connection
  // mid-body tells the client the response is incomplete.
  exchange_ = nullptr;
  // Its Exchange hands over the response's spend next (holdUntilRead): what
  // a client on this host left unread in its socket is looked at now, while
  // the socket is still there. (What sluice still buffered is dropped, and
  // the Exchange does not count it as delivered.)
  if (!closed_ && !held_ && isThisHost()) {
    if (const std::optional<uint64_t> unread = unreadWireBytes()) {
      held_ = holdCurrentResponse();
      held_->unread = *unread;
      held_->dropped = bufferedBytes();
    }
  }
  close();
}

void Http1ServerConnection::resetStreamAfter(std::string_view final_bytes) {
  // The final bytes go out as one more chunk, then the connection closes once
  // its output drained (onWrite): still no terminating chunk, so the client
  // knows the response is incomplete.
  exchange_ = nullptr;
  if (closed_) return;
  encodeData(final_bytes.data(), final_bytes.size(), false);
  keep_alive_ = false;
  closing_ = true;
  // onExchangeDone closes (or lingers) once the output drained: the Exchange
  // is finishing and hands over its held spend first.
}

bool Http1ServerConnection::canWriteWithoutWaiting(size_t len) const {
  return !closed_ && !closing_ &&
         evbuffer_get_length(io_->output()) + len <= limits_.high_watermark;
}

bool Http1ServerConnection::aboveHighWatermark() const {
  return !closed_ && evbuffer_get_length(io_->output()) > limits_.high_watermark;
}

size_t Http1ServerConnection::bufferedBytes() const {
  // Also answers inside close(), when the Exchange asks what never reached the
  // client that just left. The buffer holds the tail of what was added: walk
  // the pieces back from the newest and count only their body bytes.
  if (!io_) return 0;
  size_t left = evbuffer_get_length(io_->output());
  size_t body = 0;
  for (auto it = output_pieces_.rbegin(); it != output_pieces_.rend() && left > 0; ++it) {
    const size_t tail = std::min(left, it->wire);
    body += std::min(it->body, tail > it->suffix ? tail - it->suffix : 0);
    left -= tail;
  }
  return body;
}

void Http1ServerConnection::pauseRequestBody() {
  if (closed_ || body_paused_) return;
  body_paused_ = true;
  // The kernel's buffers hold the rest, and TCP flow control stops the client.
  io_->disableRead();
  // Not the client's fault: a read timer firing meanwhile finds the body
  // paused and waits for resumeRequestBody() to start the gap anew.
}

void Http1ServerConnection::resumeRequestBody() {
  if (!body_paused_) return;
  body_paused_ = false;
  if (closed_ || closing_) return;
  if (read_phase_ == ReadPhase::Body) enterReadPhase(ReadPhase::Body);  // the gap starts now
  io_->enableRead();
  // Bytes already in the input raise no read event: parse them next turn,
  // never from inside the Exchange that resumed us.
  activateLater(body_resume_event_, &Http1ServerConnection::onBodyResumeCb);
}

void Http1ServerConnection::onBodyResumeCb(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  static_cast<Http1ServerConnection*>(arg)->parseInput();
}

void Http1ServerConnection::noteOutput(OutputPiece piece) {
  if (piece.body > 0) {
    response_body_wire_ += piece.wire;
    response_body_ += piece.body;
    response_tail_ = 0;
  } else {
    response_tail_ += piece.wire;
  }
  output_pieces_.push_back(piece);
  output_pieces_wire_ += piece.wire;
  // Forget the pieces already written: those after them cover the whole buffer.
  const size_t buffered = evbuffer_get_length(io_->output());
  while (output_pieces_.size() > 1 &&
         output_pieces_wire_ - output_pieces_.front().wire >= buffered) {
    output_pieces_wire_ -= output_pieces_.front().wire;
    output_pieces_.pop_front();
  }
}

void Http1ServerConnection::onExchangeDone() {
  exchange_ = nullptr;
  if (closed_) return;
  resumeRequestBody();  // no Exchange, no pause: the rest of the body is read and dropped
  if (closing_) {
    // encodeData or resetStreamAfter chose to close once the output drains; it
    // may have drained already.
    if (evbuffer_get_length(io_->output()) == 0) closeOrLinger();
    return;
  }
  if (!response_complete_) {
    close();  // the exchange ended without finishing its response
    return;
  }
  // Answered before the request was fully read (404 on a POST, say): keep
  // parsing and discard the rest of its body, then serve the next request.
  if (request_complete_) maybeNextRequest();
}

void Http1ServerConnection::maybeNextRequest() {
  if (closed_ || closing_ || !request_complete_ || !response_complete_ || exchange_ != nullptr) {
    return;
  }
  in_request_ = false;
  head_scanner_.reset();  // parsing resumes at the next request's first byte
  // Resume parsing on the next loop turn, never from inside the Exchange's
  // stack or the parser's own callback.
  activateLater(resume_event_, &Http1ServerConnection::onResumeCb);
}

void Http1ServerConnection::onResumeCb(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  auto* self = static_cast<Http1ServerConnection*>(arg);
  if (self->free_resume_event_) {
    // The connection's first resume (its constructor's): a keep-alive
    // request makes the event again (activateLater). Freeing an event from
    // its own callback is safe: libevent reads nothing of it afterwards.
    self->free_resume_event_ = false;
    self->resume_event_.reset();
  }
  if (self->closed_ || self->closing_) return;
  llhttp_resume(self->parser_.get());
  self->resetRequestState();
  self->enterReadPhase(ReadPhase::Idle);  // parseInput moves on to Head at the first byte
  self->io_->enableRead();
  self->parseInput();
}

// --- slow-client timeouts -----------------------------------------------------------

void Http1ServerConnection::enterReadPhase(ReadPhase phase) {
  read_phase_ = phase;
  const MonotonicTime now = host_.dispatcher().clock().now();
  const auto after = [now](std::chrono::milliseconds timeout) {
    return timeout.count() > 0 ? now + timeout : MonotonicTime::max();
  };
  switch (phase) {
    case ReadPhase::FirstHead:
      return;  // armed once, in the constructor
    case ReadPhase::Idle:
      read_deadline_ = after(limits_.idle_timeout);
      break;
    case ReadPhase::Head:
      read_deadline_ = after(limits_.header_read_timeout);
      break;
    case ReadPhase::Body:
      last_body_byte_ = now;
      read_deadline_ = after(limits_.body_read_timeout);
      break;
    case ReadPhase::Busy:
      read_deadline_ = MonotonicTime::max();
      break;
  }
  armReadTimer(read_deadline_);
}

void Http1ServerConnection::armReadTimer(MonotonicTime deadline) {
  // Lazily: a timer already due no later stays, and onReadTimer re-arms for
  // what is left of the phase then in force. A keep-alive connection's
  // Head -> Busy -> Idle phases move the timer about once per
  // header_read_timeout instead of three times per request.
  if (deadline >= read_timer_at_) return;
  read_timer_at_ = deadline;
  const timeval tv = toTimeval(deadline - host_.dispatcher().clock().now());
  evtimer_add(read_timer_.get(), &tv);
}

void Http1ServerConnection::onReadTimerCb(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  static_cast<Http1ServerConnection*>(arg)->onReadTimer();
}

void Http1ServerConnection::onReadTimer() {
  read_timer_at_ = MonotonicTime::max();  // fired: nothing armed now
  if (closed_) return;
  // The send-stall watch shares this timer: it re-asks for its own deadline
  // (any phase, closing too), or closes the connection.
  if (send_watch_.onAlarm()) return;  // stalled: closed
  if (held_ && held_->sampling) {
    const MonotonicTime now = host_.dispatcher().clock().now();
    if (now >= held_->next_sample) sampleHeld(now);
    if (closed_) return;
    if (held_ && held_->sampling) armReadTimer(held_->next_sample);
  }
  if (lingering_) {
    // The client said nothing about the last response within idle_timeout.
    if (host_.dispatcher().clock().now() < read_deadline_) {
      armReadTimer(read_deadline_);
    } else {
      close();
    }
    return;
  }
  if (closing_ || read_phase_ == ReadPhase::Busy) return;
  // The body deadline slides with every byte; onBody only notes the time, so
  // an early wake re-arms for what is left instead of re-arming per read.
  if (read_phase_ == ReadPhase::Body) {
    if (body_paused_) return;  // resumeRequestBody() starts the gap anew
    read_deadline_ = limits_.body_read_timeout.count() > 0
                         ? last_body_byte_ + limits_.body_read_timeout
                         : MonotonicTime::max();
  }
  if (host_.dispatcher().clock().now() < read_deadline_) {
    armReadTimer(read_deadline_);
    return;
  }
  switch (read_phase_) {
    case ReadPhase::Busy:
      return;
    case ReadPhase::Idle:
      // Nothing in flight and nothing asked: close quietly, as nginx and Envoy do.
      host_.countRejection(Rejection::IdleTimeout);
      close();
      return;
    case ReadPhase::FirstHead:
    case ReadPhase::Head:
      host_.countRejection(Rejection::HeaderTimeout);
      if (read_phase_ == ReadPhase::FirstHead && !head_bytes_seen_) {
        close();  // not a byte since accept: there is no request to answer
        return;
      }
      rejectRequest(problems::kRequestTimeout,
                    "the request head did not arrive within limits.header_read_timeout (" +
                        std::to_string(limits_.header_read_timeout.count()) + "ms)",
                    CancelReason::ClientDisconnect);
      return;
    case ReadPhase::Body:
      host_.countRejection(Rejection::BodyTimeout);
      if (exchange_ == nullptr) {
        close();  // already answered (404, 413): the rest of the body was being discarded
        return;
      }
      // Nothing went upstream yet (bodies are buffered first): the Exchange
      // answers 408 and ends; the connection closes after it.
      rejectRequest(problems::kRequestTimeout,
                    "no request body byte for limits.body_read_timeout (" +
                        std::to_string(limits_.body_read_timeout.count()) + "ms)",
                    CancelReason::ClientDisconnect);
      return;
  }
}

void Http1ServerConnection::onIoWrite() {
  if (closed_) return;
  if (closing_ && evbuffer_get_length(io_->output()) == 0) {
    closeOrLinger();
    return;
  }
  if (exchange_ != nullptr) exchange_->onDownstreamWritable();
}

// --- connection events ------------------------------------------------------------

void Http1ServerConnection::onIoEvent(short events) {
  if (closed_) return;
  if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
    if (held_) {
      // A FIN: the client closed having read everything (Linux closes a
      // socket with unread data by RST) — or only half-closed: a last look
      // says. A reset (ECONNRESET, or a failed write): it left some of the
      // last response unread; how much, TCP does not tell a sender, but the
      // last look at a client on this host does. No look yet at such a
      // client: it reset within the first look's few milliseconds after the
      // response ended, so it was reading it (or closed abortively having
      // read it all) — read. A client elsewhere: all of it unread. A reset
      // after its FIN (Linux reports EPIPE then): it had read all that had
      // arrived when it closed, and only bytes sent after its close (the
      // end of a chunked body, say) met the reset.
      const int err = EVUTIL_SOCKET_ERROR();
      const bool reset = (events & BEV_EVENT_ERROR) != 0 && err != EPIPE;
      if (reset) {
        settleHeld(held_->unread.value_or(isThisHost() ? 0 : UINT64_MAX));
      } else {
        settleHeld(held_->sampling ? unreadWireBytes().value_or(0) : 0);
      }
    }
    // EOF or reset: the client is gone. Whatever its Exchange is doing, it learns now.
    close();
  }
}

// --- the last response's reading (docs/reference/metrics.md, "Delivered means read") ---

uint64_t Http1ServerConnection::HeldRead::unreadBody(uint64_t unread_wire) const {
  uint64_t unread = 0;
  if (unread_wire <= tail) {
    unread = 0;
  } else if (unread_wire - tail >= body_wire) {
    unread = body;  // the head too, or none of the body read
  } else {
    // Chunk framing (a size line and a CRLF per chunk) is spread evenly
    // enough over a stream's chunks to map wire bytes to body bytes by their
    // share; the error grows with the span mapped, so the smaller side is:
    // the unread tail, or the read prefix.
    const uint64_t unread_in_body = unread_wire - tail;
    const uint64_t read_in_body = body_wire - unread_in_body;
    const auto share = [this](uint64_t wire) {
      return static_cast<uint64_t>((static_cast<unsigned __int128>(wire) * body + body_wire / 2) /
                                   body_wire);
    };
    unread = unread_in_body <= read_in_body ? share(unread_in_body) : body - share(read_in_body);
  }
  return unread > dropped ? unread - dropped : 0;
}

bool Http1ServerConnection::isThisHost() {
  if (host_.peerUnreadProbe() == nullptr || !io_ || io_->bufferEvent() != nullptr ||
      io_->fd() < 0) {
    return false;  // (TLS: its wire bytes are not the response's)
  }
  if (peer_place_ == PeerPlace::Unknown) {
    peer_place_ =
        PeerUnreadProbe::peerMayBeLocal(io_->fd()) ? PeerPlace::ThisHost : PeerPlace::Elsewhere;
  }
  return peer_place_ == PeerPlace::ThisHost;
}

void Http1ServerConnection::holdUntilRead(std::unique_ptr<HeldDelivery> hold) {
  if (closed_) {
    // Closed under the response (a cut without a final event): what the
    // client's socket held unread when it closed (resetStream looked), else
    // nobody to ask.
    const std::unique_ptr<HeldRead> look = std::move(held_);
    if (look && look->unread) {
      hold->settle(look->unreadBody(*look->unread));
    } else {
      hold->settle(0);
    }
    return;
  }
  if (held_) settleHeld(0);  // (not reached: the next request settles it)
  held_ = holdCurrentResponse();
  held_->delivery = std::move(hold);
  // A client on this host: look at what it has left unread soon after the
  // response went out (a client that goes on asking settles it first), then
  // less and less often.
  if (isThisHost()) {
    const MonotonicTime now = host_.dispatcher().clock().now();
    held_->sampling = true;
    held_->interval = kFirstUnreadLook;
    held_->next_sample = now + kFirstUnreadLook;
    // A response the connection closes after (a cut, `Connection: close`)
    // gets its first look right away: its client may reset at any moment.
    // (Not a keep-alive answer: its client's next request usually comes first.)
    if (closing_) sampleHeld(now);
    if (held_ && held_->sampling) armReadTimer(held_->next_sample);
  }
}

std::unique_ptr<Http1ServerConnection::HeldRead> Http1ServerConnection::holdCurrentResponse()
    const {
  auto held = std::make_unique<HeldRead>();
  held->body_wire = response_body_wire_;
  held->body = response_body_;
  held->tail = response_tail_;
  return held;
}

std::optional<uint64_t> Http1ServerConnection::unreadWireBytes() {
  if (!isThisHost()) return std::nullopt;
  const std::optional<uint64_t> kernel = host_.peerUnreadProbe()->unreadBytes(io_->fd());
  if (!kernel) return std::nullopt;
  return *kernel + evbuffer_get_length(io_->output());
}

void Http1ServerConnection::sampleHeld(MonotonicTime now) {
  const std::optional<uint64_t> unread = unreadWireBytes();
  if (!unread) {
    held_->sampling = false;  // its socket is gone (a reset on its way): the last look stands
    return;
  }
  if (*unread == 0) {
    settleHeld(0);  // read to the last byte
    if (lingering_) close();
    return;
  }
  held_->unread = *unread;
  held_->interval = std::min(held_->interval * 4, kLastUnreadLookInterval);
  held_->next_sample = now + held_->interval;
}

void Http1ServerConnection::settleHeld(uint64_t unread_wire, std::optional<CancelReason> reason) {
  const std::unique_ptr<HeldRead> held = std::move(held_);
  const uint64_t unread = unread_wire == UINT64_MAX ? UINT64_MAX : held->unreadBody(unread_wire);
  if (held->delivery) held->delivery->settle(unread, reason);
}

void Http1ServerConnection::closeOrLinger() {
  if (lingering_) return;
  // Plain TCP only: a TLS half-close without close_notify reads as a
  // truncation, and what TLS itself reads after it is not the client's say.
  if (!held_ || io_->bufferEvent() != nullptr || io_->fd() < 0) {
    close();
    return;
  }
  // The last response's spend waits for the client's reading: send our FIN,
  // keep reading until the client's FIN (it read everything) or reset (it
  // did not), for at most limits.idle_timeout.
  lingering_ = true;
  ::shutdown(io_->fd(), SHUT_WR);
  io_->enableRead();
  read_phase_ = ReadPhase::Idle;
  read_deadline_ = limits_.idle_timeout.count() > 0
                       ? host_.dispatcher().clock().now() + limits_.idle_timeout
                       : MonotonicTime::max();
  armReadTimer(read_deadline_);
}

void Http1ServerConnection::closeWhenIdle() {
  close_after_response_ = true;
  keep_alive_ = false;
  if (exchange_ == nullptr && !in_request_) close();
}

void Http1ServerConnection::onSendStalled() {
  if (closed_) return;
  host_.countRejection(Rejection::SendTimeout);
  closeWith(CancelReason::ClientStalled);
}

void Http1ServerConnection::close() { closeWith(CancelReason::ClientDisconnect); }

void Http1ServerConnection::closeWith(CancelReason reason) {
  if (closed_) return;
  closed_ = true;
  // A client that stopped taking bytes (send_timeout) did not read the last
  // response; sluice closing (idle_timeout, drain, shutdown): a last look at
  // a client on this host says what it left unread (client_abandoned), else
  // nothing said against it: it counts as read.
  if (held_ && held_->delivery) {
    if (reason == CancelReason::ClientStalled) {
      settleHeld(UINT64_MAX, CancelReason::ClientStalled);
    } else {
      settleHeld(held_->sampling ? unreadWireBytes().value_or(0) : 0);
    }
  }
  if (exchange_ != nullptr) {
    RequestDecoder* ex = exchange_;
    exchange_ = nullptr;
    ex->onDownstreamDisconnect(reason);
  }
  if (io_) io_->stop();
  if (resume_event_) event_del(resume_event_.get());
  if (body_resume_event_) event_del(body_resume_event_.get());
  evtimer_del(read_timer_.get());
  send_watch_.stop();
  host_.connectionClosed(*this);
}

}  // namespace sluice
