#pragma once

// One HTTP/1.1 client connection of mock-llm. Requests are parsed with
// http-parser as bytes arrive (pipelining included) and queued; their
// ResponsePlans are then played out strictly one at a time, in order, by a
// ResponsePlayer driven by libevent timers and write-drain callbacks — nothing
// ever blocks the loop. Reading stays enabled the whole time so the moment a
// client leaves (EOF or RST) is recorded.

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <http_parser.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "common/http1_header_accumulator.h"
#include "tools/mock-llm/connection.h"
#include "tools/mock-llm/response_player.h"
#include "tools/mock-llm/router.h"

namespace mockllm {

class Worker;

/**
 * An HTTP/1.1 connection. It is the ResponseSink of its active response: the
 * player's output goes straight into the bufferevent, chunk-framed when the
 * plan says so. It retires itself on EOF, error, a scripted close/reset or
 * when the server stops.
 */
class Http1Connection final : public Connection, private ResponseSink {
 public:
  /** Takes ownership of `bev` (plain or TLS). `id` is the ledger's connection_id. */
  Http1Connection(Worker& worker, bufferevent* bev, uint64_t id);
  ~Http1Connection() override;
  Http1Connection(const Http1Connection&) = delete;
  Http1Connection& operator=(const Http1Connection&) = delete;

  void start() override;
  void syncLedger() override;

 private:
  // What happens once everything queued for the active response has been flushed.
  enum class AfterFlush { kNextRequest, kClose, kReset };

  // A ledger event that happens when the output reaches byte `offset`.
  struct Mark {
    uint64_t offset;
    MarkKind kind;
    int64_t count;
  };

  // The response currently being played out.
  struct Active {
    Request req;
    ResponsePlan plan;
    std::unique_ptr<ResponsePlayer> player;
    bool flushing = false;  // the player is done; waiting for the output to drain
    AfterFlush after = AfterFlush::kNextRequest;
    std::deque<Mark> marks;
  };

  static void onReadCb(bufferevent* bev, void* arg);
  static void onWriteCb(bufferevent* bev, void* arg);
  static void onEventCb(bufferevent* bev, short what, void* arg);
  static void onTimerCb(evutil_socket_t fd, short what, void* arg);

  static const http_parser_settings& parserSettings();
  static int onMessageBegin(http_parser* p);
  static int onUrl(http_parser* p, const char* at, size_t len);
  static int onHeaderField(http_parser* p, const char* at, size_t len);
  static int onHeaderValue(http_parser* p, const char* at, size_t len);
  static int onHeadersComplete(http_parser* p);
  static int onBody(http_parser* p, const char* at, size_t len);
  static int onMessageComplete(http_parser* p);

  // ResponseSink, for the active response.
  void sendHead() override;
  void sendBody(std::string_view data) override;
  void addMark(MarkKind kind, int64_t count = 0) override;
  size_t unsentBytes() const override { return outputLength(); }
  void armTimer(std::chrono::milliseconds delay) override;
  void end(Ending how) override;

  void onRead();
  // Feeds bytes to http-parser; false once the connection's input is unusable.
  bool parse(const char* data, size_t len);
  void onWrite();
  void onTimer();
  // Adds the pair http-parser finished, if any: name lower-cased, trailing OWS off the value.
  void flushPendingHeader();

  void maybeStartNext();
  void closeWhenFlushed(AfterFlush how);
  void onFlushed();
  void peerClosed();
  void close(bool reset);

  void write(const char* data, size_t len);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void processMarks();
  size_t outputLength() const;

  Worker& worker_;
  SharedState& state_;
  bufferevent* bev_;
  event* timer_;
  const uint64_t id_;
  bool closed_ = false;

  http_parser parser_;
  Request parsing_;
  sluice::Http1HeaderAccumulator header_fields_;
  bool parse_failed_ = false;
  bool overflow_ = false;

  std::deque<Request> queue_;
  std::unique_ptr<Active> active_;
  uint64_t bytes_queued_ = 0;  // every byte ever written to the output buffer
};

}  // namespace mockllm
