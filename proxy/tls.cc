#include "proxy/tls.h"

#include <openssl/err.h>

namespace sluice {

std::string lastSslError() {
  std::string out;
  unsigned long err;
  while ((err = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

SslCtxPtr makeUpstreamSslCtx(const config::UpstreamTlsConfig& tls, config::Http2Mode http2,
                             TlsError* error) {
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  if (raw == nullptr) {
    if (error) error->message = "SSL_CTX_new: " + lastSslError();
    return nullptr;
  }
  SslCtxPtr ctx(raw, SslCtxDeleter{});
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  SSL_CTX_set_mode(raw, SSL_MODE_RELEASE_BUFFERS);
  // ALPN wire format: length-prefixed protocol names, in order of preference.
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kH2[] = {2, 'h', '2'};
  static const unsigned char kH2OrHttp11[] = {2,   'h', '2', 8,   'h', 't',
                                              't', 'p', '/', '1', '.', '1'};
  switch (http2) {
    case config::Http2Mode::Off:
      SSL_CTX_set_alpn_protos(raw, kHttp11, sizeof(kHttp11));
      break;
    case config::Http2Mode::On:
      SSL_CTX_set_alpn_protos(raw, kH2, sizeof(kH2));
      break;
    case config::Http2Mode::Auto:
      SSL_CTX_set_alpn_protos(raw, kH2OrHttp11, sizeof(kH2OrHttp11));
      break;
  }
  if (!tls.verify) {
    SSL_CTX_set_verify(raw, SSL_VERIFY_NONE, nullptr);
    return ctx;
  }
  SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, nullptr);
  const int ok = tls.ca_file.empty()
                     ? SSL_CTX_set_default_verify_paths(raw)
                     : SSL_CTX_load_verify_locations(raw, tls.ca_file.c_str(), nullptr);
  if (ok != 1) {
    if (error) {
      error->message = (tls.ca_file.empty() ? std::string("loading the system CA store")
                                            : "loading ca_file " + tls.ca_file) +
                       ": " + lastSslError();
    }
    return nullptr;
  }
  return ctx;
}

}  // namespace sluice
