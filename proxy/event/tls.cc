#include "proxy/event/tls.h"

#include <arpa/inet.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

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

namespace {

bool isIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

bool applyTlsPolicy(SSL_CTX* ctx, config::TlsVersion min_version, const std::string& ciphers,
                    TlsError* error) {
  const int version = min_version == config::TlsVersion::V1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(ctx, version) != 1) {
    if (error) error->message = "tls.min_version: " + lastSslError();
    return false;
  }
  if (SSL_CTX_set_cipher_list(ctx, ciphers.c_str()) != 1) {
    if (error) error->message = "tls.ciphers \"" + ciphers + "\": " + lastSslError();
    return false;
  }
  return true;
}

SslCtxPtr makeClientSslCtx(const config::UpstreamTlsConfig& tls, TlsError* error) {
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  if (raw == nullptr) {
    if (error) error->message = "SSL_CTX_new: " + lastSslError();
    return nullptr;
  }
  SslCtxPtr ctx(raw, SslCtxDeleter{});
  if (!applyTlsPolicy(raw, tls.min_version, tls.ciphers, error)) return nullptr;
  SSL_CTX_set_mode(raw, SSL_MODE_RELEASE_BUFFERS);
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

SslCtxPtr makeUpstreamSslCtx(const config::UpstreamTlsConfig& tls, config::Http2Mode http2,
                             TlsError* error) {
  SslCtxPtr ctx = makeClientSslCtx(tls, error);
  if (!ctx) return nullptr;
  // ALPN wire format: length-prefixed protocol names, in order of preference.
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kH2[] = {2, 'h', '2'};
  static const unsigned char kH2OrHttp11[] = {2,   'h', '2', 8,   'h', 't',
                                              't', 'p', '/', '1', '.', '1'};
  switch (http2) {
    case config::Http2Mode::Off:
      SSL_CTX_set_alpn_protos(ctx.get(), kHttp11, sizeof(kHttp11));
      break;
    case config::Http2Mode::On:
      SSL_CTX_set_alpn_protos(ctx.get(), kH2, sizeof(kH2));
      break;
    case config::Http2Mode::Auto:
      SSL_CTX_set_alpn_protos(ctx.get(), kH2OrHttp11, sizeof(kH2OrHttp11));
      break;
  }
  return ctx;
}

SSL* newClientSsl(SSL_CTX* ctx, const std::string& host, const config::UpstreamTlsConfig& tls) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  const std::string& sni = tls.sni.empty() ? host : tls.sni;
  if (!isIpLiteral(sni)) SSL_set_tlsext_host_name(ssl, sni.c_str());
  if (tls.verify) {
    // Verify the name we connect to (or the configured SNI), IP literals as IPs.
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (isIpLiteral(sni)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, sni.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, sni.c_str(), 0);
    }
  }
  return ssl;
}

BufferEventPtr connectClient(Dispatcher& dispatcher, const std::string& host, uint16_t port,
                             SSL_CTX* ssl_ctx, const config::UpstreamTlsConfig& tls) {
  const int options = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
  BufferEventPtr bev;
  if (ssl_ctx != nullptr) {
    SSL* ssl = newClientSsl(ssl_ctx, host, tls);
    if (ssl == nullptr) return nullptr;
    bev.reset(bufferevent_openssl_socket_new(dispatcher.base(), -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                             options));
    if (bev) bufferevent_openssl_set_allow_dirty_shutdown(bev.get(), 1);
  } else {
    bev.reset(bufferevent_socket_new(dispatcher.base(), -1, options));
  }
  if (!bev) return nullptr;
  if (bufferevent_socket_connect_hostname(bev.get(), dispatcher.dns(), AF_UNSPEC, host.c_str(),
                                          port) != 0) {
    return nullptr;
  }
  return bev;
}

}  // namespace sluice
