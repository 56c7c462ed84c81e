#pragma once

// mockllm::Server — a fake LLM provider (OpenAI Chat Completions and
// Responses, Anthropic Messages) with scripted faults and a ledger of every
// request, used as the upstream of sluice's integration tests, demo and
// benchmarks. It speaks HTTP/1.1 and HTTP/2 (h2c with prior knowledge on the
// same port; h2 by ALPN over TLS). See tools/mock-llm/README.md for the
// endpoints and headers.
//
//   mockllm::Server server({.host = "127.0.0.1", .port = 0});
//   std::string error;
//   if (!server.start(&error)) ...;
//   connect to server.port(); inspect server.ledger();
//   server.stop();   // or let the destructor do it

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tools/mock-llm/ledger.h"
#include "tools/mock-llm/schedule.h"

namespace mockllm {

struct SharedState;
class Worker;

/** How to run a Server. */
struct ServerOptions {
  std::string host = "127.0.0.1";  // numeric IPv4/IPv6 address or a resolvable name
  uint16_t port = 0;               // 0: the kernel picks; read it back with port()
  int threads = 1;                 // event-loop threads (SO_REUSEPORT listeners)
  std::string tls_cert_file;       // both set: serve HTTPS (PEM chain)
  std::string tls_key_file;        // PEM private key
  size_t ledger_limit = 100000;    // oldest ledger entries beyond this are dropped; 0 = no limit
  bool http2 = true;               // h2c prior knowledge and ALPN h2; false: HTTP/1.1 only
  uint32_t http2_max_concurrent_streams = 256;  // advertised SETTINGS_MAX_CONCURRENT_STREAMS
  std::optional<FaultSchedule> schedule;  // server-side faults by time (schedule.h); epoch: start()
};

/** Splits `HOST:PORT` or `[V6]:PORT`; false if malformed. */
bool parseListenAddress(std::string_view text, std::string* host, uint16_t* port);

/**
 * The mock provider. start() binds (port 0 works) and spawns the worker
 * threads; the server then runs until stop() or destruction. Ignores SIGPIPE
 * process-wide (writes to vanished peers must not kill the process).
 */
class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /** Binds, loads TLS material, starts the threads. False (and `error`) on failure. */
  bool start(std::string* error);

  /** Stops the loops, joins the threads and closes every connection. Idempotent. */
  void stop();

  /** The bound port (valid after start()). */
  uint16_t port() const { return port_; }
  /** `HOST:PORT` as bound, IPv6 hosts in brackets. */
  std::string address() const;
  /** True when serving HTTPS. */
  bool tls() const { return ssl_ctx_ != nullptr; }

  /** The ledger (thread-safe); tests may read it directly instead of GET /_ledger. */
  Ledger& ledger();

 private:
  bool initTls(std::string* error);

  ServerOptions options_;
  std::unique_ptr<SharedState> state_;
  SSL_CTX* ssl_ctx_ = nullptr;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool running_ = false;
};

}  // namespace mockllm
