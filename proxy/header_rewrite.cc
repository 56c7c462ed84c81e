#include "proxy/header_rewrite.h"

#include <string>
#include <vector>

namespace sluice {

namespace {

constexpr std::string_view kHopByHop[] = {
    "connection", "keep-alive",         "proxy-connection",    "te", "trailer", "transfer-encoding",
    "upgrade",    "proxy-authenticate", "proxy-authorization",
};

}  // namespace

bool isSluiceHeader(std::string_view name) {
  constexpr std::string_view kPrefix = "x-sluice-";
  if (name.size() < kPrefix.size()) return false;
  for (size_t i = 0; i < kPrefix.size(); ++i) {
    const char c = name[i] == '_' ? '-' : name[i];
    if (c != kPrefix[i]) return false;
  }
  return true;
}

void stripHopByHop(HeaderMap& headers) {
  // Fields named by Connection are hop-by-hop too; collect them before removal.
  std::vector<std::string> named;
  for (auto value : headers.getAll("connection")) {
    while (!value.empty()) {
      const auto comma = value.find(',');
      const auto token = trimOws(value.substr(0, comma));
      if (!token.empty()) named.push_back(toLower(token));
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  for (const auto& name : named) headers.remove(name);
  for (auto name : kHopByHop) headers.remove(name);
}

void rewriteRequestForUpstream(RequestHead& head, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, const ClientInfo& client) {
  stripHopByHop(head.headers);
  head.headers.remove("content-length");  // the codec re-frames the body

  // x-sluice-* is sluice's own namespace: a client must not be able to forge
  // it, in either spelling (nginx and others map `_` in field names to `-`).
  std::vector<std::string> forged;
  for (const auto& [name, value] : head.headers) {
    if (isSluiceHeader(name)) forged.push_back(name);
  }
  for (const auto& name : forged) head.headers.remove(name);

  head.headers.set("host", url.authority());

  if (!client.address.empty()) {
    const auto prior = head.headers.getAll("x-forwarded-for");
    std::string xff;
    for (auto v : prior) {
      if (!xff.empty()) xff += ", ";
      xff += v;
    }
    if (!xff.empty()) xff += ", ";
    xff += client.address;
    head.headers.set("x-forwarded-for", xff);
  }
  if (!head.headers.has("x-forwarded-proto")) {
    head.headers.add("x-forwarded-proto", client.tls ? "https" : "http");
  }

  if (!url.path_prefix.empty()) head.path = url.path_prefix + head.path;

  for (const auto& [name, value] : upstream.headers) head.headers.set(name, value);
}

void rewriteResponseForDownstream(ResponseHead& head) {
  stripHopByHop(head.headers);
  // A 204 has no content and must not say otherwise (RFC 9110 §8.6); a 304's
  // Content-Length describes a 200 that is not being sent, which clients and
  // caches in between have read as a body to wait for. Neither carries a body.
  if (!mayHaveBody(/*head_request=*/false, head.status)) head.headers.remove("content-length");
  // x-sluice-* on responses is sluice's own; an upstream (maybe another sluice)
  // must not set ours.
  head.headers.remove("x-sluice-attempts");
  head.headers.remove("x-sluice-upstream");
  head.headers.remove("x-sluice-upstream-request-id");
}

}  // namespace sluice
