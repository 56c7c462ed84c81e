#include "tests/support/redis_process.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace sluice::test {

namespace {

// Below Linux's default ephemeral range (32768-60999): port-0 binds never land here.
constexpr uint16_t kFirstPort = 20000;
constexpr uint16_t kLastPort = 32000;

bool portIsFree(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string redisServerPath() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "/usr/bin/redis-server";
}

}  // namespace

RedisProcess::RedisProcess(std::optional<RedisTls> tls) : tls_(std::move(tls)) {
  std::random_device rd;
  std::uniform_int_distribution<int> pick(kFirstPort, kLastPort);
  for (int attempt = 0; attempt < 20; ++attempt) {
    const auto port = static_cast<uint16_t>(pick(rd));
    if (!portIsFree(port)) continue;
    if (startOn(port)) return;
  }
  ADD_FAILURE() << "could not start redis-server (is it installed? scripts/setup installs it)";
}

RedisProcess::~RedisProcess() { resume(); }

bool RedisProcess::startOn(uint16_t port) {
  port_ = port;
  std::vector<std::string> argv{
      redisServerPath(), "--port", std::to_string(port), "--bind", "127.0.0.1",   "--save", "",
      "--appendonly",    "no",     "--logfile",          "",       "--daemonize", "no"};
  if (tls_) {
    argv[2] = "0";  // TLS only
    for (const std::string& arg :
         {std::string("--tls-port"), std::to_string(port), std::string("--tls-cert-file"),
          tls_->cert_file, std::string("--tls-key-file"), tls_->key_file,
          std::string("--tls-ca-cert-file"), tls_->ca_file, std::string("--tls-auth-clients"),
          std::string("no")}) {
      argv.push_back(arg);
    }
  }
  proc_ = std::make_unique<ChildProcess>(argv, "Ready to accept connections");
  return proc_->running();
}

std::string RedisProcess::url(int db) const {
  if (tls_) return "rediss://localhost:" + std::to_string(port_) + "/" + std::to_string(db);
  return "redis://127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
}

void RedisProcess::kill() {
  if (!running()) return;
  ::kill(proc_->pid(), SIGKILL);
  proc_->waitForExit(std::chrono::seconds(10));
  proc_.reset();
}

void RedisProcess::pause() {
  if (running()) ::kill(proc_->pid(), SIGSTOP);
}

void RedisProcess::resume() {
  if (running()) ::kill(proc_->pid(), SIGCONT);
}

void RedisProcess::restart() {
  if (running()) return;
  // The same port: the replicas reconnect to the address in their config.
  EXPECT_TRUE(startOn(port_)) << "redis-server did not come back on port " << port_;
}

std::string RedisProcess::cli(const std::string& args) const {
  std::string command = "redis-cli -p " + std::to_string(port_) + " ";
  if (tls_) command += "--tls --cacert " + tls_->ca_file + " ";
  auto [code, out] = runCommand(command + args);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

SilentListener::SilentListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd_, 128) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "SilentListener: cannot listen";
    return;
  }
  port_ = ntohs(addr.sin_port);
}

SilentListener::~SilentListener() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sluice::test
