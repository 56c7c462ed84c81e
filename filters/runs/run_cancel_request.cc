#include "filters/runs/run_cancel_request.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

#include "filters/runs/run_filter.h"

namespace sluice {

namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/** The run id in the path after the prefix, percent-decoded; nullopt if it is not one. */
std::optional<std::string> runIdOf(std::string_view rest) {
  std::string id;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '/') return std::nullopt;
    if (c == '%' && i + 2 < rest.size() && hexValue(rest[i + 1]) >= 0 &&
        hexValue(rest[i + 2]) >= 0) {
      id += static_cast<char>(hexValue(rest[i + 1]) * 16 + hexValue(rest[i + 2]));
      i += 2;
    } else {
      id += c;
    }
  }
  if (!validRunId(id)) return std::nullopt;
  return id;
}

/** The token of an `Authorization: Bearer <token>` value ("" when it is not one). */
std::string_view bearerToken(std::string_view value) {
  value = trimOws(value);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || value[kScheme.size()] != ' ') return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) return {};
  }
  return trimOws(value.substr(kScheme.size() + 1));
}

}  // namespace

bool constantTimeEquals(std::string_view a, std::string_view b) {
  volatile unsigned char diff = a.size() != b.size() ? 1 : 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char given = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (given ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

std::optional<LocalReply> answerRunCancelRequest(const RequestHead& request,
                                                 const config::RunsConfig& config,
                                                 RunTable& table) {
  if (config.cancel_token.empty()) return std::nullopt;
  const std::string_view path = request.pathOnly();
  if (path.substr(0, kRunCancelPrefix.size()) != kRunCancelPrefix) return std::nullopt;
  if (request.method != "DELETE") {
    LocalReply reply = makeProblemReply(
        makeProblem(problems::kMethodNotAllowed,
                    "DELETE " + std::string(kRunCancelPrefix) + "{id} cancels a run"));
    reply.head.headers.add("allow", "DELETE");
    return reply;
  }
  // The token first: without it nothing is said about the path.
  const auto authorization = request.headers.get("authorization");
  if (!authorization || !constantTimeEquals(bearerToken(*authorization), config.cancel_token)) {
    LocalReply reply = makeProblemReply(makeProblem(
        problems::kUnauthorized, "a run cancel needs Authorization: Bearer <runs.cancel_token>"));
    reply.head.headers.add("www-authenticate", "Bearer realm=\"sluice\"");
    return reply;
  }
  const auto id = runIdOf(path.substr(kRunCancelPrefix.size()));
  if (!id) {
    return makeProblemReply(makeProblem(problems::kBadRequest,
                                        "the run id must be 1 to 128 visible ASCII characters, "
                                        "percent-encoded in the path"));
  }
  const size_t tasks = table.cancel(*id);
  LocalReply reply;
  reply.head.status = 202;
  reply.body = nlohmann::json{{"id", *id}, {"state", "cancelled"}, {"tasks_cancelled", tasks}}.dump(
                   -1, ' ', false, nlohmann::json::error_handler_t::replace) +
               "\n";
  reply.head.headers.add("content-type", "application/json");
  reply.head.headers.add("content-length", std::to_string(reply.body.size()));
  reply.head.headers.add("cache-control", "no-store");
  return reply;
}

}  // namespace sluice
