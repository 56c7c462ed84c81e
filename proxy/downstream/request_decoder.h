#pragma once

// What a downstream codec feeds one request into (Envoy's
// RequestDecoder / newStream pattern). The codec asks its host for a decoder
// when a request head arrives and from then on speaks only to this
// interface: the head, body slices, the end, and the client's own state
// (gone, writable again). The Exchange is the one implementation; the codecs
// never include it, so the downstream room sits below the exchange room.

#include <cstddef>
#include <optional>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "common/problem.h"

namespace sluice {

class RequestDecoder {
 public:
  virtual ~RequestDecoder() = default;
  /** The request head; may answer at once (and let go of the stream). */
  virtual void decodeHeaders(RequestHead&& head) = 0;
  /** A slice of the request body. */
  virtual void decodeData(const char* data, size_t len) = 0;
  /** The request is complete. */
  virtual void decodeComplete() = 0;
  /** The codec found the request broken after its head: answer `problem` if nothing was sent. */
  virtual void sendLocalReply(const Problem& problem) = 0;
  /**
   * The client went away (EOF, reset, RST_STREAM: `client_disconnect`), or
   * sluice dropped it for not reading (send_timeout: `client_stalled`).
   */
  virtual void onDownstreamDisconnect(CancelReason reason) = 0;
  /** The client drained its buffer below the low watermark. */
  virtual void onDownstreamWritable() = 0;
  /** Why the request was cancelled, once it was (the codec picks how to end the stream). */
  virtual std::optional<CancelReason> cancelReason() const = 0;
};

}  // namespace sluice
