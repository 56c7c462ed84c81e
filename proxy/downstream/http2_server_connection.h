#pragma once

// One downstream HTTP/2 connection (h2 over TLS by ALPN, or cleartext h2c
// with prior knowledge), served by an nghttp2 server session over SocketIo:
// bufferevent_openssl for TLS, the socket itself for h2c (proxy/event/socket_io.h).
// Each stream is one Exchange: the stream object implements
// DownstreamStream exactly as Http1ServerConnection does for its one request.
//
//   HEADERS (request complete)  → host.newStream() + decodeHeaders
//   DATA                        → decodeData;  END_STREAM → decodeComplete
//   RST_STREAM from the client  → that stream's Exchange only: client disconnect
//   GOAWAY / EOF / reset        → every Exchange of the connection: client disconnect
//   resetStream()               → RST_STREAM on that stream only (CANCEL when the
//                                 Exchange cancelled, INTERNAL_ERROR when it failed)
//   resetStreamAfter(bytes)     → the same RST_STREAM, once the DATA frame with
//                                 the final bytes (an SSE error event) was sent
//
// Request bodies are acknowledged by hand (no automatic WINDOW_UPDATE): the
// connection window at once, a stream's window once its Exchange took the
// bytes — so an Exchange streaming an upload to a slow upstream pauses the
// stream (pauseRequestBody) and the client's window stops it.
//
// Backpressure is HTTP/2 flow control. Response bytes the client's window
// does not admit yet wait in the stream's own buffer; above the high
// watermark the Exchange pauses its upstream, and it resumes once the
// client's WINDOW_UPDATEs drain the buffer below the low watermark. The
// socket's output buffer is bounded too: nghttp2 is asked for frames only
// while that buffer is below a watermark, and again from the write callback.
//
// Slow or idle clients (Http2Limits; 0 = off): a connection with no open
// stream for idle_timeout gets GOAWAY(NO_ERROR) and is closed; a stream whose
// request body stalls for body_read_timeout is answered 408 problem+json (its
// Exchange has sent nothing upstream yet) and then reset with NO_ERROR, the
// connection's other streams untouched. A client that accepts no byte of
// pending output for send_timeout (SendStallWatch) is closed at once, every
// Exchange cancelled with `client_stalled`: its RST_STREAMs and GOAWAY could
// never reach it anyway. A request head arrives in one
// HEADERS block, so header_read_timeout applies before the codec exists (TLS
// handshake, h2c preface: ProtocolDetector).
//
// Nothing is sent from inside an Exchange's call: encode*/resetStream queue
// frames in nghttp2 and schedule one send on the next loop turn, so nghttp2's
// callbacks never re-enter the Exchange that is calling us.
//
// Delivered means read (docs/reference/metrics.md): for a client on this host
// over plain TCP, each response's DATA frames are placed on the connection's
// output (ReadTrack) and an ended stream's spend is held until a look at the
// client's socket (PeerUnreadProbe: one look per connection serves every
// held stream) or the connection's end says how much of it was read.

#include <nghttp2/nghttp2.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/downstream/downstream_connection.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/downstream/send_stall_watch.h"
#include "proxy/event/event_util.h"
#include "proxy/event/socket_io.h"
#include "proxy/http/nghttp2_util.h"

namespace sluice {

/** Limits that protect sluice from a hostile or broken HTTP/2 client. */
struct Http2Limits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams above it are refused (REFUSED_STREAM). */
  uint32_t max_concurrent_streams = 128;
  /**
   * SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2: name + value + 32 per
   * field). A request above it, or with more than `max_headers` fields, is
   * answered 431 problem+json on its stream, as HTTP/1.1's limit is.
   */
  size_t max_header_list_bytes = 64 * 1024;
  size_t max_headers = 100;
  size_t high_watermark =
      64 * 1024;  // response bytes buffered per stream before the upstream pauses
  size_t low_watermark = 16 * 1024;  // ... and resumes
  /** Serialized frames queued on the socket before sluice stops asking nghttp2 for more. */
  size_t output_high_watermark = 64 * 1024;
  size_t output_low_watermark = 16 * 1024;
  /** Receive windows for request bodies (the Exchange buffers them; 413 above its limit). */
  int32_t stream_window = 1 << 20;
  int32_t connection_window = 16 << 20;
  /** No request body byte on a stream for this long → 408 on that stream (0 = off). */
  std::chrono::milliseconds body_read_timeout = std::chrono::seconds(30);
  /** No open stream for this long → GOAWAY(NO_ERROR) and close (0 = off). */
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  /** Output pending and not a byte accepted for this long → closed, streams client_stalled (0 =
   * off). */
  std::chrono::milliseconds send_timeout = std::chrono::seconds(60);
};

