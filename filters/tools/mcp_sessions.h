#pragma once

// MCP session affinity (docs/design.md §10): which endpoint of an upstream
// issued each `Mcp-Session-Id`, learned from the response that carried the
// header (typically the answer to `initialize`), so the session's later
// requests go to the same endpoint.
//
// Keyed by a hash of the session id (sessionKey()): the raw id, which works
// like a bearer token on many servers, is never kept here nor published to
// the other replicas (shared_state).
//
// Bounded: at most max_entries sessions; past it the least recently used is
// forgotten. Expiring: a session not used for `idle_ttl` is forgotten. Both
// only mean the next request of that session is placed as usual. Thread-safe
// (one mutex; every operation is a hash lookup and a list splice).

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"

namespace sluice {

/** The key of a session id: the first 32 hex chars of its SHA-256. */
std::string sessionKey(std::string_view session_id);

class McpSessionTable {
 public:
  static constexpr size_t kMaxEntries = 65536;
  static constexpr std::chrono::seconds kIdleTtl{3600};

  /** Told of each session learned locally (not of those learned from a peer). */
  using Publisher = std::function<void(const std::string& key, const std::string& endpoint)>;

  explicit McpSessionTable(size_t max_entries = kMaxEntries,
                           std::chrono::milliseconds idle_ttl = kIdleTtl)
      : max_entries_(max_entries), idle_ttl_(idle_ttl) {}

  /**
   * Session `key` lives on `endpoint` (as of `now`). A key already known on
   * that endpoint is only touched; a new or moved one is published (when
   * `publish` and a publisher is set).
   */
  void learn(const std::string& key, const std::string& endpoint, MonotonicTime now,
             bool publish = true);
  /** The endpoint of session `key`, touching it; nullopt when unknown or idle past the TTL. */
  std::optional<std::string> lookup(const std::string& key, MonotonicTime now);
  /** Forgets session `key` (the client deleted it). */
  void forget(const std::string& key);
  /** Sets (or clears) the publisher; the tables outlive reloads, so it may be set again. */
  void setPublisher(Publisher publisher);

  size_t size() const;

 private:
  struct Entry {
    std::string endpoint;
    MonotonicTime used;
    std::list<std::string>::iterator order;  // into lru_
  };
  void dropExpiredTail(MonotonicTime now);

  const size_t max_entries_;
  const std::chrono::milliseconds idle_ttl_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // keys, most recently used first
  Publisher publisher_;
};

}  // namespace sluice
