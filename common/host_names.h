#pragma once

// Host names in request headers, for the DNS rebinding checks (the admin
// port, docs/reference/admin-api.md; MCP routes, docs/guide/tools.md). A page
// on attacker.example can re-resolve its own name to 127.0.0.1 and then talk
// to a local service as same-origin; the browser still sends
// `Host: attacker.example` (and `Origin: http://attacker.example`). So a
// local service accepts only Hosts it knows: `localhost`, an IP literal (a
// rebinding page is reached by a name; an IP literal means the client
// addressed the IP itself) and names it was told about.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/** A host out of a `Host` value or an origin's authority. */
struct HostName {
  std::string name;        // lower-case, without brackets or port
  bool bracketed = false;  // written `[...]`: an IPv6 literal
};

/** The host of a `Host` field value (`name[:port]`, `[v6][:port]`); nullopt if malformed. */
std::optional<HostName> hostOfAuthority(std::string_view value);

/** The host of an `Origin` value (`scheme://authority`); nullopt for `null` or a malformed one. */
std::optional<HostName> hostOfOrigin(std::string_view origin);

/** `localhost` or an IP literal (IPv4, or a bracketed IPv6 one). */
bool isLocalhostOrIpLiteral(const HostName& host);

/** isLocalhostOrIpLiteral(host), or one of `allowed` (lower-case names). */
bool isAllowedHost(const HostName& host, const std::vector<std::string>& allowed);

}  // namespace sluice
