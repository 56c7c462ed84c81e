#include "proxy/problem.h"

#include <nlohmann/json.hpp>

namespace sluice {

LocalReply makeProblemReply(const Problem& p) {
  nlohmann::json j;
  j["type"] = "urn:sluice:problem:" + (p.slug.empty() ? std::string("error") : p.slug);
  j["title"] = p.title;
  j["status"] = p.status;
  j["detail"] = p.detail;
  if (p.cancel_reason) {
    j["cancel_reason"] = std::string(toString(*p.cancel_reason));
  } else {
    j["cancel_reason"] = nullptr;
  }
  j["is_retriable"] = p.is_retriable;

  LocalReply reply;
  reply.head.status = p.status;
  // Details quote client input (a header value, a path): invalid UTF-8 must
  // become U+FFFD, never an exception on the data path.
  reply.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  reply.body.push_back('\n');
  reply.head.headers.add("content-type", "application/problem+json");
  reply.head.headers.add("content-length", std::to_string(reply.body.size()));
  reply.head.headers.add("cache-control", "no-store");
  if (p.retry_after) {
    const auto ms = std::max<long long>(0, p.retry_after->count());
    // Retry-After only takes whole seconds: round up so a client never comes back early.
    reply.head.headers.add("retry-after", std::to_string((ms + 999) / 1000));
    reply.head.headers.add("retry-after-ms", std::to_string(ms));
  }
  if (!p.is_retriable) reply.head.headers.add("x-should-retry", "false");
  return reply;
}

}  // namespace sluice
