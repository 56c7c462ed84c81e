#pragma once

// Request identity (docs/design.md §7): the `x-request-id` every request carries
// through sluice, and the W3C Trace Context `traceparent` it belongs to.
//
// - x-request-id: the client's value is kept when it is well-formed
//   (isValidRequestId), otherwise sluice generates a UUID v4. It goes
//   upstream, back to the client, into the access log and /exchanges.
// - traceparent: a valid one (W3C Trace Context level 1) passes through
//   untouched; when it is absent or invalid sluice starts a new trace
//   (`00-<trace-id>-<parent-id>-01`) and sends that upstream — an invalid one
//   also drops `tracestate`, which belongs to the trace it described. The
//   trace id is logged.
//
// Ids come from a per-worker IdGenerator: they must be unique, not secret,
// so a fast seeded PRNG serves (no syscall and no lock per request).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>

#include "common/http_headers.h"

namespace sluice {

/** A per-worker source of random ids (uniqueness, not secrecy). Not thread-safe. */
class IdGenerator {
 public:
  /** Seeded from std::random_device. */
  IdGenerator();
  /** A fixed seed, for tests. */
  explicit IdGenerator(uint64_t seed) : state_(seed) {}

  /** A random UUID version 4, canonical lower-case form (36 characters). */
  std::string uuid();
  /** `bytes` random bytes as 2·bytes lower-case hex digits, never all zeros. */
  std::string hex(size_t bytes);
  /** The same, written to `out` (2·bytes characters, no terminator). */
  void fillHex(char* out, size_t bytes);

 private:
  uint64_t next();  // splitmix64
  uint64_t state_;
};

/** The longest client x-request-id sluice keeps. */
inline constexpr size_t kMaxRequestIdLength = 128;

/**
 * True when a client's x-request-id may be kept: 1..128 characters, each a
 * letter, digit or one of `-_.:+/=@` (UUIDs, ULIDs, base64 and the
 * prefixed ids providers use all qualify; spaces, quotes and control bytes
 * do not).
 */
bool isValidRequestId(std::string_view id);

/**
 * The trace id (32 lower-case hex digits) of a valid W3C `traceparent`, or
 * an empty view. Valid: `VV-<32 hex>-<16 hex>-<2 hex>`, lower-case hex,
 * version not `ff`, trace id and parent id not all zeros; version 00 is
 * exactly 55 characters, a later version may carry more after a `-`.
 */
std::string_view traceIdOf(std::string_view traceparent);

/**
 * A W3C trace id (32 lower-case hex digits), held inline: a std::string of
 * 32 characters was an allocation per request (PROFILE.md, eighth round).
 * Reads as a std::string_view; empty until assigned.
 */
class TraceId {
 public:
  static constexpr size_t kSize = 32;

  /** At most kSize characters are kept (a trace id is exactly that long). */
  TraceId& operator=(std::string_view id) {
    size_ = static_cast<uint8_t>(std::min(id.size(), kSize));
    // An empty view may have a null data(): memcpy must not see it.
    if (size_ > 0) std::memcpy(digits_, id.data(), size_);
    return *this;
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  std::string_view view() const { return std::string_view(digits_, size_); }
  operator std::string_view() const { return view(); }  // NOLINT: reads as its text

  friend bool operator==(const TraceId& a, const TraceId& b) { return a.view() == b.view(); }
  friend bool operator==(const TraceId& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& out, const TraceId& id) { return out << id.view(); }

 private:
  char digits_[kSize];
  uint8_t size_ = 0;
};

/** What establishIdentity() decided, for the access log and /exchanges. */
struct RequestIdentity {
  std::string request_id;
  TraceId trace_id;
  bool request_id_generated = false;
  bool trace_started = false;
};

/**
 * Applies docs/design.md §7 to a client request's headers in place: keeps or
 * replaces `x-request-id`, keeps or starts `traceparent` (a repeated header
 * counts as invalid). Returns the ids the request now carries.
 */
RequestIdentity establishIdentity(HeaderMap& headers, IdGenerator& ids);

}  // namespace sluice
