#include "proxy/event/tls_server.h"

#include <openssl/err.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sluice {

namespace {

// ALPN wire format: length-prefixed names, in sluice's order of preference.
constexpr unsigned char kAlpnPreference[] = {2,   'h', '2', 8,   'h', 't',
                                             't', 'p', '/', '1', '.', '1'};

int selectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  unsigned char* selected = nullptr;
  // SSL_select_next_proto walks the server's list first: h2 wins whenever offered.
  if (SSL_select_next_proto(&selected, outlen, kAlpnPreference, sizeof(kAlpnPreference), in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    // Nothing in common: carry on without ALPN (served as HTTP/1.1).
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

/** "what FILE: reason": the OS error when the file cannot be read, else OpenSSL's. */
std::string fileError(const char* what, const std::string& path) {
  std::string reason;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    reason = lastSslError();
  } else {
    reason = std::strerror(errno);
    ERR_clear_error();
  }
  if (reason.empty()) reason = "unknown error";
  return std::string(what) + " " + path + ": " + reason;
}

}  // namespace

SslCtxPtr makeServerSslCtx(const config::ListenerTlsConfig& tls, TlsError* error) {
  SSL_CTX* raw = SSL_CTX_new(TLS_server_method());
  if (raw == nullptr) {
    if (error) error->message = "SSL_CTX_new: " + lastSslError();
    return nullptr;
  }
  SslCtxPtr ctx(raw, SslCtxDeleter{});
  if (!applyTlsPolicy(raw, tls.min_version, tls.ciphers, error)) return nullptr;
  // HTTP/2 forbids renegotiation (RFC 9113 §9.2.1); compression is off by default.
  SSL_CTX_set_options(
      raw, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(raw, SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_use_certificate_chain_file(raw, tls.cert_file.c_str()) != 1) {
    if (error) error->message = fileError("tls.cert", tls.cert_file);
    return nullptr;
  }
  if (SSL_CTX_use_PrivateKey_file(raw, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (error) error->message = fileError("tls.key", tls.key_file);
    return nullptr;
  }
  if (SSL_CTX_check_private_key(raw) != 1) {
    if (error) {
      error->message = "tls.key " + tls.key_file + " does not match tls.cert " + tls.cert_file +
                       ": " + lastSslError();
    }
    return nullptr;
  }
  SSL_CTX_set_alpn_select_cb(raw, &selectAlpn, nullptr);
  return ctx;
}

std::string_view negotiatedAlpn(const SSL* ssl) {
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &proto, &len);
  if (proto == nullptr) return {};
  return std::string_view(reinterpret_cast<const char*>(proto), len);
}

}  // namespace sluice
