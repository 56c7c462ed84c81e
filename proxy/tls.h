#pragma once

// OpenSSL contexts. Upstream (client) contexts verify against the system CA
// store by default, or a configured `ca_file`; per-connection SNI and
// hostname/IP verification are set per connection (connectUpstream).

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "config/config.h"

namespace sluice {

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtxPtr = std::shared_ptr<SSL_CTX>;

/** Why a TLS context could not be built. */
struct TlsError {
  std::string message;
};

/**
 * A client context for one upstream: TLS 1.2+, OpenSSL's default cipher
 * policy, ALPN by `http2` (off: http/1.1; on: h2; auto: h2 then http/1.1),
 * peer verification unless `tls.verify` is false. Returns nullptr and fills
 * `error` on failure (unreadable ca_file, ...).
 */
SslCtxPtr makeUpstreamSslCtx(const config::UpstreamTlsConfig& tls, config::Http2Mode http2,
                             TlsError* error);

/** The last OpenSSL error as text ("" if none), clearing the error queue. */
std::string lastSslError();

}  // namespace sluice
