#pragma once

// A small blocking HTTP/1.1 client for integration tests: a real socket on
// loopback, responses parsed by llhttp (the parser sluice's own codecs use),
// and the rude behaviours real agents have (half-read streams, abrupt close,
// reset, pipelining).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/http1_header_accumulator.h"
#include "common/http_headers.h"

namespace sluice::test {

/** One parsed response. */
struct TestResponse {
  int status = 0;
  HeaderMap headers;
  std::string body;
  bool complete = false;  // the message ended (framing satisfied)
};

class TestConnection {
 public:
  /**
   * Connects to 127.0.0.1:`port`; fails the test (ADD_FAILURE) if it cannot.
   * `receive_buffer` > 0 shrinks SO_RCVBUF before connecting (slow-reader tests).
   */
  explicit TestConnection(uint16_t port, int receive_buffer = 0);
  ~TestConnection();
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  /** Writes raw bytes. */
  void send(const std::string& bytes);
  /**
   * Writes a request with an optional body (Content-Length framing). Sends
   * `host: 127.0.0.1:PORT` first unless `headers` carry a host.
   */
  void sendRequest(const std::string& method, const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& headers = {},
                   const std::string& body = "");

  /**
   * Reads until `done(response)` is true, the response completes, the peer
   * closes, or `timeout` passes. Returns the response so far (the one being
   * parsed; completed ones move to completed()).
   */
  const TestResponse& readUntil(const std::function<bool(const TestResponse&)>& done,
                                std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /** Reads one whole response. */
  TestResponse readResponse(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  /**
   * Reads whatever the kernel already holds for this connection, without
   * waiting for more (a client about to leave takes what reached its socket).
   * Returns the bytes read.
   */
  size_t readAvailable();
  /** Bytes that reached this connection's socket and were not read yet (SIOCINQ). */
  size_t unreadBytes() const;
  /** The response being parsed (empty once it completed: see completed()). */
  const TestResponse& current() const { return current_; }

  /** Responses fully parsed so far, in order (for pipelining). */
  std::vector<TestResponse>& completed() { return completed_; }
  /** True once the server closed the connection. */
  bool peerClosed() const { return peer_closed_; }
  /** Raw bytes received so far. */
  const std::string& raw() const { return raw_; }
  /** Total body bytes parsed for the current response. */
  size_t bodyBytes() const { return current_.body.size(); }

  /** Closes with FIN. */
  void close();
  /** Closes with RST (SO_LINGER 0). */
  void reset();
  /** Waits for the server to close, up to `timeout`; true if it did. */
  bool waitForClose(std::chrono::milliseconds timeout);

 private:
  struct Parser;  // llhttp's state, kept out of this header
  bool readOnce(std::chrono::milliseconds timeout);
  void parse(const char* data, size_t len);
  void onHeaderField(const char* at, size_t len);
  void onHeaderValue(const char* at, size_t len);
  void onHeadersComplete(int status);
  void onMessageComplete();

  int fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<Parser> parser_;
  TestResponse current_;
  std::vector<TestResponse> completed_;
  size_t responses_returned_ = 0;  // readResponse() hands them out in order
  Http1HeaderAccumulator header_fields_;
  bool peer_closed_ = false;
  std::string raw_;
};

/** One-shot helper: opens a connection, sends, reads one response. */
TestResponse httpRequest(uint16_t port, const std::string& method, const std::string& path,
                         const std::vector<std::pair<std::string, std::string>>& headers = {},
                         const std::string& body = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

/**
 * `body` with what differs between two identical mock-llm answers (the
 * response `id` and the wall-clock `created` stamp) replaced by `_`, so a
 * response through sluice can be compared byte for byte with a direct one.
 */
std::string withoutVolatileFields(const std::string& body);

}  // namespace sluice::test