class Http2ServerConnection final : public DownstreamConnection, private SocketIoCallbacks {
 public:
  /**
   * Adopts `bev` (plain or TLS, connected; its callbacks are replaced). The
   * client preface may already sit in its input buffer: it is processed on
   * the next loop turn, together with sending sluice's SETTINGS.
   */
  Http2ServerConnection(DownstreamConnectionHost& host, BufferEventPtr bev,
                        std::string peer_address, bool tls, Http2Limits limits = {});
  ~Http2ServerConnection() override;

  // DownstreamConnection
  /** GOAWAY (last processed stream), let open streams finish, then close. */
  void closeWhenIdle() override;
  /** Closes at once; every attached Exchange sees a client disconnect. */
  void close() override;
  /** Closes at once; every attached Exchange is cancelled with `reason`. */
  void closeWith(CancelReason reason);

  /** Streams not yet closed (for tests and introspection). */
  size_t openStreams() const { return streams_.size(); }

  /**
   * One stream's response body on the connection's wire, for "delivered
   * means read": where its DATA frames' payloads lie in the connection's
   * output, so that the client's read point (connection bytes its
   * application took) maps to body bytes. Public for its unit test (a value
   * type, no connection state).
   */
  struct ReadTrack {
    struct Frame {
      uint64_t start;  // connection wire offset of the first payload byte
      uint64_t end;    // ... after the last one
      uint64_t body;   // body bytes in [start, end) (merged frames: with other bytes between)
    };
    /** Frames kept per stream; beyond it, neighbours are merged (mapped by proportion). */
    static constexpr size_t kMaxFrames = 512;

    int32_t id = 0;
    std::vector<Frame> frames;
    uint64_t body_in = 0;  // body bytes the Exchange handed over
    uint64_t dropped = 0;  // of them, dropped unsent by a cut (never counted delivered)
    bool done = false;     // no more DATA: END_STREAM or RST_STREAM queued, or the stream closed
    bool settled = false;
    std::unique_ptr<HeldDelivery> delivery;  // the spend, once the Exchange ended (holdUntilRead)
    MonotonicTime held_at{};                 // when it was held
    uint64_t looks_at_hold = 0;              // the connection's looks_ then

    /** A DATA frame's payload went to the output at [start, start + body). */
    void addFrame(uint64_t start, uint64_t body);
    /** The connection offset after the last payload byte (0: none sent). */
    uint64_t end() const { return frames.empty() ? 0 : frames.back().end; }
    /** Body bytes the client read when its read point was `read_point`. */
    uint64_t readBody(uint64_t read_point) const;
    /** What to settle with: the body bytes at the end it did not read, less those dropped. */
    uint64_t unreadBody(uint64_t read_point) const;
  };

 private:
  class Stream;
  friend class Stream;

  // libevent
  // SocketIoCallbacks
  void onIoRead() override { onRead(); }
  void onIoWrite() override { onWrite(); }
  void onIoEvent(short events) override { onEvent(events); }
  static void onProcessCb(evutil_socket_t, short, void* arg);
  void onRead();
  void onWrite();
  void onEvent(short events);

