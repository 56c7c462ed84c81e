#pragma once

// Downstream TLS termination: the server SSL_CTX of one `listen` entry with
// `tls: {cert, key}`. Built once per ConfigSnapshot (so a SIGHUP reload loads the
// certificate files again and new connections get the new certificate, while
// live connections keep the SSL objects — and the context — they started
// with). Modern defaults: TLS 1.2+ (`tls.min_version`), on TLS 1.2 only
// ECDHE key exchange with AEAD ciphers (`tls.ciphers`, config::kDefaultTlsCiphers:
// no static-RSA key exchange, no CBC), TLS 1.3 suites as OpenSSL's, no
// renegotiation, ALPN choosing h2, then http/1.1.

#include <string_view>

#include "config/config.h"
#include "proxy/event/tls.h"

namespace sluice {

/**
 * A server context for `tls`: the certificate chain and key are loaded and
 * checked against each other now. Returns nullptr and fills `error` (file
 * name and reason: "tls.cert /etc/x.pem: No such file or directory") on
 * failure.
 */
SslCtxPtr makeServerSslCtx(const config::ListenerTlsConfig& tls, TlsError* error);

/** The protocol the client and sluice agreed on by ALPN: "h2", "http/1.1", or "" (none). */
std::string_view negotiatedAlpn(const SSL* ssl);

}  // namespace sluice
