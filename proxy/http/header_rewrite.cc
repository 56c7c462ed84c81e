#include "proxy/http/header_rewrite.h"

#include <string>
#include <vector>

namespace sluice {

namespace {

constexpr std::string_view kContentLength = "content-length";

// The hop-by-hop fields of RFC 9110 §7.6.1 (and the proxy-* ones), picked by
// length first: most fields of a head have a length none of them has. This
// runs for every field of every head (PROFILE.md, sixth round).
bool inHopByHopList(std::string_view name) {
  switch (name.size()) {
    case 2:
      return name == "te";
    case 7:
      return name == "trailer" || name == "upgrade";
    case 10:
      return name == "connection" || name == "keep-alive";
    case 16:
      return name == "proxy-connection";
    case 17:
      return name == "transfer-encoding";
    case 18:
      return name == "proxy-authenticate";
    case 19:
      return name == "proxy-authorization";
    default:
      return false;
  }
}

// The field names a Connection header lists (RFC 9110 §7.6.1), as views of
// `headers`; none in the common case, so nothing is allocated then.
std::vector<std::string_view> connectionNamed(const HeaderMap& headers) {
  std::vector<std::string_view> named;
  for (const auto field : headers) {
    if (field.name != "connection") continue;
    std::string_view value = field.value;
    while (!value.empty()) {
      const auto comma = value.find(',');
      const auto token = trimOws(value.substr(0, comma));
      if (!token.empty()) named.push_back(token);
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  return named;
}

bool namedIn(std::string_view name, const std::vector<std::string_view>& names) {
  for (auto n : names) {
    if (equalsIgnoreCase(name, n)) return true;
  }
  return false;
}

// Hop-by-hop for this message: a fixed one, or one its Connection header names.
bool hopByHop(std::string_view name, const std::vector<std::string_view>& named) {
  return inHopByHopList(name) || (!named.empty() && namedIn(name, named));
}

bool configured(std::string_view name, const config::UpstreamConfig& upstream) {
  for (const auto& [configured_name, unused] : upstream.headers) {
    if (equalsIgnoreCase(name, configured_name)) return true;
  }
  return false;
}

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
  // One pass; the named fields are views of `headers`, which removeIf keeps valid.
  const std::vector<std::string_view> named = connectionNamed(headers);
  headers.removeIf([&](std::string_view name, std::string_view) { return hopByHop(name, named); });
}

RequestHead requestForUpstream(const RequestHead& client, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, const ClientInfo& info) {
  RequestHead out;
  out.method = client.method;
  out.path = url.path_prefix.empty() ? client.path : url.path_prefix + client.path;
  out.version_major = client.version_major;
  out.version_minor = client.version_minor;

  // One pass over the client's fields, keeping what goes upstream in its
  // place; then what sluice sets, in the order the in-place rules produced
  // it: Host, X-Forwarded-For, X-Forwarded-Proto, the upstream's headers.
  // Building the upstream head this way costs one copy of the kept bytes
  // instead of a copy and a removal pass per rule (PROFILE.md, fifth round).
  const std::vector<std::string_view> named = connectionNamed(client.headers);
  const bool own_host = !configured("host", upstream);
  const bool own_xff = !info.address.empty() && !configured("x-forwarded-for", upstream);
  const bool may_xfp = !configured("x-forwarded-proto", upstream);
  std::string xff;
  HeaderMap& headers = out.headers;
  headers.reserve(client.headers.size() + 3 + upstream.headers.size(), 512);
  for (const auto field : client.headers) {
    const std::string_view name = field.name;
    if (hopByHop(name, named) || name == kContentLength || name == "host" || isSluiceHeader(name)) {
      continue;  // hop-by-hop; re-framed by the codec; set below; sluice's own namespace
    }
    if (!upstream.headers.empty() && configured(name, upstream)) continue;  // replaced below
    if (name == "x-forwarded-for" && !info.address.empty()) {
      if (own_xff) {
        if (!xff.empty()) xff += ", ";
        xff += field.value;
      }
      continue;  // appended below, with the client's address
    }
    // The listener's scheme, never the client's say (a client could claim
    // https on a plain listener and an upstream would trust it).
    if (name == "x-forwarded-proto" && may_xfp) continue;
    headers.add(name, field.value);
  }
  if (own_host) headers.add("host", url.authority());
  if (own_xff) {
    if (!xff.empty()) xff += ", ";
    xff += info.address;
    headers.add("x-forwarded-for", xff);
  }
  if (may_xfp) headers.add("x-forwarded-proto", info.tls ? "https" : "http");
  for (const auto& [name, value] : upstream.headers) headers.add(name, value);
  return out;
}

void rewriteRequestForUpstream(RequestHead& head, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, const ClientInfo& client) {
  head = requestForUpstream(head, upstream, url, client);
}

void rewriteResponseForDownstream(ResponseHead& head) {
  // One pass over the fields. Hop-by-hop ones go. A 204 has no content and
  // must not say otherwise (RFC 9110 §8.6); a 304's Content-Length describes a
  // 200 that is not being sent, which clients and caches in between have read
  // as a body to wait for. Neither carries a body. x-sluice-* on responses is
  // sluice's own; an upstream (maybe another sluice) must not set ours.
  const std::vector<std::string_view> named = connectionNamed(head.headers);
  const bool no_body = !mayHaveBody(/*head_request=*/false, head.status);
  head.headers.removeIf([&](std::string_view name, std::string_view) {
    return hopByHop(name, named) || (no_body && name == kContentLength) ||
           name == "x-sluice-attempts" || name == "x-sluice-upstream" ||
           name == "x-sluice-upstream-request-id";
  });
}

bool acceptsTrailers(const HeaderMap& request_headers) {
  for (const auto field : request_headers) {
    if (field.name != "te") continue;
    std::string_view value = field.value;
    while (!value.empty()) {
      const auto comma = value.find(',');
      const std::string_view member = value.substr(0, comma);
      if (equalsIgnoreCase(trimOws(member.substr(0, member.find(';'))), "trailers")) return true;
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  return false;
}

void rewriteTrailersForDownstream(HeaderMap& trailers) {
  trailers.removeIf([](std::string_view name, std::string_view) {
    return inHopByHopList(name) || name == kContentLength || name == "host" ||
           isSluiceHeader(name) || name.empty() || name.front() == ':';
  });
}

}  // namespace sluice
