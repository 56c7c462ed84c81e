#pragma once

// Errors sluice makes itself are RFC 9457 `application/problem+json`
// (DESIGN.md §3): {"type","title","status","detail","cancel_reason","is_retriable"}
// plus `Retry-After` / `retry-after-ms` when a useful wait is known, and
// `x-should-retry` so agent SDKs do not stack their own retries on ours.

#include <chrono>
#include <optional>
#include <string>

#include "proxy/cancel_reason.h"
#include "proxy/http_message.h"

namespace sluice {

/** One problem sluice reports to a client. */
struct Problem {
  int status = 500;
  std::string slug;    // short machine name, becomes the `type` URN: "urn:sluice:problem:<slug>"
  std::string title;   // short, human, stable per slug
  std::string detail;  // this occurrence
  std::optional<CancelReason> cancel_reason;
  bool is_retriable = false;
  std::optional<std::chrono::milliseconds> retry_after;  // sets Retry-After and retry-after-ms
};

/** A complete response sluice answers with itself. */
struct LocalReply {
  ResponseHead head;
  std::string body;
};

/** Renders `p` as a problem+json response (content-type, content-length, retry headers). */
LocalReply makeProblemReply(const Problem& p);

}  // namespace sluice
