#pragma once

// One HTTP/2 client connection of mock-llm — h2c with prior knowledge, or h2
// over TLS chosen by ALPN: an nghttp2 server session reading from and writing
// to a bufferevent. Every stream is one request, answered by its own
// ResponsePlayer exactly as an HTTP/1.1 request would be (same routes, wire
// formats and x-mock-* headers); streams run concurrently and independently.
//
// Backpressure is HTTP/2's own: a stream's body waits in a per-stream buffer
// until nghttp2's data provider takes it (NGHTTP2_ERR_DEFERRED while empty,
// resumed when the player produces more), which it does only as flow-control
// windows allow; the connection stops handing frames to the bufferevent above
// 64 KiB of unsent output and resumes when it drains.
//
// Faults in HTTP/2 terms (tools/mock-llm/README.md has the table):
//   x-mock-reset-after-tokens   → RST_STREAM(INTERNAL_ERROR) once K tokens have left
//   x-mock-close-after-headers  → RST_STREAM(INTERNAL_ERROR) once the HEADERS frame has left
//   x-mock-garbage              → GOAWAY(PROTOCOL_ERROR), then the connection closes
//   x-mock-refuse-stream        → RST_STREAM(REFUSED_STREAM) before any response
//   x-mock-goaway               → GOAWAY(NO_ERROR) with last-stream-id below this stream
//
// The ledger gets protocol "h2", the stream id, and how each stream ended:
// a client RST_STREAM sets peer_closed / peer_closed_us like an HTTP/1.1
// client leaving, plus client_reset and rst_error_code.

#include <event2/bufferevent.h>
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tools/mock-llm/connection.h"
#include "tools/mock-llm/response_player.h"

namespace mockllm {

class Worker;
struct SharedState;

/** HTTP/2 knobs of a server (ServerOptions, `--http2`, `--h2-max-concurrent-streams`). */
struct Http2Settings {
  bool enabled = true;                    // accept h2c prior knowledge and offer h2 by ALPN
  uint32_t max_concurrent_streams = 256;  // advertised SETTINGS_MAX_CONCURRENT_STREAMS
};

/** An HTTP/2 connection: one nghttp2 session, many concurrent streams. */
class Http2Connection final : public Connection {
 public:
  /** Takes ownership of `bev` (plain or TLS). `id` is the ledger's connection_id. */
  Http2Connection(Worker& worker, bufferevent* bev, uint64_t id);
  ~Http2Connection() override;
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  /** Creates the session, sends SETTINGS and processes the bytes already read (the preface). */
  void start() override;
  void syncLedger() override;

 private:
  class Stream;

  // A ledger event that happens once the output reaches byte `offset` of the connection.
  struct Mark {
    uint64_t offset;
    LedgerEntryPtr entry;
    MarkKind kind;
    int64_t count;
  };

  // nghttp2 callbacks (user_data is the connection).
  static nghttp2_session_callbacks* makeCallbacks();
  static ssize_t onSend(nghttp2_session* session, const uint8_t* data, size_t length, int flags,
                        void* user_data);
  static int onBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user_data);
  static int onDataChunk(nghttp2_session* session, uint8_t flags, int32_t stream_id,
                         const uint8_t* data, size_t len, void* user_data);
  static int onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int onFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int onStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                           void* user_data);
  static ssize_t readBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* user_data);

  // libevent callbacks.
  static void onReadCb(bufferevent* bev, void* arg);
  static void onWriteCb(bufferevent* bev, void* arg);
  static void onEventCb(bufferevent* bev, short what, void* arg);

  void onRead();
  void onWrite();
  void peerClosed();

  // Runs nghttp2_session_send and whatever the sent frames unblock (drained
  // streams generate more, flushed streams get their scripted reset), then
  // closes the connection once the session wants neither to read nor write.
  // Never called from inside an nghttp2 callback.
  void sendPending();
  // One pass over the streams the last send unblocked; true if any did something.
  bool serviceStreams();
  void requestComplete(Stream& stream);
  void startReadyStreams();
  void clientReset(Stream& stream, uint32_t error_code);
  void streamClosed(Stream& stream);
  // x-mock-goaway: GOAWAY(NO_ERROR) with last-stream-id below `stream_id`.
  void goawayBelow(int32_t stream_id);
  // x-mock-garbage: GOAWAY(PROTOCOL_ERROR), then close.
  void terminate();
  void closeWhenFlushed();
  void close();

  Stream* find(int32_t stream_id);
  void processMarks();
  // Forgets the marks of `entry` that have not reached the socket yet.
  void dropMarks(const LedgerEntryPtr& entry);
  size_t outputLength() const;
  uint64_t flushedOffset() const { return bytes_queued_ - outputLength(); }

  Worker& worker_;
  SharedState& state_;
  bufferevent* bev_;
  const uint64_t id_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<int32_t> ready_;    // requests fully received, answered after the nghttp2 call
  std::vector<int32_t> drained_;  // streams whose paused player can generate again
  std::vector<int32_t> resets_;   // streams waiting for their output to flush, then RST_STREAM
  std::deque<Mark> marks_;        // by connection output offset
  std::vector<Mark> packed_;      // in a frame nghttp2 is about to write (offset not known yet)
  uint64_t bytes_queued_ = 0;     // every byte ever written to the output buffer
  std::optional<int32_t> goaway_last_stream_id_;  // after x-mock-goaway
  bool sending_ = false;
  bool closing_ = false;  // close once the output has drained
  bool closed_ = false;
};

}  // namespace mockllm
