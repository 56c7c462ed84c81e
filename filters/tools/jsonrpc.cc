#include "filters/tools/jsonrpc.h"

#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace sluice {

namespace {

JsonRpcRequest invalid(std::string detail, std::optional<std::string> id = std::nullopt) {
  JsonRpcRequest r;
  r.status = JsonRpcRequest::Status::InvalidRequest;
  r.detail = std::move(detail);
  r.id = std::move(id);
  return r;
}

// The envelope read without decoding the rest: the members sluice needs
// located by the member scan, their values read when they are plain (no
// escapes, a plain integer id). nullopt for anything else (not an object,
// an escape, a negative or fractional id, a method that is not a string...):
// the full parse below then decides, so a message this accepts reads exactly
// as the full parse reads it. A tool call's `arguments` (often most of the
// body) are skipped, not decoded: the full parse cost ~80 instructions per
// byte, this scan a few.
std::optional<JsonRpcRequest> readEnvelope(std::string_view body) {
  std::string_view version, method, id, params;
  bool answer = false;  // a `result` or an `error`: a response, left to the full parse
  if (!scanTopLevelMembers(body, [&](std::string_view key, std::string_view value) {
        if (key == "jsonrpc") version = value;
        if (key == "method") method = value;
        if (key == "id") id = value;
        if (key == "params") params = value;
        if (key == "result" || key == "error") answer = true;
        return true;
      })) {
    return std::nullopt;
  }
  if (answer) return std::nullopt;
  if (plainString(version) != std::optional<std::string_view>("2.0")) return std::nullopt;
  const std::optional<std::string_view> method_text = plainString(method);
  if (!method_text) return std::nullopt;
  JsonRpcRequest r;
  if (!id.empty()) {
    if (!plainString(id) && !plainUnsigned(id)) return std::nullopt;
    r.id = std::string(id);  // as the full parse writes it back: quotes kept, digits as sent
  }
  r.method = std::string(*method_text);
  if (r.method != "tools/call") return r;
  std::string_view name;
  if (params.empty() || params.front() != '{' ||
      !scanTopLevelMembers(params, [&](std::string_view key, std::string_view value) {
        if (key == "name") name = value;
        return true;
      })) {
    return std::nullopt;
  }
  const std::optional<std::string_view> tool = plainString(name);
  if (!tool) return std::nullopt;
  r.tool = std::string(*tool);
  return r;
}

// A message without a method that carries `result` or `error`: the
// client's answer to a request of the server's.
JsonRpcRequest readResponse(const nlohmann::json& j) {
  const auto id = j.find("id");
  const bool has_error = j.contains("error");
  if (j.contains("result") && has_error) {
    return invalid("a JSON-RPC response carries \"result\" or \"error\", not both");
  }
  if (id == j.end() || !(id->is_string() || id->is_number() || (has_error && id->is_null()))) {
    return invalid("a JSON-RPC response needs the \"id\" of the request it answers");
  }
  const auto version = j.find("jsonrpc");
  if (version == j.end() || !version->is_string() || version->get<std::string>() != "2.0") {
    return invalid("\"jsonrpc\" must be \"2.0\"");
  }
  JsonRpcRequest r;
  r.is_response = true;
  return r;
}

}  // namespace

JsonRpcRequest readJsonRpcRequest(std::string_view body) {
  if (std::optional<JsonRpcRequest> envelope = readEnvelope(body)) return *std::move(envelope);
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    JsonRpcRequest r;
    r.status = JsonRpcRequest::Status::ParseError;
    r.detail = "the request body is not JSON";
    return r;
  }
  if (j.is_array()) return invalid("JSON-RPC batches are not part of MCP; send one message");
  if (!j.is_object()) return invalid("a JSON-RPC message is an object");

  if (j.find("method") == j.end() && (j.contains("result") || j.contains("error"))) {
    return readResponse(j);
  }
  std::optional<std::string> id;
  const auto id_it = j.find("id");
  if (id_it != j.end()) {
    if (id_it->is_string() || id_it->is_number()) {
      id = id_it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      return invalid("\"id\" must be a string or a number");
    }
  }
  const auto version = j.find("jsonrpc");
  if (version == j.end() || !version->is_string() || version->get<std::string>() != "2.0") {
    return invalid("\"jsonrpc\" must be \"2.0\"", id);
  }
  const auto method = j.find("method");
  if (method == j.end() || !method->is_string()) {
    return invalid("a request needs a string \"method\"", id);
  }
  JsonRpcRequest r;
  r.method = method->get<std::string>();
  r.id = std::move(id);
  if (r.method == "tools/call") {
    const auto params = j.find("params");
    const nlohmann::json* name = nullptr;
    if (params != j.end() && params->is_object()) {
      const auto it = params->find("name");
      if (it != params->end() && it->is_string()) name = &*it;
    }
    if (name == nullptr) return invalid("tools/call needs a string \"params.name\"", r.id);
    r.tool = name->get<std::string>();
  }
  return r;
}

}  // namespace sluice