  // nghttp2
  static int onBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void*);
  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame*, void*);
  static int onHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t flags, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int onDataChunkRecv(nghttp2_session*, uint8_t flags, int32_t stream_id,
                             const uint8_t* data, size_t len, void*);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame*, void*);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void*);
  static ssize_t onDataSourceRead(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                  uint32_t* data_flags, nghttp2_data_source*, void*);
  /** Queues `stream`'s trailers (a HEADERS frame with END_STREAM); false if nghttp2 refused. */
  bool submitTrailers(Stream& stream);
  /**
   * Writes a DATA frame onDataSourceRead sized without copying
   * (NGHTTP2_DATA_FLAG_NO_COPY): its 9-byte header, then the payload moved
   * from the stream's pending buffer straight to the output (evbuffer
   * chains relinked, not copied into nghttp2's frame buffer and out again).
   */
  static int onSendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd,
                        size_t length, nghttp2_data_source* source, void*);

  Stream* findStream(int32_t stream_id) const;
  /** A stream closed before its request ended (the client may not know yet). */
  bool closedEarly(int32_t stream_id) const;
  /** A header list far above the limit: stop decoding it (reset), GOAWAY for a repeat offender. */
  int cutHeaderBlock(Stream& stream);
  void onRequestHeaders(Stream& stream);
  void onRequestComplete(Stream& stream);
  /**
   * body_read_timeout of every stream reading a request body: one timer per
   * connection, armed at the earliest deadline (a stream's own timer was an
   * event to create, add, delete and free per request).
   */
  void onBodyTimer();
  /** Queues a send on the next loop turn (never sends from inside a caller's stack). */
  void scheduleSend();
  /** Asks nghttp2 for frames while the socket's output buffer is below its watermark. */
  void sendPending();
  /** Tells Exchanges whose streams drained below the low watermark to resume. */
  void notifyWritable();
  /** Detaches every Exchange, telling each the client is gone (`reason`). */
  void disconnectAll(CancelReason reason = CancelReason::ClientDisconnect);
  /** Stops reading; closes once the output (a GOAWAY, say) reached the socket. */
  void closeAfterFlush();
  /** Closes when the session is over, or draining and no stream is left. */
  void maybeFinish();
  /** Starts the idle_timeout when the last stream is gone (or none opened yet). */
  void armIdleTimer();
  void onIdleTimer();
  /** send_timeout: the client stopped reading. */
  void onSendStalled();

  // --- delivered means read ----------------------------------------------------------------
  /** A ReadTrack for a new response on `stream` (none when nothing can be known). */
  ReadTrack* newTrack(int32_t stream_id);
  /** `track`'s stream ended its response: held, it waits for a look. */
  void holdTrack(ReadTrack& track, std::unique_ptr<HeldDelivery> hold);
  /** Looks at the client's socket before `delay` is over (sooner if already due). */
  void lookWithin(std::chrono::milliseconds delay);
  void onLookTimer();
  /**
   * The connection's read point: bytes written to the client minus what its
   * socket and ours hold unread (nullopt: the socket cannot be looked at).
   */
  std::optional<uint64_t> lookAtReadPoint();
  /**
   * Settles every held, finished stream the client read through `read_point`,
   * and those held for idle_timeout whose rest its flow control never let out.
   */
  void settleReadThrough(uint64_t read_point);
  /** How the connection ended, for its held streams. */
  enum class HeldEnd : uint8_t {
    Look,     // a FIN, GOAWAY or sluice's own close: a last look, else read
    Reset,    // the client reset the connection: the last look, else nothing read
    Stalled,  // send_timeout: nothing read, client_stalled
  };
  /** Settles every held stream at the connection's end. */
  void settleAllHeld(HeldEnd end);
  /** Forgets the tracks that are settled, or whose streams closed unheld. */
  void pruneTracks();

  DownstreamConnectionHost& host_;
  Http2Limits limits_;
  SocketIoPtr io_;  // the socket (h2c) or its bufferevent (TLS)
  EventPtr process_event_;
  Timer idle_timer_;
  Timer body_timer_;  // onBodyTimer
  MonotonicTime idle_since_{};
  Nghttp2SessionPtr session_;
  SendStallWatch send_watch_;
  std::string peer_address_;
  ClientInfo client_info_;

  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<int32_t> writable_;  // streams that drained below the low watermark
  // The stream whose header block nghttp2 is decoding (onBeginHeaders to its close).
  int32_t header_stream_id_ = 0;
  Stream* header_stream_ = nullptr;
  bool sending_ = false;          // inside sendPending (nghttp2_session_mem_send)
  bool send_scheduled_ = false;   // process_event_ is active (scheduleSend)
  bool draining_ = false;         // closeWhenIdle: GOAWAY sent, close when no stream is left
  bool goaway_received_ = false;  // the client sent GOAWAY: it is leaving
  bool flushing_ = false;         // close once the output buffer is empty
  bool closed_ = false;
  int32_t last_client_stream_id_ = 0;  // highest stream id the client opened (RFC 9113 §5.1.1)
  std::array<int32_t, 16> closed_early_{};  // recent streams closed before their request ended
  size_t closed_early_next_ = 0;
  uint32_t cut_header_blocks_ = 0;  // header blocks cut as HPACK bombs (cutHeaderBlock)
  uint32_t responses_started_ = 0;  // response heads submitted (HPACK re-indexing)
  uint32_t connection_error_ = NGHTTP2_NO_ERROR;  // set by a callback: GOAWAY with it

  // Delivered means read: a plain-TCP client on this host, whose socket is looked at.
  bool reads_known_ = false;
  uint64_t bytes_out_ = 0;  // bytes handed to the output buffer since the connection began
  std::vector<std::unique_ptr<ReadTrack>> tracks_;  // responses under way or held, by stream
  size_t held_ = 0;                                 // of them, held (a delivery to settle)
  std::optional<uint64_t> last_read_point_;         // what the last look found read
  uint64_t looks_ = 0;                              // looks at the client's socket so far
  std::unique_ptr<Timer> look_timer_;               // made on the first hold
  MonotonicTime next_look_ = MonotonicTime::max();
  std::chrono::milliseconds look_interval_{};
};

}  // namespace sluice
