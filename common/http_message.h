#pragma once

// The protocol-neutral request and response heads that travel between the
// codecs (HTTP/1.1 today, HTTP/2 later), the filter chain and the upstream
// attempt. Bodies never live here: they stream through evbuffers.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/http_headers.h"

namespace sluice {

/** Room for a chunk-size line: up to 16 hex digits and CRLF. */
inline constexpr size_t kChunkSizeLineMax = 18;

/**
 * Writes the chunk-size line of a `len`-byte chunk (RFC 9112 §7.1: lower-case
 * hex, CRLF) to `out` (kChunkSizeLineMax bytes) and returns its length.
 * Without snprintf: the HTTP/1.1 encoder runs it for every streamed chunk.
 */
inline size_t chunkSizeLine(size_t len, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char digits[16];
  size_t n = 0;
  do {
    digits[n++] = kHex[len & 0xF];
    len >>= 4;
  } while (len != 0);
  for (size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\r';
  out[n + 1] = '\n';
  return n + 2;
}

/** A request line plus headers, as the client sent them (path includes the query). */
struct RequestHead {
  std::string method;  // upper-case, e.g. "POST"
  std::string path;    // origin-form target, e.g. "/v1/chat/completions?x=1"
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
 * proxies the methods llhttp knows (RFC 9110's and the registered
 * WebDAV/extension ones, upper-case), except CONNECT — it proxies requests,
 * not tunnels. Empty when `method` is fine; otherwise why not, for a 400
 * `bad-request`.
 */
std::optional<std::string> methodRefusal(std::string_view method);

/** The standard reason phrase for `status` ("OK", "Bad Gateway", ...), or "" if unknown. */
const char* reasonPhrase(int status);

/**
 * Whether a response may carry content (RFC 9110 §6.4.1): never one to HEAD,
 * never a 1xx, 204 or 304, whatever its Content-Length says. The one rule
 * the HTTP/1.1 and HTTP/2 codecs, both directions, and the response rewrite
 * share.
 */
inline constexpr bool mayHaveBody(bool head_request, int status) {
  return !head_request && !(status >= 100 && status < 200) && status != 204 && status != 304;
}

}  // namespace sluice
