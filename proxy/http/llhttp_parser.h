#pragma once

// An owned llhttp parser for the HTTP/1.1 codecs (Http1ServerConnection,
// Http1ClientConnection). The type stays opaque in headers: <llhttp.h> and
// http-parser's <http_parser.h> (the tests' HTTP/1.1 client, mock-llm) define
// the same names (HPE_OK, HTTP_GET, ...), so only the codecs' .cc files
// include it.

#include <cstddef>
#include <memory>

struct llhttp__internal_s;  // llhttp_t
struct llhttp_settings_s;   // llhttp_settings_t

namespace sluice {

struct LlhttpDeleter {
  void operator()(llhttp__internal_s* parser) const;
};
using LlhttpPtr = std::unique_ptr<llhttp__internal_s, LlhttpDeleter>;

/**
 * The longest HTTP/1.1 head either codec reads (request or status line,
 * header names and values; each 1xx on its own): http-parser's
 * HTTP_MAX_HEADER_SIZE, which bounded heads before llhttp, which has no bound
 * of its own. Longer: 431 from a client, 502 from an upstream.
 */
inline constexpr size_t kHttp1MaxHeadBytes = 80 * 1024;

/** A zeroed parser for llhttp_init. */
LlhttpPtr newLlhttp();

}  // namespace sluice
