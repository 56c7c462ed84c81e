#pragma once

// The client side of one Exchange, independent of the protocol: an HTTP/1.1
// connection serves one stream at a time, an HTTP/2 connection many. The
// Exchange writes the response through this interface; the codec reports the
// client's request and its disconnects to the Exchange.

#include <cstddef>

#include "proxy/header_rewrite.h"
#include "proxy/http_message.h"

namespace sluice {

class DownstreamStream {
 public:
  virtual ~DownstreamStream() = default;

  /** Sends the response head; `end_stream` = there is no body. */
  virtual void encodeHeaders(const ResponseHead& head, bool end_stream) = 0;
  /** Sends a slice of the body; `end_stream` ends the response. */
  virtual void encodeData(const char* data, size_t len, bool end_stream) = 0;
  /** Aborts a response already under way (HTTP/1.1: close; HTTP/2: RST_STREAM). */
  virtual void resetStream() = 0;
  /** True while the client is slow: more than the high watermark is buffered for it. */
  virtual bool aboveHighWatermark() const = 0;
  /**
   * Response body bytes buffered in sluice for this client, framing not
   * counted: what has not reached it yet (spend metering, /exchanges). Also
   * valid while the stream tells its Exchange that the client left.
   */
  virtual size_t bufferedBytes() const = 0;
  /**
   * Stops reading this request's body for now (HTTP/1.1: the socket; HTTP/2:
   * no WINDOW_UPDATE for the stream): its upstream cannot take more of a
   * streamed body yet. body_read_timeout does not run while paused.
   */
  virtual void pauseRequestBody() = 0;
  /** Reads the request body again (never re-enters the Exchange synchronously). */
  virtual void resumeRequestBody() = 0;
  /** The Exchange is done with this stream and will not call it again. */
  virtual void onExchangeDone() = 0;
  /** The client's address and transport, for X-Forwarded-*. */
  virtual const ClientInfo& clientInfo() const = 0;
};

}  // namespace sluice
