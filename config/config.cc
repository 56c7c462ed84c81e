#include "config/config.h"

namespace sluice::config {

namespace {
// IPv6 literals are bracketed wherever a port follows them.
std::string hostForAuthority(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}
}  // namespace

std::string SocketAddress::toString() const {
  return hostForAuthority(host) + ":" + std::to_string(port);
}

std::string RedisUrl::address() const {
  return hostForAuthority(host) + ":" + std::to_string(port);
}

std::string UpstreamUrl::authority() const {
  const uint16_t default_port = isTls() ? 443 : 80;
  std::string out = hostForAuthority(host);
  if (port != 0 && port != default_port) out += ":" + std::to_string(port);
  return out;
}

std::string UpstreamUrl::hostPort() const {
  return hostForAuthority(host) + ":" + std::to_string(port);
}

}  // namespace sluice::config
