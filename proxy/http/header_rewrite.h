#pragma once

// How a request is rewritten on its way upstream and a response on its way
// back (RFC 9110 §7.6.1): hop-by-hop fields are connection-specific and are
// never forwarded; Host names the upstream; X-Forwarded-For records the
// client; the upstream's configured headers (API keys) are applied last.

#include <string_view>

#include "common/http_message.h"
#include "config/config.h"

namespace sluice {

/** What the downstream side knows about the client, for X-Forwarded-*. */
struct ClientInfo {
  std::string_view address;  // IP literal of the peer
  bool tls = false;          // the downstream connection was TLS
};

/**
 * The request `client` as it goes to `url`, an endpoint of `upstream`: strips
 * hop-by-hop fields (and the ones the client's Connection header names),
 * strips client-supplied `x-sluice-*` (and `x_sluice_*`), sets Host, appends
 * X-Forwarded-For, sets X-Forwarded-Proto to the listener's scheme
 * (replacing the client's), prefixes the endpoint
 * URL's base path and applies `upstream.headers`. Framing (Content-Length /
 * Transfer-Encoding) is the codec's job. Built in one pass: the client's head
 * is not copied first.
 */
RequestHead requestForUpstream(const RequestHead& client, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, const ClientInfo& info);

/** requestForUpstream() in place. */
void rewriteRequestForUpstream(RequestHead& head, const config::UpstreamConfig& upstream,
                               const config::UpstreamUrl& url, const ClientInfo& client);

/**
 * Strips hop-by-hop fields from an upstream response before it goes
 * downstream, and Content-Length from a 204 or 304 (which have no body).
 */
void rewriteResponseForDownstream(ResponseHead& head);

/**
 * Strips from an upstream response's trailer section what must not travel
 * as a trailer (RFC 9110 §6.5.1) or cannot over HTTP/2: hop-by-hop and
 * connection-specific fields, framing (Content-Length), Host and sluice's own
 * `x-sluice-*`.
 */
void rewriteTrailersForDownstream(HeaderMap& trailers);

/** The request's TE field lists `trailers` (RFC 9110 §10.1.4): its client takes trailers. */
bool acceptsTrailers(const HeaderMap& request_headers);

/** `x-sluice-*` in any mix of `-` and `_` (`x_sluice_attempts`); `name` is lower-case. */
bool isSluiceHeader(std::string_view name);

/** Removes the hop-by-hop fields of RFC 9110 §7.6.1 and those listed in Connection. */
void stripHopByHop(HeaderMap& headers);

}  // namespace sluice
