#pragma once

// One upstream request/response, whatever carries it: a whole HTTP/1.1
// connection (Http1ClientConnection) or one stream of a multiplexed HTTP/2
// session (Http2ClientStream). The Exchange holds an UpstreamStream for each
// attempt; the UpstreamPool hands them out and takes them back — release()
// after a clean response, destroy() to tear the attempt down (HTTP/1.1: close
// the connection; HTTP/2: RST_STREAM(CANCEL) on that stream only).

#include <cstdint>
#include <string>
#include <string_view>

#include "common/http_message.h"
#include "proxy/http/request_body.h"

namespace sluice {

/** How an attempt failed below HTTP. */
enum class UpstreamError {
  ConnectError,  // DNS, TCP connect or TLS handshake failed
  Reset,         // the connection or stream broke after it was established
  Protocol,      // the upstream sent something that is not a valid HTTP response
  Refused,       // HTTP/2 REFUSED_STREAM or a GOAWAY below the stream: nothing was processed
};

std::string_view toString(UpstreamError e);

/**
 * True when the upstream cannot have processed the request: it never got it
 * (connect error) or said so (REFUSED_STREAM, GOAWAY). Such an attempt is
 * safe to retry even when the request is not idempotent (RFC 9113 §8.7).
 */
inline bool unprocessed(UpstreamError e) {
  return e == UpstreamError::ConnectError || e == UpstreamError::Refused;
}

/** Receives one response. No call arrives after the stream is released or destroyed. */
class UpstreamCallbacks {
 public:
  virtual ~UpstreamCallbacks() = default;
  /** The transport is up; the request is being written. */
  virtual void onUpstreamConnected() = 0;
  /**
   * The transport has taken the request body up to `offset` (copied into its
   * own bounded buffers): a streamed body may free what lies below it.
   */
  virtual void onUpstreamBodySent(uint64_t offset) = 0;
  /** The final response head (1xx interim responses are swallowed). */
  virtual void onUpstreamHeaders(ResponseHead&& head, bool end_stream) = 0;
  /** A slice of the response body (de-chunked, de-framed). */
  virtual void onUpstreamData(const char* data, size_t len) = 0;
  /**
   * The response's trailer section (RFC 9110 §6.5), when it has a non-empty
   * one: right before onUpstreamComplete(), never merged into a head.
   */
  virtual void onUpstreamTrailers(HeaderMap&& trailers) { (void)trailers; }
  /** The response ended cleanly. */
  virtual void onUpstreamComplete() = 0;
  /** The attempt failed; the holder must destroy() the stream. */
  virtual void onUpstreamError(UpstreamError error, const std::string& detail) = 0;
};

class UpstreamStream;

/** Where an attempt gets its stream: a worker's UpstreamPool (a fake in unit tests). */
class UpstreamStreamSource {
 public:
  virtual ~UpstreamStreamSource() = default;
  /** True when acquire() would hand out a stream that is connected already (no wait). */
  virtual bool hasReadyStream() const = 0;
  /** A stream for one attempt: an idle connection, room on a session, or a new one. */
  virtual UpstreamStream* acquire() = 0;
};

class UpstreamStream {
 public:
  virtual ~UpstreamStream() = default;

  /**
   * Sends `head` (already rewritten for the upstream) and `body`, and routes
   * the response to `callbacks`. `head` must stay valid until the response
   * head is reported (the request is written out by then); `body` until the
   * stream is released or destroyed, or has taken all of a complete body
   * (onUpstreamBodySent at its size). May report back synchronously.
   *
   * The body is read from offset 0 as it grows: a complete body is framed
   * with its length; an incomplete (streamed) one with its declared length,
   * else chunked (HTTP/1.1) or DATA frames until END_STREAM (HTTP/2).
   * Body bytes are taken only once the transport is up and only while its
   * output is below a watermark, so a connect error leaves the body whole
   * (replayable) and a slow upstream pushes back (onUpstreamBodySent stops).
   */
  virtual void sendRequest(const RequestHead& head, RequestBody& body,
                           UpstreamCallbacks* callbacks) = 0;
  /** The body given to sendRequest grew or completed: send what fits. */
  virtual void onRequestBodyData() = 0;

  /** Stops / resumes delivering the response (backpressure from a slow client). */
  virtual void pauseReading() = 0;
  virtual void resumeReading() = 0;

  /** Forgets the callbacks: the holder is gone and wants no further calls. */
  virtual void detach() = 0;

  /**
   * The holder is done after a clean response: the transport may carry
   * another request. The stream must not be used afterwards.
   */
  virtual void release() = 0;
  /**
   * Tears the attempt down now so the upstream stops generating (HTTP/1.1:
   * close the connection; HTTP/2: RST_STREAM(CANCEL) on this stream only).
   * The stream must not be used afterwards.
   */
  virtual void reset() = 0;
};

}  // namespace sluice
