#include "common/problem.h"

#include <nlohmann/json.hpp>

#include "common/http_headers.h"

namespace sluice {

namespace {

std::string slugOf(const Problem& p) { return p.slug.empty() ? std::string("error") : p.slug; }

nlohmann::json cancelReasonJson(const Problem& p) {
  if (!p.cancel_reason) return nullptr;
  return std::string(toString(*p.cancel_reason));
}

// Details quote client input (a header value, a path): invalid UTF-8 must
// become U+FFFD, never an exception on the data path.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/** The `error` member the provider SDKs read (docs/design.md §8). */
nlohmann::json errorMember(const Problem& p) {
  nlohmann::json e;
  e["message"] = errorMessage(p);
  e["type"] = slugOf(p);
  e["code"] = cancelReasonJson(p);
  return e;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Problem makeProblem(const ProblemKind& kind, std::string detail,
                    std::optional<CancelReason> cancel_reason,
                    std::optional<std::chrono::milliseconds> retry_after) {
  return Problem{.status = kind.status,
                 .slug = std::string(kind.slug),
                 .title = std::string(kind.title),
                 .detail = std::move(detail),
                 .cancel_reason = cancel_reason,
                 .is_retriable = kind.retriable,
                 .retry_after = retry_after};
}

std::string errorMessage(const Problem& p) {
  std::string message = "sluice " + slugOf(p);
  if (!p.detail.empty()) message += ": " + p.detail;
  return message;
}

LocalReply makeProblemReply(const Problem& p) {
  nlohmann::json j;
  j["type"] = "urn:sluice:problem:" + slugOf(p);
  j["title"] = p.title;
  j["status"] = p.status;
  j["detail"] = p.detail;
  j["cancel_reason"] = cancelReasonJson(p);
  j["is_retriable"] = p.is_retriable;
  j["error"] = errorMember(p);

  LocalReply reply;
  reply.head.status = p.status;
  reply.body = dump(j);
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

SseDialect sseDialectFor(std::string_view path, std::string_view content_type) {
  constexpr std::string_view kEventStream = "text/event-stream";
  content_type = trimOws(content_type);
  if (content_type.size() < kEventStream.size() ||
      !equalsIgnoreCase(content_type.substr(0, kEventStream.size()), kEventStream)) {
    return SseDialect::None;
  }
  path = path.substr(0, path.find('?'));
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (endsWith(path, "/completions") || endsWith(path, "/responses")) return SseDialect::OpenAI;
  if (endsWith(path, "/messages")) return SseDialect::Anthropic;
  return SseDialect::None;
}

std::string sseErrorEvent(SseDialect dialect, const Problem& p) {
  switch (dialect) {
    case SseDialect::None:
    case SseDialect::Mcp:
      return "";
    case SseDialect::OpenAI:
      return "data: " + dump(nlohmann::json{{"error", errorMember(p)}}) + "\n\n";
    case SseDialect::Anthropic: {
      nlohmann::json e;
      e["type"] = "error";
      e["error"] = {{"type", slugOf(p)}, {"message", errorMessage(p)}};
      return "event: error\ndata: " + dump(e) + "\n\n";
    }
  }
  return "";
}

}  // namespace sluice
