// mock-llm: a fake LLM provider for sluice's tests, demo and benchmarks.
// main() only parses flags; everything else lives in mockllm::Server.

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/mock-llm/server.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: mock-llm --listen HOST:PORT [--schedule FILE] [--listen HOST:PORT [--schedule "
      "FILE]]...\n"
      "                [--threads N] [--tls-cert FILE --tls-key FILE]\n"
      "                [--ledger-limit N] [--http2 on|off] [--h2-max-concurrent-streams N]\n"
      "  --listen HOST:PORT   address to bind (port 0 = any free port); repeat it for several\n"
      "                       independent providers (own ledger, counters and schedule each)\n"
      "  --schedule FILE      time-based faults for the --listen before it (outages, 429\n"
      "                       bursts, slow periods; see tools/mock-llm/README.md)\n"
      "  --threads N          event-loop threads (default 1)\n"
      "  --tls-cert FILE      PEM certificate chain; with --tls-key serves HTTPS\n"
      "  --tls-key FILE       PEM private key\n"
      "  --ledger-limit N     keep at most N ledger entries (default 100000, 0 = no limit)\n"
      "  --http2 on|off       HTTP/2: h2c prior knowledge, ALPN h2 with TLS (default on)\n"
      "  --h2-max-concurrent-streams N\n"
      "                       advertised SETTINGS_MAX_CONCURRENT_STREAMS (default 256)\n"
      "Prints 'mock-llm listening on HOST:PORT' per listener, in order, once bound. See "
      "tools/mock-llm/README.md.\n");
}

bool parseCount(const char* text, long min, long max, long* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

bool readFile(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  mockllm::ServerOptions options;  // every flag but --listen/--schedule: all listeners
  std::vector<mockllm::ServerOptions> listeners;  // address and schedule of each
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    }
    if (!has_value) {
      std::fprintf(stderr, "mock-llm: %s needs a value (or is unknown)\n", argv[i]);
      usage(stderr);
      return 2;
    }
    const char* value = argv[++i];
    long n = 0;
    if (arg == "--listen") {
      mockllm::ServerOptions& listener = listeners.emplace_back();
      if (!mockllm::parseListenAddress(value, &listener.host, &listener.port)) {
        std::fprintf(stderr, "mock-llm: bad --listen '%s' (want HOST:PORT)\n", value);
        return 2;
      }
    } else if (arg == "--schedule") {
      std::string text, why;
      if (listeners.empty()) {
        std::fprintf(stderr, "mock-llm: --schedule applies to the --listen before it\n");
        return 2;
      }
      if (!readFile(value, &text)) {
        std::fprintf(stderr, "mock-llm: cannot read --schedule '%s'\n", value);
        return 2;
      }
      listeners.back().schedule = mockllm::FaultSchedule::parse(text, &why);
      if (!listeners.back().schedule) {
        std::fprintf(stderr, "mock-llm: %s: %s\n", value, why.c_str());
        return 2;
      }
    } else if (arg == "--threads") {
      if (!parseCount(value, 1, 1024, &n)) {
        std::fprintf(stderr, "mock-llm: bad --threads '%s'\n", value);
        return 2;
      }
      options.threads = static_cast<int>(n);
    } else if (arg == "--tls-cert") {
      options.tls_cert_file = value;
    } else if (arg == "--tls-key") {
      options.tls_key_file = value;
    } else if (arg == "--ledger-limit") {
      if (!parseCount(value, 0, 1L << 40, &n)) {
        std::fprintf(stderr, "mock-llm: bad --ledger-limit '%s'\n", value);
        return 2;
      }
      options.ledger_limit = static_cast<size_t>(n);
    } else if (arg == "--http2") {
      const std::string_view v = value;
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "mock-llm: bad --http2 '%s' (want on or off)\n", value);
        return 2;
      }
      options.http2 = v == "on";
    } else if (arg == "--h2-max-concurrent-streams") {
      if (!parseCount(value, 1, 0x7fffffffL, &n)) {
        std::fprintf(stderr, "mock-llm: bad --h2-max-concurrent-streams '%s'\n", value);
        return 2;
      }
      options.http2_max_concurrent_streams = static_cast<uint32_t>(n);
    } else {
      std::fprintf(stderr, "mock-llm: unknown flag %s\n", argv[i - 1]);
      usage(stderr);
      return 2;
    }
  }
  if (listeners.empty()) {
    usage(stderr);
    return 2;
  }

  // SIGTERM/SIGINT are taken synchronously by this thread (sigwait); the worker
  // threads inherit the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::vector<std::unique_ptr<mockllm::Server>> servers;
  for (auto& listener : listeners) {
    mockllm::ServerOptions each = options;
    each.host = listener.host;
    each.port = listener.port;
    each.schedule = std::move(listener.schedule);
    auto& server = servers.emplace_back(std::make_unique<mockllm::Server>(std::move(each)));
    std::string error;
    if (!server->start(&error)) {
      std::fprintf(stderr, "mock-llm: %s\n", error.c_str());
      return 1;
    }
  }
  for (const auto& server : servers) {
    std::printf("mock-llm listening on %s\n", server->address().c_str());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  for (auto& server : servers) server->stop();
  return 0;
}
