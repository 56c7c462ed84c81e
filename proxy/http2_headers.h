#pragma once

// Header conversion between sluice's protocol-neutral heads and HTTP/2 name/
// value lists (RFC 9113 §8.2–8.3), for the downstream HTTP/2 server:
//   request:  `:method`, `:path`, `:authority` (→ host), `:scheme` plus
//             regular fields, cookie crumbs re-joined with "; " (§8.2.3);
//   response: `:status` plus lower-case fields, never the connection-specific
//             ones HTTP/2 forbids (§8.2.2: connection, keep-alive,
//             proxy-connection, transfer-encoding, upgrade; and te).
// nghttp2 validates what it receives; these functions only translate.

#include <nghttp2/nghttp2.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/http_message.h"

namespace sluice {

/** True for fields HTTP/2 forbids (RFC 9113 §8.2.2); `name` is lower-case. */
bool isHttp2ConnectionSpecificHeader(std::string_view name);

/**
 * Collects one HTTP/2 request (pseudo-headers and fields, in arrival order)
 * into a RequestHead. Feed it every field nghttp2 hands over, then finish().
 */
class Http2RequestHeadBuilder {
 public:
  /** One field as received; pseudo-headers start with ':'. */
  void add(std::string_view name, std::string_view value);
  /**
   * The request head: method, path, `host` from `:authority` (which wins over
   * a `host` field), cookies joined, version 2.0.
   */
  RequestHead finish();

  const std::string& method() const { return head_.method; }
  const std::string& scheme() const { return scheme_; }

 private:
  RequestHead head_;
  std::string authority_;
  std::string scheme_;
  std::string cookie_;
};

/**
 * The name/value list for `head`: `:status` first, then every field except
 * the connection-specific ones. The nv entries point into `head` and
 * `status_storage`, which must outlive the list.
 */
std::vector<nghttp2_nv> toHttp2ResponseNv(const ResponseHead& head, std::string& status_storage);

}  // namespace sluice
