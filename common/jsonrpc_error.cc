#include "common/jsonrpc_error.h"

#include <nlohmann/json.hpp>

namespace sluice {

namespace {

bool isJsonRpcProblem(const Problem& p) {
  return p.slug == problems::kJsonRpcParseError.slug ||
         p.slug == problems::kJsonRpcInvalidRequest.slug;
}

// Refusals of the HTTP request itself, before any JSON-RPC was read: their
// status stays (a client that checks for a 4xx sees one).
bool keepsItsStatus(const Problem& p) {
  return isJsonRpcProblem(p) || p.slug == problems::kHostNotAllowed.slug;
}

}  // namespace

int jsonRpcErrorCode(const Problem& p) {
  if (p.slug == problems::kJsonRpcParseError.slug) return jsonrpc_codes::kParseError;
  if (p.slug == problems::kJsonRpcInvalidRequest.slug) return jsonrpc_codes::kInvalidRequest;
  return p.status == 504 ? jsonrpc_codes::kTimeout : jsonrpc_codes::kServerError;
}

std::string jsonRpcErrorResponse(const Problem& p, std::optional<std::string_view> id) {
  // The problem object as sluice renders it everywhere else (one source).
  nlohmann::json data = nlohmann::json::parse(makeProblemReply(p).body, nullptr, false);
  nlohmann::json id_value = nullptr;
  if (id) {
    id_value = nlohmann::json::parse(*id, nullptr, false);
    if (id_value.is_discarded()) id_value = nullptr;
  }
  nlohmann::json j;
  j["jsonrpc"] = "2.0";
  j["id"] = std::move(id_value);
  j["error"] = {{"code", jsonRpcErrorCode(p)}, {"message", errorMessage(p)}, {"data", data}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

LocalReply makeMcpReply(const Problem& p, std::optional<std::string_view> id) {
  const bool keeps_status = keepsItsStatus(p);
  if (!id && !keeps_status) return makeProblemReply(p);
  LocalReply reply;
  reply.head.status = keeps_status ? p.status : 200;
  reply.body = jsonRpcErrorResponse(p, id);
  reply.body.push_back('\n');
  reply.head.headers.add("content-type", "application/json");
  reply.head.headers.add("content-length", std::to_string(reply.body.size()));
  reply.head.headers.add("cache-control", "no-store");
  if (p.retry_after) {
    const auto ms = std::max<long long>(0, p.retry_after->count());
    reply.head.headers.add("retry-after", std::to_string((ms + 999) / 1000));
    reply.head.headers.add("retry-after-ms", std::to_string(ms));
  }
  return reply;
}

std::string mcpErrorEvent(const Problem& p, std::string_view id) {
  return "event: message\ndata: " + jsonRpcErrorResponse(p, id) + "\n\n";
}

}  // namespace sluice
