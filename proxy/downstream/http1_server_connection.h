#pragma once

// One downstream HTTP/1.1 connection: keep-alive, chunked bodies both ways,
// pipelined requests answered in order, parsed by llhttp.
//
// Requests are served one at a time: after a request's last byte the parser
// pauses, later pipelined bytes wait in the input buffer, and parsing resumes
// when the response has been written — so responses can never be reordered.
// Reading stays enabled the whole time, so the client's EOF or reset is seen
// the moment the kernel reports it, whatever the Exchange is doing (reading
// the body, queued, waiting for the first byte, streaming).
//
// Slow clients are bounded by one timer (HAProxy arms one per stream), armed
// for whichever read deadline applies (Http1Limits; 0 = off):
//   first request:  header_read_timeout from accept until the head is in
//                   (no byte at all: closed quietly; some: 408 and close);
//   keep-alive:     idle_timeout from the end of a response until the next
//                   request's first byte (closed quietly), then
//                   header_read_timeout from that byte until the head is in
//                   (408) — a total for the head, not per byte (slow loris);
//   request body:   body_read_timeout without a body byte (408 through the
//                   Exchange); not while the Exchange paused the body
//                   (pauseRequestBody: a streamed upload waits for its
//                   upstream, and reading stops until it catches up);
//   response:       none here — the Exchange's budget and timers own it.
// One write deadline: send_timeout (SendStallWatch) closes a connection whose
// output has been pending without a byte accepted for that long, whatever the
// phase, and cancels its Exchange with `client_stalled`. The watch shares the
// read timer (its Alarm): the timer is armed for the earlier of the two
// deadlines, and each firing asks the watch first, then the read phase.
//
// The connection either owns a fresh socket or adopts a bufferevent from the
// ProtocolDetector (plain listeners sniff for the HTTP/2 preface first; TLS
// listeners let ALPN decide): bytes already read into that bufferevent's
// input are parsed as if they had just arrived. A plain socket then leaves
// the bufferevent for SocketIo's own reads and writes (no `epoll_ctl` or
// `ioctl` per request, proxy/event/socket_io.h); TLS stays on bufferevent_openssl.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/cancel_reason.h"
#include "common/fifo.h"
#include "common/http1_header_accumulator.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "proxy/downstream/downstream_connection.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/downstream/send_stall_watch.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/event/socket_io.h"
#include "proxy/http/llhttp_parser.h"

