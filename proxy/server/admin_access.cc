#include "proxy/server/admin_access.h"

#include <algorithm>

#include "common/host_names.h"
#include "common/http_headers.h"

namespace sluice {

namespace {

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
  const std::optional<HostName> host = hostOfAuthority(host_header);
  if (!host) return false;
  if (host->name == toLower(policy.admin_host)) return true;
  return isAllowedHost(*host, policy.allowed_hosts);
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
