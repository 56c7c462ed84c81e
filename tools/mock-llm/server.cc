#include "tools/mock-llm/server.h"

#include <arpa/inet.h>
#include <event2/thread.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>

#include "tools/mock-llm/router.h"
#include "tools/mock-llm/worker.h"

namespace mockllm {

namespace {

std::string sslError(const std::string& what) {
  char buf[256];
  const unsigned long code = ERR_get_error();
  if (code == 0) return what;
  ERR_error_string_n(code, buf, sizeof(buf));
  return what + ": " + buf;
}

// ALPN protocol lists in wire format, in the server's order of preference.
constexpr unsigned char kAlpnH2AndHttp11[] = {2,   'h', '2', 8,   'h', 't',
                                              't', 'p', '/', '1', '.', '1'};
constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// Picks the first protocol of `ours` the client offers; without a match, no ALPN.
int selectAlpnFrom(const unsigned char* ours, unsigned int ours_len, const unsigned char** out,
                   unsigned char* outlen, const unsigned char* in, unsigned int inlen) {
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, ours, ours_len, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// ALPN with HTTP/2 enabled: h2 first, http/1.1 for the rest.
int selectAlpnH2(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                 unsigned int inlen, void*) {
  return selectAlpnFrom(kAlpnH2AndHttp11, sizeof(kAlpnH2AndHttp11), out, outlen, in, inlen);
}

// ALPN with --http2 off: HTTP/1.1 only, so h2-capable clients fall back.
int selectAlpnHttp11(SSL*, const unsigned char** out, unsigned char* outlen,
                     const unsigned char* in, unsigned int inlen, void*) {
  return selectAlpnFrom(kAlpnHttp11, sizeof(kAlpnHttp11), out, outlen, in, inlen);
}

// A listening TCP socket on `addr`, port `port` (0 = any). -1 and `error` on failure.
int listenSocket(const addrinfo& ai, uint16_t port, bool reuse_port, std::string* error) {
  sockaddr_storage ss{};
  std::memcpy(&ss, ai.ai_addr, ai.ai_addrlen);
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  }
  const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), ai.ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
    *error = std::string("bind/listen: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

bool parseListenAddress(std::string_view text, std::string* host, uint16_t* port) {
  size_t colon;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    *host = std::string(text.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string_view::npos) return false;
    *host = std::string(text.substr(0, colon));
  }
  const std::string_view digits = text.substr(colon + 1);
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty() ||
      value > 65535 || host->empty()) {
    return false;
  }
  *port = static_cast<uint16_t>(value);
  return true;
}

Server::Server(ServerOptions options)
    : options_(std::move(options)), state_(std::make_unique<SharedState>(options_.ledger_limit)) {
  state_->schedule = options_.schedule;
  // Loops are woken from other threads (stop()), which needs libevent's locking.
  static std::once_flag once;
  std::call_once(once, [] { evthread_use_pthreads(); });
}

Server::~Server() {
  stop();
  workers_.clear();
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

Ledger& Server::ledger() { return state_->ledger; }

std::string Server::address() const {
  if (options_.host.find(':') != std::string::npos) {
    return "[" + options_.host + "]:" + std::to_string(port_);
  }
  return options_.host + ":" + std::to_string(port_);
}

bool Server::initTls(std::string* error) {
  if (options_.tls_cert_file.empty() && options_.tls_key_file.empty()) return true;
  if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
    *error = "TLS needs both a certificate and a key";
    return false;
  }
  ssl_ctx_ = SSL_CTX_new(TLS_server_method());
  if (ssl_ctx_ == nullptr) {
    *error = sslError("SSL_CTX_new");
    return false;
  }
  SSL_CTX_set_min_proto_version(ssl_ctx_, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ssl_ctx_, options_.tls_cert_file.c_str()) != 1) {
    *error = sslError("loading certificate " + options_.tls_cert_file);
    return false;
  }
  if (SSL_CTX_use_PrivateKey_file(ssl_ctx_, options_.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = sslError("loading key " + options_.tls_key_file);
    return false;
  }
  if (SSL_CTX_check_private_key(ssl_ctx_) != 1) {
    *error = sslError("certificate and key do not match");
    return false;
  }
  SSL_CTX_set_alpn_select_cb(ssl_ctx_, options_.http2 ? &selectAlpnH2 : &selectAlpnHttp11, nullptr);
  return true;
}

bool Server::start(std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  if (running_) {
    *error = "already started";
    return false;
  }
  std::signal(SIGPIPE, SIG_IGN);
  if (!initTls(error)) return false;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(options_.host.c_str(), nullptr, &hints, &res); rc != 0) {
    *error = "resolving " + options_.host + ": " + gai_strerror(rc);
    return false;
  }
  const int threads = options_.threads < 1 ? 1 : options_.threads;
  uint16_t port = options_.port;
  for (int i = 0; i < threads; ++i) {
    const int fd = listenSocket(*res, port, threads > 1, error);
    if (fd < 0) break;
    if (i == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
    const Http2Settings http2{options_.http2, options_.http2_max_concurrent_streams};
    auto worker = std::make_unique<Worker>(*state_, ssl_ctx_, http2);
    if (!worker->init(fd, error)) break;
    workers_.push_back(std::move(worker));
  }
  freeaddrinfo(res);
  if (static_cast<int>(workers_.size()) != threads) {
    workers_.clear();
    return false;
  }
  port_ = port;
  state_->schedule_epoch_us.store(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
  for (auto& w : workers_) threads_.emplace_back([worker = w.get()] { worker->run(); });
  running_ = true;
  return true;
}

void Server::stop() {
  if (!running_) return;
  running_ = false;
  for (auto& w : workers_) w->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // Closing connections and listeners happens here, on the caller's thread,
  // now that no loop runs.
  workers_.clear();
}

}  // namespace mockllm