namespace sluice {

/** Limits that protect sluice from a hostile or broken client. */
struct Http1Limits {
  size_t max_header_bytes = 64 * 1024;       // request line + headers → 431 beyond
  size_t max_headers = 100;                  // header count → 431 beyond
  size_t high_watermark = 64 * 1024;         // response bytes buffered before the upstream pauses
  size_t low_watermark = 16 * 1024;          // ... and resumes
  size_t max_pipelined_bytes = 1024 * 1024;  // unparsed input buffered while a request runs
  // Slow-client timeouts (config `limits`); zero = off.
  std::chrono::milliseconds header_read_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds body_read_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  // Output pending and not a byte accepted for this long: closed (client_stalled).
  std::chrono::milliseconds send_timeout = std::chrono::seconds(60);
};

class Http1ServerConnection final : public DownstreamConnection,
                                    public DownstreamStream,
                                    private SocketIoCallbacks,
                                    private SendStallWatch::Alarm {
 public:
  /** Serves a freshly accepted plain-text socket. */
  Http1ServerConnection(DownstreamConnectionHost& host, evutil_socket_t fd,
                        std::string peer_address, Http1Limits limits = {});
  /**
   * Adopts `bev` (plain or TLS, connected; its callbacks are replaced). Input
   * already buffered in it is parsed on the next loop turn. `tls` is reported
   * to the upstream as X-Forwarded-Proto. `accepted_at` is when the socket
   * was accepted (the first request head's header_read_timeout runs from
   * there, TLS handshake and protocol sniffing included); default: now.
   */
  Http1ServerConnection(DownstreamConnectionHost& host, BufferEventPtr bev,
                        std::string peer_address, bool tls, Http1Limits limits = {},
                        std::optional<MonotonicTime> accepted_at = std::nullopt);
  ~Http1ServerConnection() override;

  // DownstreamStream
  void encodeHeaders(ResponseHead&& head, bool end_stream) override;
  void encodeData(const char* data, size_t len, bool end_stream) override;
  void resetStream() override;
  void resetStreamAfter(std::string_view final_bytes) override;
  bool canWriteWithoutWaiting(size_t len) const override;
  bool aboveHighWatermark() const override;
  size_t bufferedBytes() const override;
  void pauseRequestBody() override;
  void resumeRequestBody() override;
  void onExchangeDone() override;
  bool confirmsReads() const override { return true; }
  void holdUntilRead(std::unique_ptr<HeldDelivery> hold) override;
  const ClientInfo& clientInfo() const override { return client_info_; }

  // DownstreamConnection
  /** Closes after the in-flight response (drain): Connection: close. */
  void closeWhenIdle() override;
  /** Closes at once; the Exchange, if any, sees a client disconnect. */
  void close() override;
  /** Closes at once; the Exchange, if any, is cancelled with `reason`. */
  void closeWith(CancelReason reason);

  /**
   * What http-parser tolerated and RFC 9112 §5 forbids, checked on the raw
   * head bytes before they are parsed: obsolete line folding (a header line
   * starting with whitespace) and whitespace between a field name and its
   * colon — both ways to make two parsers disagree about a request (llhttp
   * 8.1 accepts the first and refuses the second; this scan answers both
   * with 400 `bad-request`). It also bounds the raw head, whitespace and
   * line ends included, whatever max_header_bytes says: kHttp1MaxHeadBytes.
   * Public for its differential test (a value type, no connection state).
   */
  class HeadScanner {
   public:
    /** Starts over at the first byte of a request. */
    void reset() {
      state_ = State::RequestLine;
      request_line_text_ = false;
      head_bytes_ = 0;
    }
    bool done() const { return state_ == State::Done; }
    /**
     * Scans `data` up to the end of the head: the bytes of it that belong to
     * the head (all of them until the head is done), or nullopt at the first
     * forbidden byte or once the head is longer than kMaxHeadBytes.
     */
    std::optional<size_t> scan(const char* data, size_t len);
    /** The head so far is longer than kMaxHeadBytes (scan returned nullopt for that). */
    bool tooLarge() const { return head_bytes_ > kMaxHeadBytes; }
    /** Still in the request line (or the empty lines before it). */
    bool inRequestLine() const { return state_ == State::RequestLine; }

    static constexpr size_t kMaxHeadBytes = kHttp1MaxHeadBytes;

   private:
    /** scan() without the size bound: the line rules alone. */
    std::optional<size_t> scanLines(const char* data, size_t len);

    enum class State { RequestLine, LineStart, Name, Value, EndCr, Done };
    State state_ = State::RequestLine;
    bool request_line_text_ = false;  // leading empty lines before the request line are allowed
    size_t head_bytes_ = 0;           // raw bytes of the head scanned so far
  };

 private:
  // SocketIoCallbacks
  void onIoRead() override;
  void onIoWrite() override;
  void onIoEvent(short events) override;
  static void onResumeCb(evutil_socket_t, short, void* arg);
  static void onBodyResumeCb(evutil_socket_t, short, void* arg);
  /** Runs `cb` on the next loop turn through `event`, made on first use. */
  void activateLater(EventPtr& event, event_callback_fn cb);
  void parseInput();
  void rejectRequest(const ProblemKind& kind, std::string detail,
                     std::optional<CancelReason> cancel_reason = std::nullopt);
  /** Answers `problem` (if no response is under way) and closes. */
  void rejectRequest(const Problem& problem);
  void maybeNextRequest();
  void resetRequestState();

  // --- slow-client timeouts ---------------------------------------------------
  /** Which read deadline the timer enforces. */
  enum class ReadPhase : uint8_t {
    FirstHead,  // a new connection: header_read_timeout from accept
    Idle,       // keep-alive between requests: idle_timeout
    Head,       // the next request's head started: header_read_timeout from its first byte
    Body,       // the request body is being read: body_read_timeout between bytes
    Busy,       // the request is read; the Exchange is answering
  };
  void enterReadPhase(ReadPhase phase);
  /**
   * Makes sure the read timer fires by `deadline` (MonotonicTime::max(): no
   * need). Never moves an armed timer later: onReadTimer re-checks the phase's
   * deadline when it fires and re-arms for what is left.
   */
  void armReadTimer(MonotonicTime deadline);
  void onReadTimer();
  static void onReadTimerCb(evutil_socket_t, short, void* arg);
  /** send_timeout: the client stopped reading. */
  // The send-stall watch's Alarm: it shares the read timer.
  void wakeBy(MonotonicTime at) override { armReadTimer(at); }
  void onSendStalled() override;

  // llhttp callbacks (one settings object for every connection).
  static const llhttp_settings_s& parserSettings();
  static int onMessageBegin(llhttp__internal_s*);
  static int onUrl(llhttp__internal_s*, const char*, size_t);
  static int onHeaderField(llhttp__internal_s*, const char*, size_t);
  static int onHeaderFieldComplete(llhttp__internal_s*);
  static int onHeaderValue(llhttp__internal_s*, const char*, size_t);
  static int onHeadersComplete(llhttp__internal_s*);
  static int onBody(llhttp__internal_s*, const char*, size_t);
  static int onMessageComplete(llhttp__internal_s*);
  /** The parser stopped at `err` (not paused): answers the request as the error says and closes. */
  void rejectParseError(int err);
  bool countHeaderBytes(size_t len);
  /** What sluice refuses in a parsed head (version, method, Upgrade, Host, target); 0 if fine. */
  int checkHead(const llhttp__internal_s& p);
  /** An `Upgrade: h2c` offer is dropped (answered in HTTP/1.1); false for any other protocol. */
  bool ignoreUpgradeOffer();
  /**
   * A request with Transfer-Encoding: 400 on HTTP/1.0 or unless chunked is
   * its last coding (once), 501 for any coding but chunked; 0 if fine.
   */
  int checkTransferEncoding(const llhttp__internal_s& p);
  /** The 414's detail. */
  std::string uriTooLongDetail() const;

  /** Records why a parser callback refuses the request; -1 for the callback to return. */
  int refuse(const ProblemKind& kind, std::string detail);
  int refuseHeaderTooLarge();

  /**
   * The last response's spend, until the client's reading of it is known
   * (docs/reference/metrics.md, "Delivered means read"), and how its wire
   * bytes map to body bytes for that.
   */
  struct HeldRead {
    std::unique_ptr<HeldDelivery> delivery;
    uint64_t body_wire = 0;  // its body pieces on the wire, chunk framing included
    uint64_t body = 0;       // their body bytes
    uint64_t tail = 0;       // framing after the last body byte (the terminating chunk)
    uint64_t dropped = 0;    // body bytes sluice dropped unsent (a cut): never counted delivered
    // Wire bytes the client had not read at the last look (none yet: nullopt).
    std::optional<uint64_t> unread;
    bool sampling = false;  // a client on this host: its unread bytes are looked at
    MonotonicTime next_sample{};
    std::chrono::milliseconds interval{};
    /**
     * Body bytes the client did not read when the last `unread_wire` bytes
     * written were unread, less those sluice dropped.
     */
    uint64_t unreadBody(uint64_t unread_wire) const;
  };
  /**
   * What the client has not read of what was written to it: sluice's output
   * buffer, its socket's send queue and, for a client on this host, its
   * socket's receive queue. nullopt when the client is not on this host
   * (or TLS: its wire bytes are not the response's).
   */
  std::optional<uint64_t> unreadWireBytes();
  /** A plain-TCP client on this host, whose socket sluice can look at (cached). */
  bool isThisHost();
  /** A HeldRead of the current response's wire layout. */
  std::unique_ptr<HeldRead> holdCurrentResponse() const;
  /** Looks at the held response's unread bytes; all read: settles it. */
  void sampleHeld(MonotonicTime now);
  /** Books the held response: its client left the last `unread_wire` bytes unread. */
  void settleHeld(uint64_t unread_wire, std::optional<CancelReason> reason = std::nullopt);
  /**
   * Closes once the last response is out, or with its spend held on a plain
   * socket, half-closes and lingers for the client's FIN or reset.
   */
  void closeOrLinger();

  /** One addition to the output buffer: some framing, `body` bytes, `suffix` framing. */
  struct OutputPiece {
    size_t wire;    // bytes added
    size_t body;    // of which response body
    size_t suffix;  // framing after the body (a chunk's CRLF)
  };
  void noteOutput(OutputPiece piece);

  DownstreamConnectionHost& host_;
  Http1Limits limits_;
  SocketIoPtr io_;              // the socket (plain) or its bufferevent (TLS)
  EventPtr resume_event_;       // the next request, next loop turn (made on first use)
  EventPtr body_resume_event_;  // parses the rest of a paused body, next loop turn (likewise)
  std::string peer_address_;
  ClientInfo client_info_;

  LlhttpPtr parser_;
  RequestHead head_;
  Http1HeaderAccumulator header_fields_;
  size_t header_bytes_ = 0;
  size_t field_name_bytes_ = 0;  // of the header name being read (llhttp allows an empty one)
  // Set by a parser callback that refuses the request. Out of line: rare, and
  // 144 bytes inline in every held connection.
  std::unique_ptr<Problem> refusal_;

  HeadScanner head_scanner_;

  /**
   * A chunked request body's framing, checked on the raw bytes before
   * llhttp sees them (RFC 9112 §7.1): a bare LF inside a chunk extension
   * (http-parser 2.9 swallowed it as part of the extension, where other
   * parsers end the line there — a request-smuggling split) or in the size
   * line, and chunk data not followed by CRLF (llhttp 8.1 accepts it), are
   * refused. Lines end in CRLF; the trailer section is left to llhttp.
   *
   * Chunk extensions (';' or whitespace after the size, to the line's CR)
   * are cut out of what llhttp parses: sluice ignores them, and llhttp 8.1
   * refuses some RFC 9112 allows (BWS around ';' and '=', a ';' after a
   * token value: "5;a=b;c"), which http-parser accepted.
   */
  class ChunkScanner {
   public:
    void reset();
    /** What scan() found in a slice of the body. */
    struct Step {
      bool ok;       // false: the framing is broken
      size_t parse;  // the first bytes for the parser
      size_t skip;   // then extension bytes to drop unparsed (the rest is scanned again)
    };
    /**
     * Scans `data` up to the first chunk extension byte (parse = all of it
     * without one), or, at an extension, to the end of its line in `data`
     * (parse = 0, skip = its bytes).
     */
    Step scan(const char* data, size_t len);

   private:
    enum class State {
      Size,
      Extension,
      SizeLf,
      Data,
      DataCr,
      DataLf,
      TrailerLineStart,
      TrailerLine,
      FinalLf,
      Done
    };
    State state_ = State::Size;
    uint64_t remaining_ = 0;      // chunk size being read, then its data bytes left
    bool cut_extension_ = false;  // Extension: the bytes are cut out (';' or whitespace began it)
  };
  ChunkScanner chunk_scanner_;

  // The read timer (onReadTimerCb), a bare event: the connection keeps when
  // it fires (read_timer_at_) itself, and a Timer's std::function would add
  // 40 bytes to every held connection.
  EventPtr read_timer_;
  MonotonicTime read_timer_at_ = MonotonicTime::max();  // when it fires; max = not armed
  MonotonicTime read_deadline_ = MonotonicTime::max();  // of the current phase
  MonotonicTime last_body_byte_{};
  SendStallWatch send_watch_;

  RequestDecoder* exchange_ = nullptr;  // the request in flight (its Exchange)
  bool body_paused_ = false;        // the Exchange paused the body (streamed upload backpressure)
  bool request_complete_ = false;   // the current request's last byte was parsed
  bool response_complete_ = false;  // the current response's last byte was written
  bool response_started_ = false;   // the current response's head was written
  bool in_request_ = false;         // between message begin and response done
  bool head_request_ = false;
  int client_minor_ = 1;  // HTTP/1.<minor> of the current request
  bool keep_alive_ = true;
  bool chunked_response_ = false;
  bool close_delimited_ = false;
  bool close_after_response_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool lingering_ = false;  // half-closed: waiting for the client's FIN or reset (closeOrLinger)
  enum class PeerPlace : uint8_t { Unknown, ThisHost, Elsewhere };
  PeerPlace peer_place_ = PeerPlace::Unknown;
  // resume_event_ was made to parse the bytes the protocol detector read:
  // freed as it runs (a held stream keeps no event it may never use again).
  bool free_resume_event_ = false;
  // Small fields together, in the padding the bools above leave.
  ReadPhase read_phase_ = ReadPhase::FirstHead;
  bool chunked_request_ = false;  // the current request's body is chunked
  bool head_bytes_seen_ = false;  // FirstHead: some request byte arrived
  // The pieces that may still be in the output buffer, oldest first, so that
  // bufferedBytes() counts body bytes only, never chunk framing or heads.
  Fifo<OutputPiece> output_pieces_;
  size_t output_pieces_wire_ = 0;
  // The current response on the wire, for HeldRead: body pieces (framing
  // included), their body bytes, and the framing after the last of them.
  uint64_t response_body_wire_ = 0;
  uint64_t response_body_ = 0;
  uint64_t response_tail_ = 0;
  std::unique_ptr<HeldRead> held_;
};

}  // namespace sluice
