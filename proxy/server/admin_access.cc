#include "proxy/server/admin_access.h"

#include <arpa/inet.h>

#include <algorithm>

#include "common/http_headers.h"

namespace sluice {

namespace {

bool isIpLiteral(const std::string& host, bool bracketed) {
  unsigned char buf[sizeof(in6_addr)];
  if (bracketed) return inet_pton(AF_INET6, host.substr(0, host.find('%')).c_str(), buf) == 1;
  return inet_pton(AF_INET, host.c_str(), buf) == 1;
}

// The host of a Host field value, lower-case, without brackets or port; nullopt if malformed.
std::optional<std::string> hostOf(std::string_view value, bool& bracketed) {
  std::string_view host = value;
  std::string_view port;
  bracketed = !value.empty() && value.front() == '[';
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
  return toLower(host);
}

// At most 100 bytes of a client's header value, for a message.
std::string quoted(std::string_view value) {
  return "\"" + std::string(value.substr(0, 100)) + (value.size() > 100 ? "...\"" : "\"");
}

bool isJson(std::string_view content_type) {
  std::string_view media = content_type.substr(0, content_type.find(';'));
  while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.remove_suffix(1);
  while (!media.empty() && (media.front() == ' ' || media.front() == '\t')) media.remove_prefix(1);
  return equalsIgnoreCase(media, "application/json");
}

}  // namespace

bool isAllowedAdminHost(const AdminAccessPolicy& policy, std::string_view host_header) {
  bool bracketed = false;
  const std::optional<std::string> host = hostOf(host_header, bracketed);
  if (!host) return false;
  if (*host == "localhost" || isIpLiteral(*host, bracketed)) return true;
  if (*host == toLower(policy.admin_host)) return true;
  return std::find(policy.allowed_hosts.begin(), policy.allowed_hosts.end(), *host) !=
         policy.allowed_hosts.end();
}

std::optional<std::string> refuseAdminRequest(const AdminAccessPolicy& policy,
                                              const AdminRequestHeaders& request) {
  if (request.hosts.size() != 1) return "the admin port needs exactly one Host header";
  const std::string_view host = request.hosts.front();
  if (!isAllowedAdminHost(policy, host)) {
    return "Host " + quoted(host) +
           " is not this admin port (accepted: localhost, an IP address, the admin address's "
           "host and admin.allowed_hosts; this stops DNS rebinding)";
  }
  if (request.origin) {
    // Same origin = the page came from this very host:port (the admin port serves no pages,
    // so in practice any Origin is a web page elsewhere).
    constexpr std::string_view kScheme = "http://";
    const std::string_view origin = *request.origin;
    const bool same = origin.size() > kScheme.size() &&
                      equalsIgnoreCase(origin.substr(0, kScheme.size()), kScheme) &&
                      equalsIgnoreCase(origin.substr(kScheme.size()), host);
    if (!same) return "cross-origin requests are refused (Origin: " + quoted(origin) + ")";
  }
  if (request.sec_fetch_site && !equalsIgnoreCase(*request.sec_fetch_site, "same-origin") &&
      !equalsIgnoreCase(*request.sec_fetch_site, "none")) {
    return "cross-site requests are refused (Sec-Fetch-Site: " + quoted(*request.sec_fetch_site) +
           ")";
  }
  if (request.post && !request.has_admin_header &&
      !(request.content_type && isJson(*request.content_type))) {
    return "POST needs the header \"" + std::string(kAdminHeader) +
           ": 1\" (or Content-Type: application/json), which a web page cannot send cross-site";
  }
  return std::nullopt;
}

}  // namespace sluice
