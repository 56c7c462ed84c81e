#pragma once

// OpenSSL contexts. Upstream (client) contexts verify against the system CA
// store by default, or a configured `ca_file`; per-connection SNI and
// hostname/IP verification are set per connection (newClientSsl, connectClient).

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "config/config.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"

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
 * A client context for one upstream: `tls.min_version` (1.2 by default),
 * `tls.ciphers` (ECDHE with AEAD only by default: config::kDefaultTlsCiphers), ALPN by `http2`
 * (off: http/1.1; on: h2; auto: h2 then http/1.1), peer verification unless `tls.verify` is false.
 * Returns nullptr and fills `error` on failure (unreadable ca_file, ...).
 */
SslCtxPtr makeUpstreamSslCtx(const config::UpstreamTlsConfig& tls, config::Http2Mode http2,
                             TlsError* error);

/** A client context without ALPN (shared_state's `rediss://`); otherwise as makeUpstreamSslCtx. */
SslCtxPtr makeClientSslCtx(const config::UpstreamTlsConfig& tls, TlsError* error);

/**
 * One client connection's SSL for `host` (or `tls.sni` when set): SNI unless
 * it is an IP literal, and with `tls.verify` the certificate must name it
 * (an IP literal as an IP). Null when SSL_new fails.
 */
SSL* newClientSsl(SSL_CTX* ctx, const std::string& host, const config::UpstreamTlsConfig& tls);

/**
 * A bufferevent connecting to host:port (resolved by the loop's evdns, never
 * blocking), over TLS (newClientSsl) when `ssl_ctx` is set. Null when it
 * cannot even start; a failed connect is reported as a bufferevent event.
 */
BufferEventPtr connectClient(Dispatcher& dispatcher, const std::string& host, uint16_t port,
                             SSL_CTX* ssl_ctx, const config::UpstreamTlsConfig& tls);

/**
 * Applies `tls.min_version` and `tls.ciphers` (TLS 1.2 list; TLS 1.3 suites
 * stay OpenSSL's defaults) to `ctx`. False + `error` when OpenSSL refuses them.
 */
bool applyTlsPolicy(SSL_CTX* ctx, config::TlsVersion min_version, const std::string& ciphers,
                    TlsError* error);

/** The last OpenSSL error as text ("" if none), clearing the error queue. */
std::string lastSslError();

}  // namespace sluice
