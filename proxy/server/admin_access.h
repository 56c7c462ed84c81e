#pragma once

// Who may use the admin port (README "Security defaults"). The admin port
// can stop the process (POST /drain) and shows the running config, so a web
// page a developer happens to open must not be able to drive it:
//
// - Cross-site requests: a page can make the browser send a "simple" POST
//   (text/plain, no custom header) to http://127.0.0.1:9901/drain without
//   any CORS preflight. So a POST must carry `x-sluice-admin: 1` or
//   `Content-Type: application/json`, which a browser only sends cross-site
//   after a preflight the admin port never answers; and any request carrying
//   a foreign `Origin` (or `Sec-Fetch-Site: cross-site/same-site`) is refused.
// - DNS rebinding: a page on attacker.example re-resolves its own name to
//   127.0.0.1 and then reads /config as same-origin. The browser still sends
//   `Host: attacker.example`, so only these Hosts are accepted (any port):
//   `localhost`, any IP literal (a rebinding page can only be reached by a
//   name; an IP literal Host means the client addressed the IP itself, which
//   also covers Prometheus or a kubelet scraping a pod IP on 0.0.0.0), the
//   admin address's own host, and the names in `admin.allowed_hosts` (e.g. a
//   compose service name, `sluice`).
//
// The decision is a pure function of the request's headers, tested as a table.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/** What the admin port accepts besides localhost and IP literals. */
struct AdminAccessPolicy {
  std::string admin_host;                  // the configured admin address's host
  std::vector<std::string> allowed_hosts;  // `admin.allowed_hosts`, lower-case
};

/** The parts of an admin request the decision reads (header values as received). */
struct AdminRequestHeaders {
  bool post = false;
  std::vector<std::string_view> hosts;  // every Host field (exactly one is required)
  std::optional<std::string_view> origin;
  std::optional<std::string_view> sec_fetch_site;
  std::optional<std::string_view> content_type;
  bool has_admin_header = false;  // `x-sluice-admin` present and non-empty
};

/** The request header that marks a POST as sent by a tool, not a web page. */
inline constexpr std::string_view kAdminHeader = "x-sluice-admin";

/**
 * Why the request must be refused (403, the text goes in the body), or
 * nullopt when it may proceed. POST checks (the non-simple marker) apply
 * only when `request.post`.
 */
std::optional<std::string> refuseAdminRequest(const AdminAccessPolicy& policy,
                                              const AdminRequestHeaders& request);

/** True when `host_header` ("name", "name:port", "[v6]:port") names this admin port. */
bool isAllowedAdminHost(const AdminAccessPolicy& policy, std::string_view host_header);

}  // namespace sluice
