#pragma once

// The first stage of every accepted connection: decides whether the client
// speaks HTTP/1.1 or HTTP/2, then hands the bufferevent (and any bytes already
// read) to the matching connection class.
//
//   TLS with ALPN "h2"        → HTTP/2
//   TLS with ALPN "http/1.1"  → HTTP/1.1
//   otherwise (cleartext, or TLS without ALPN): the first bytes decide —
//   the HTTP/2 client preface "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (h2c with
//   prior knowledge) → HTTP/2, anything else → HTTP/1.1.

#include <event2/bufferevent.h>

#include <cstdint>
#include <string_view>

#include "tools/mock-llm/connection.h"

namespace mockllm {

class Worker;

/** What the first bytes of a connection say about its protocol. */
enum class PrefaceMatch {
  kHttp2,     // the whole HTTP/2 client preface
  kHttp1,     // something else
  kNeedMore,  // a proper prefix of the preface: wait for more bytes
};

/** Classifies the first bytes a client sent (pure; tested alone). */
PrefaceMatch matchHttp2Preface(std::string_view first_bytes);

/** A connection whose protocol is not known yet. */
class ProtocolDetector final : public Connection {
 public:
  /** Takes ownership of `bev`; `id` is the ledger's connection_id. */
  ProtocolDetector(Worker& worker, bufferevent* bev, uint64_t id);
  ~ProtocolDetector() override;
  ProtocolDetector(const ProtocolDetector&) = delete;
  ProtocolDetector& operator=(const ProtocolDetector&) = delete;

  void start() override;
  void syncLedger() override {}

 private:
  enum class Decision { kUndecided, kHttp1, kHttp2 };

  static void onReadCb(bufferevent* bev, void* arg);
  static void onEventCb(bufferevent* bev, short what, void* arg);

  void onRead();
  // ALPN first (TLS), then the preface.
  Decision decide() const;
  void handOver(Decision decision);
  void retire();

  Worker& worker_;
  bufferevent* bev_;
  const uint64_t id_;
};

}  // namespace mockllm
