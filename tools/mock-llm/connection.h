#pragma once

// What a Worker holds for each accepted socket. A new socket starts as a
// ProtocolDetector, which hands its bufferevent to an Http1Connection or an
// Http2Connection once the first bytes (or TLS ALPN) tell which protocol the
// client speaks.

namespace mockllm {

/**
 * A client connection owned by its Worker. It retires itself
 * (Worker::retire) when it is done; the worker deletes it on a later loop turn.
 */
class Connection {
 public:
  virtual ~Connection() = default;

  /** Installs callbacks, starts reading and handles any bytes already buffered. */
  virtual void start() = 0;

  /**
   * Brings the ledger entries of this connection's requests up to date with
   * the bytes the socket has taken so far (called before serving GET /_ledger).
   */
  virtual void syncLedger() = 0;
};

}  // namespace mockllm
