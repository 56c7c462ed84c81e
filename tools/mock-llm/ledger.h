#pragma once

// The ledger: mock-llm's record of every request it received and of what it
// actually did with it. It is the ground truth sluice's tests compare against
// ("did the proxy send 3 attempts?", "did the upstream stop streaming when the
// client left?"). Entries are shared between the connection that fills them in
// and readers on any thread, so every mutation goes through Ledger::update().

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/mock-llm/header_list.h"

namespace mockllm {

/** Microseconds of CLOCK_MONOTONIC (std::chrono::steady_clock on Linux). */
int64_t monotonicMicros();

/**
 * One request as the mock saw and answered it. Times are CLOCK_MONOTONIC
 * microseconds; 0 means "has not happened". An HTTP/2 stream is one request;
 * a client's RST_STREAM is recorded like an HTTP/1.1 client leaving
 * (peer_closed, peer_closed_us) plus client_reset and its error code.
 */
struct LedgerEntry {
  std::string id;
  std::string method;
  std::string path;   // the request target as received (path and query)
  std::string model;  // the request body's "model", "" when absent
  bool stream = false;
  int status = 0;               // the status the mock answers (or will answer) with
  int64_t attempt_for_key = 0;  // 1-based count for x-mock-fail-key, else 0
  int64_t tokens_emitted = 0;   // content tokens handed to the socket
  bool usage_reported = false;  // the final usage block was handed to the socket
  int64_t input_tokens = 0;
  bool completed = false;    // the whole response was handed to the socket
  bool peer_closed = false;  // the client went away before the response was complete
  int64_t received_us = 0;
  int64_t headers_sent_us = 0;
  int64_t last_token_us = 0;
  int64_t peer_closed_us = 0;
  int64_t finished_us = 0;
  uint64_t connection_id = 0;
  HeaderList request_headers;
  std::string protocol = "http/1.1";  // "http/1.1" or "h2"
  int32_t stream_id = 0;              // the HTTP/2 stream id; 0 for HTTP/1.1
  bool client_reset = false;          // h2: the client reset the stream (RST_STREAM)
  uint32_t rst_error_code = 0;        // that RST_STREAM's error code (8 = CANCEL)
  bool mock_reset = false;  // the mock reset it on purpose (x-mock-reset-after-tokens, ...)
  uint32_t mock_rst_error_code = 0;  // h2: the code of the mock's RST_STREAM; 0 for HTTP/1.1
  bool refused = false;  // h2: refused unprocessed (REFUSED_STREAM, or above a GOAWAY's last id)
  std::string scheduled_fault;  // the --schedule fault that shaped the answer ("" = none)
};

using LedgerEntryPtr = std::shared_ptr<LedgerEntry>;

/** Renders headers as `{name: value}` or `{name: [v1, v2]}` for repeated names. */
nlohmann::json headersToJson(const HeaderList& headers);

/** One entry as the JSON object `GET /_ledger` returns. */
nlohmann::json entryToJson(const LedgerEntry& entry);

/**
 * Thread-safe, append-only (until clear()) list of entries in arrival order.
 * Bounded: beyond `max_entries` the oldest entries are dropped (0 = unbounded),
 * so a long benchmark cannot exhaust memory.
 */
class Ledger {
 public:
  explicit Ledger(size_t max_entries = 100000) : max_entries_(max_entries) {}

  /** Appends a new entry (the caller keeps its pointer to fill it in later). */
  void append(LedgerEntryPtr entry);

  /** Mutates `entry` under the ledger lock and wakes waitUntil() callers. */
  template <class F>
  void update(const LedgerEntryPtr& entry, F&& mutate) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      mutate(*entry);
    }
    changed_.notify_all();
  }

  /** `{"requests": [...]}`, optionally only the entries whose id equals `id`. */
  nlohmann::json toJson(std::optional<std::string_view> id = std::nullopt) const;

  /** A consistent copy of every entry, in arrival order. */
  std::vector<LedgerEntry> snapshot() const;

  /** Copies of the entries with this id (in-process tests use it). */
  std::vector<LedgerEntry> find(std::string_view id) const;

  /** Drops every entry. Entries still being answered keep living in their connection. */
  void clear();

  /**
   * Blocks until `pred(snapshot)` holds or `timeout` passes; returns whether it
   * held. For in-process tests: ledger entries are finalised on the mock's
   * event loop, possibly just after the client has read the last byte.
   */
  bool waitUntil(const std::function<bool(const std::vector<LedgerEntry>&)>& pred,
                 std::chrono::milliseconds timeout) const;

 private:
  std::vector<LedgerEntry> snapshotLocked() const;

  const size_t max_entries_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<LedgerEntryPtr> entries_;
};

}  // namespace mockllm
