#include "filters/tools/jsonrpc.h"

#include <nlohmann/json.hpp>

namespace sluice {

namespace {

JsonRpcRequest invalid(std::string detail, std::optional<std::string> id = std::nullopt) {
  JsonRpcRequest r;
  r.status = JsonRpcRequest::Status::InvalidRequest;
  r.detail = std::move(detail);
  r.id = std::move(id);
  return r;
}

}  // namespace

JsonRpcRequest readJsonRpcRequest(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    JsonRpcRequest r;
    r.status = JsonRpcRequest::Status::ParseError;
    r.detail = "the request body is not JSON";
    return r;
  }
  if (j.is_array()) return invalid("JSON-RPC batches are not part of MCP; send one message");
  if (!j.is_object()) return invalid("a JSON-RPC message is an object");

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
