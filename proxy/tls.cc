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

SslCtxPtr makeUpstreamSslCtx(const config::UpstreamTlsConfig& tls, TlsError* error) {
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  if (raw == nullptr) {
    if (error) error->message = "SSL_CTX_new: " + lastSslError();
    return nullptr;
  }
  SslCtxPtr ctx(raw, SslCtxDeleter{});
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  SSL_CTX_set_mode(raw, SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(raw, kAlpn, sizeof(kAlpn));
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
