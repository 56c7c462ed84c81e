#pragma once

// The client side of one Exchange, independent of the protocol: an HTTP/1.1
// connection serves one stream at a time, an HTTP/2 connection many. The
// Exchange writes the response through this interface; the codec reports the
// client's request and its disconnects to the Exchange.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "proxy/http/header_rewrite.h"

namespace sluice {

/**
 * An ended response's spend, waiting for the client's reading
 * (docs/reference/metrics.md, "Delivered means read"): the codec that wrote
 * the response keeps it until it knows how much of it the client read, and
 * settles it once. Destroyed unsettled, it books the response as read.
 */
class HeldDelivery {
 public:
  virtual ~HeldDelivery() = default;
  /**
   * The client did not read the last `unread_body_bytes` of the response
   * body (0: all of it; more than the body: none). `unread_reason` names the
   * leak when the client's own failure is known (client_stalled).
   */
  virtual void settle(uint64_t unread_body_bytes,
                      std::optional<CancelReason> unread_reason = std::nullopt) = 0;
};

class DownstreamStream {
 public:
  virtual ~DownstreamStream() = default;

  /**
   * Sends the response head; `end_stream` = there is no body. The head is
   * handed over: a codec that sends it later (HTTP/2: nghttp2 serialises
   * the HEADERS frame when the connection next writes) keeps it without a
   * copy; the caller must not read it afterwards.
   */
  virtual void encodeHeaders(ResponseHead&& head, bool end_stream) = 0;
  /** Sends a slice of the body; `end_stream` ends the response. */
  virtual void encodeData(const char* data, size_t len, bool end_stream) = 0;
  /**
   * True when this stream can carry a trailer section to the client
   * (HTTP/2). HTTP/1.1 does not: sluice drops upstream trailers for it.
   */
  virtual bool carriesTrailers() const { return false; }
  /**
   * Ends the response (after its body) with `trailers` (RFC 9110 §6.5):
   * never merged into a head. A codec that does not carry trailers
   * (carriesTrailers() false) ends the response without them.
   */
  virtual void encodeTrailers(HeaderMap&& trailers) {
    (void)trailers;
    encodeData(nullptr, 0, true);
  }
  /**
   * Aborts a response already under way (HTTP/1.1: close; HTTP/2: RST_STREAM).
   * What is still buffered for the client is dropped.
   */
  virtual void resetStream() = 0;
  /**
   * Aborts a response already under way like resetStream(), but only after
   * what is buffered and then `final_bytes` (body bytes: a final SSE error
   * event, docs/design.md §8) have been written: HTTP/1.1 closes once its output
   * drained, without the terminating chunk; HTTP/2 sends RST_STREAM after the
   * DATA frame that carries the last byte. The client still sees a truncated
   * response. Call it only when canWriteWithoutWaiting(final_bytes.size()).
   */
  virtual void resetStreamAfter(std::string_view final_bytes) = 0;
  /**
   * True when `len` more body bytes, after what is buffered, can go to the
   * client without waiting on it to read (HTTP/1.1: the output is below the
   * high watermark; HTTP/2: they fit the stream's and the connection's
   * flow-control windows).
   */
  virtual bool canWriteWithoutWaiting(size_t len) const = 0;
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
  /**
   * Whether this stream can tell how much of its response the client read
   * (HTTP/1.1: the next request, a FIN or a reset, and for a client on this
   * host its socket's unread bytes): the Exchange then hands the response's
   * spend over with holdUntilRead() instead of booking it when it ends.
   */
  virtual bool confirmsReads() const { return false; }
  /**
   * Before onExchangeDone(): keep `hold` and settle it once the client's
   * reading of this response is known.
   */
  virtual void holdUntilRead(std::unique_ptr<HeldDelivery> hold) { hold->settle(0); }
  /** The client's address and transport, for X-Forwarded-*. */
  virtual const ClientInfo& clientInfo() const = 0;
};

}  // namespace sluice
