#pragma once

// The protocol-neutral request and response heads that travel between the
// codecs (HTTP/1.1 today, HTTP/2 later), the filter chain and the upstream
// attempt. Bodies never live here: they stream through evbuffers.

#include <optional>
#include <string>
#include <string_view>

#include "proxy/http_headers.h"

namespace sluice {

/** A request line plus headers, as the client sent them (path includes the query). */
struct RequestHead {
  std::string method;   // upper-case, e.g. "POST"
  std::string path;     // origin-form target, e.g. "/v1/chat/completions?x=1"
  int version_major = 1;
  int version_minor = 1;
  HeaderMap headers;

  /** The path without the query string, for route matching. */
  std::string_view pathOnly() const {
    std::string_view p(path);
    const auto q = p.find('?');
    return q == std::string_view::npos ? p : p.substr(0, q);
  }
};

/** A status line plus headers. */
struct ResponseHead {
  int status = 200;
  std::string reason;  // may be empty; the codec fills a standard phrase
  HeaderMap headers;
};

/**
 * The one method rule both codecs apply (HTTP/1.1 and HTTP/2 alike): sluice
 * proxies the methods http-parser knows (RFC 9110's and the registered
 * WebDAV/extension ones, upper-case), except CONNECT — it proxies requests,
 * not tunnels. Empty when `method` is fine; otherwise why not, for a 400
 * `bad-request`.
 */
std::optional<std::string> methodRefusal(std::string_view method);

/** The standard reason phrase for `status` ("OK", "Bad Gateway", ...), or "" if unknown. */
const char* reasonPhrase(int status);

}  // namespace sluice
