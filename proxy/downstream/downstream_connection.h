#pragma once

// What every downstream (client-facing) connection is to the worker that owns
// it, whatever it speaks: the protocol detector that is still reading the TLS
// handshake or the first bytes, an HTTP/1.1 connection (one stream at a
// time) or an HTTP/2 connection (many streams). The Worker owns them all
// through this base and only ever asks them to close.

#include <memory>

#include "common/clock.h"
#include "common/http_message.h"
#include "common/metrics.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/downstream/request_decoder.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/peer_unread.h"

namespace sluice {

/** One accepted client connection, owned by its worker. */
class DownstreamConnection : public DeferredDeletable {
 public:
  /**
   * Graceful close (drain): finish what is in flight, accept nothing new
   * (HTTP/1.1: `Connection: close` on the current response; HTTP/2: GOAWAY),
   * then close once idle.
   */
  virtual void closeWhenIdle() = 0;
  /** Closes at once; every Exchange still attached sees a client disconnect. */
  virtual void close() = 0;
};

using DownstreamConnectionPtr = std::unique_ptr<DownstreamConnection>;

/** What a downstream connection needs from its worker. Both codecs use it. */
class DownstreamConnectionHost {
 public:
  virtual ~DownstreamConnectionHost() = default;
  virtual Dispatcher& dispatcher() = 0;
  /**
   * Creates the decoder (the Exchange) for a request whose headers just
   * arrived (never null). `downstream` is the stream it answers on: the
   * HTTP/1.1 connection itself, or one HTTP/2 stream.
   */
  virtual RequestDecoder& newStream(RequestHead& head, DownstreamStream& downstream,
                                    MonotonicTime start) = 0;
  /** Counts a request sluice refused before any Exchange existed (400, 431). */
  virtual void countUnparsedRequest(int status) = 0;
  /** Counts a connection closed or a request refused by a `limits` key. */
  virtual void countRejection(Rejection reason) = 0;
  /** The connection closed: the host deletes it (deferred). */
  virtual void connectionClosed(DownstreamConnection& conn) = 0;
  /**
   * Protocol detection is over: `from` handed its socket to `to`, the codec
   * that will serve it. The host deletes `from` (deferred) and owns `to`.
   */
  virtual void replaceConnection(DownstreamConnection& from, DownstreamConnectionPtr to) = 0;
  /**
   * The worker's look at what a client on this host has not read (null:
   * none): how much of an ended response a client that later resets read.
   */
  virtual PeerUnreadProbe* peerUnreadProbe() { return nullptr; }
};

}  // namespace sluice
