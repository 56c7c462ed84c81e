#include "common/host_names.h"

#include <arpa/inet.h>

#include <algorithm>

#include "common/http_headers.h"

namespace sluice {

std::optional<HostName> hostOfAuthority(std::string_view value) {
  std::string_view host = value;
  std::string_view port;
  const bool bracketed = !value.empty() && value.front() == '[';
  if (bracketed) {
    const size_t close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = value.substr(1, close - 1);
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else if (const size_t colon = value.rfind(':'); colon != std::string_view::npos) {
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (port.empty()) return std::nullopt;
  }
  const bool port_ok = port.size() <= 5 && std::all_of(port.begin(), port.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
  if (host.empty() || !port_ok || (!bracketed && host.find(':') != std::string_view::npos)) {
    return std::nullopt;
  }
  return HostName{toLower(host), bracketed};
}

std::optional<HostName> hostOfOrigin(std::string_view origin) {
  const size_t sep = origin.find("://");
  if (sep == std::string_view::npos || sep == 0) return std::nullopt;  // `null`, or not an origin
  std::string_view authority = origin.substr(sep + 3);
  // An origin has no path, but a Referer-like value might: stop at it.
  authority = authority.substr(0, authority.find('/'));
  if (authority.find('@') != std::string_view::npos)
    return std::nullopt;  // no userinfo in an origin
  return hostOfAuthority(authority);
}

bool isLocalhostOrIpLiteral(const HostName& host) {
  if (host.name == "localhost") return true;
  unsigned char buf[sizeof(in6_addr)];
  if (host.bracketed) {
    const std::string v6 = host.name.substr(0, host.name.find('%'));
    return inet_pton(AF_INET6, v6.c_str(), buf) == 1;
  }
  return inet_pton(AF_INET, host.name.c_str(), buf) == 1;
}

bool isAllowedHost(const HostName& host, const std::vector<std::string>& allowed) {
  return isLocalhostOrIpLiteral(host) ||
         std::find(allowed.begin(), allowed.end(), host.name) != allowed.end();
}

}  // namespace sluice
