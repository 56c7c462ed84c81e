#include "tests/support/sluice_process.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/http_client.h"

namespace sluice::test {

namespace {

std::string tempPath(const std::string& suffix) {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("sluice-proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + suffix))
      .string();
}

uint16_t portOf(const std::string& line) {
  const auto colon = line.rfind(':');
  return colon == std::string::npos ? 0 : static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

}  // namespace

SluiceProcess::SluiceProcess(const std::string& yaml, bool stderr_to_pipe)
    : config_path_(tempPath(".yaml")), stderr_path_(tempPath(".stderr")) {
  writeConfig(yaml);
  proc_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{sluicePath(), "--config", config_path_}, "sluice admin on",
      stderr_path_, stderr_to_pipe);
  for (const auto& line : proc_->lines()) {
    if (line.rfind("sluice listening on", 0) == 0 && port_ == 0) port_ = portOf(line);
    if (line.rfind("sluice admin on", 0) == 0) admin_port_ = portOf(line);
  }
  if (port_ == 0 || admin_port_ == 0) ADD_FAILURE() << "sluice did not start: " << stderrText();
}

SluiceProcess::~SluiceProcess() {
  stop();
  std::filesystem::remove(config_path_);
  std::filesystem::remove(stderr_path_);
}

void SluiceProcess::writeConfig(const std::string& yaml) {
  // Write then rename: a reload never reads a half-written file.
  const std::string tmp = config_path_ + ".tmp";
  std::ofstream(tmp) << yaml;
  std::filesystem::rename(tmp, config_path_);
}

void SluiceProcess::signal(int sig) {
  if (running()) ::kill(proc_->pid(), sig);
}

std::string SluiceProcess::stderrText() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string SluiceProcess::adminGet(const std::string& path) const {
  if (!canConnect(admin_port_)) return "";
  return httpRequest(admin_port_, "GET", path).body;
}

int SluiceProcess::adminStatus(const std::string& path) const {
  if (!canConnect(admin_port_)) return 0;
  return httpRequest(admin_port_, "GET", path).status;
}

double SluiceProcess::metric(const std::string& name,
                             const std::vector<std::pair<std::string, std::string>>& labels) const {
  return metricSum(adminGet("/metrics"), name, labels);
}

int SluiceProcess::waitForExit(std::chrono::milliseconds timeout) {
  return proc_ ? proc_->waitForExit(timeout) : -1;
}

int SluiceProcess::stop() { return proc_ ? proc_->stop() : -1; }

double metricSum(const std::string& exposition, const std::string& name,
                 const std::vector<std::pair<std::string, std::string>>& labels) {
  std::istringstream in(exposition);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      if (line.find(k + "=\"" + v + "\"") == std::string::npos) all = false;
    }
    if (!all) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

bool canConnect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace sluice::test
