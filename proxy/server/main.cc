// sluice: a resilience reverse proxy for AI agents.
//
//   sluice --config FILE          run
//   sluice --check-config FILE    validate FILE and exit (0 ok, 2 invalid)
//   sluice --health-check URL     GET URL once: exit 0 on 2xx (container health checks;
//                                 `--probe` is the same)
//   sluice --version | --help     print to stdout and exit 0
//
// Exit codes: 0 clean shutdown, 1 runtime failure (cannot bind, ...),
// 2 invalid config or usage.

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#ifdef SLUICE_MIMALLOC
#include <mimalloc.h>
#endif

#include "common/build_info.h"
#include "config/loader.h"
#include "proxy/observability/log.h"
#include "proxy/server/health_check.h"
#include "proxy/server/server.h"

namespace {

// A start that failed still gets its reason onto stderr, unless the reader takes nothing.
constexpr std::chrono::seconds kStartFailedLogWait{1};

void usage(std::ostream& out) {
  out << "usage: sluice --config FILE        run (SIGTERM/SIGINT drain, SIGHUP reloads FILE)\n"
         "       sluice --check-config FILE  validate FILE: exit 0, or 2 with FILE:LINE:COL: "
         "message\n"
         "       sluice --health-check URL   GET an http:// URL once (5 s): exit 0 on 2xx, else 1\n"
         "                                   (--probe URL: the same)\n"
         "       sluice --version            print the version\n"
         "       sluice --help               print this help\n";
}

// The allocator in effect, for --version: "mimalloc 2.0.9" only when malloc
// itself hands out mimalloc's memory (CMakeLists.txt links it first so that
// it does), else "system".
std::string allocatorName() {
#ifdef SLUICE_MIMALLOC
  void* probe = std::malloc(16);
  const bool in_effect = mi_is_in_heap_region(probe);
  std::free(probe);
  if (in_effect) {
    const int v = mi_version();  // 209 is 2.0.9
    return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." +
           std::to_string(v % 10);
  }
#endif
  return "system";
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--config" || arg == "-c") && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--check-config" && i + 1 < argc) {
      config_path = argv[++i];
      check_only = true;
    } else if ((arg == "--health-check" || arg == "--probe") && i + 2 == argc) {
      return sluice::checkHealth(argv[i + 1], std::chrono::seconds(5), std::cout, std::cerr);
    } else if (arg == "--version" && argc == 2) {
      std::cout << "sluice " << sluice::buildVersion() << " (commit " << sluice::buildCommit()
                << ", allocator " << allocatorName() << ")\n";
      return 0;
    } else if ((arg == "--help" || arg == "-h") && argc == 2) {
      usage(std::cout);
      return 0;
    } else {
      usage(std::cerr);
      return 2;
    }
  }
  if (config_path.empty()) {
    usage(std::cerr);
    return 2;
  }

  auto loaded = sluice::config::loadConfigFile(config_path);
  if (!loaded.ok()) {
    std::cerr << "sluice: invalid config: " << loaded.error->toString() << "\n";
    return 2;
  }
  if (check_only) {
    for (const auto& warning : loaded.config->warnings) {
      std::cerr << "sluice: warning: " << warning << "\n";
    }
    // What start would load from files (certificates, keys, CA files, the
    // access log), loaded the same way: a config that passes here starts.
    std::string error;
    if (!sluice::Server::check(loaded.config, &error)) {
      std::cerr << "sluice: " << error << "\n";
      return 2;
    }
    std::cout << config_path << ": ok\n";
    return 0;
  }

  // Signals are handled by one thread with sigwait: nothing async-signal-unsafe
  // runs in a handler, and worker threads never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: all inherit it

  sluice::Server server(loaded.config);
  std::string error;
  if (!server.start(&error)) {
    sluice::logError("sluice: " + error, {{"event", "start_failed"}});
    sluice::stopOperationalLog(std::chrono::steady_clock::now() + kStartFailedLogWait);
    return 1;
  }
  // stdout keeps its plain lines (scripts and tests read the bound ports from
  // them); stderr gets the same facts as operational log lines.
  const auto& cfg = *loaded.config;
  sluice::logInfo("sluice: started", {{"event", "start"},
                                      {"version", sluice::buildVersion()},
                                      {"commit", sluice::buildCommit()},
                                      {"config", config_path},
                                      {"pid", static_cast<int64_t>(getpid())}});
  for (size_t i = 0; i < cfg.listeners.size(); ++i) {
    const std::string address =
        cfg.listeners[i].address.host + ":" + std::to_string(server.listenerPort(i));
    std::cout << "sluice listening on " << address << "\n";
    sluice::logInfo(
        "sluice listening on " + address,
        {{"event", "listening"}, {"address", address}, {"tls", cfg.listeners[i].tls.has_value()}});
  }
  const std::string admin = cfg.admin.host + ":" + std::to_string(server.adminPort());
  std::cout << "sluice admin on " << admin << std::endl;
  sluice::logInfo("sluice admin on " + admin, {{"event", "admin_listening"}, {"address", admin}});

  std::thread signal_thread([&] {
    for (;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      if (sig == SIGHUP) {
        std::string reload_error;
        if (server.reloadFile(config_path, &reload_error)) {
          sluice::logInfo("sluice: config reloaded from " + config_path,
                          {{"event", "reload"}, {"config", config_path}});
        } else {
          sluice::logWarn(
              "sluice: reload rejected, keeping the running config: " + reload_error,
              {{"event", "reload_rejected"}, {"config", config_path}, {"reason", reload_error}});
        }
        continue;
      }
      server.requestShutdown();
      return;
    }
  });
  signal_thread.detach();

  server.waitForShutdownRequest();
  sluice::logInfo("sluice: draining",
                  {{"event", "drain_start"}, {"in_flight", server.activeExchanges()}});
  const size_t cancelled = server.drain();
  sluice::logInfo("sluice: drained; " + std::to_string(cancelled) +
                      " exchange(s) still in flight at drain_timeout were cancelled (draining)",
                  {{"event", "drained"}, {"cancelled", cancelled}});
  server.stop();
  sluice::logInfo("sluice: stopped", {{"event", "stop"}});
  // stderr's reader gets until the drain deadline too: a stuck log shipper
  // costs the last lines (counted), never a hung exit.
  sluice::stopOperationalLog(server.shutdownDeadline());
  return 0;
}
