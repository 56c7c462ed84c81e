#pragma once

// Host helpers of config/'s address and URL parsers (parseSocketAddress,
// parseUpstreamUrl, parseRedisUrl: declared in config/loader.h, defined in
// config/address_parsers.cc), also used by the `admin.allowed_hosts` decoder.

#include <string_view>

namespace sluice::config::detail {

/** Letters, digits, '-', '.', '_' (not empty). */
bool isHostname(std::string_view s);

/** An IPv6 address without brackets, optionally with a zone (`fe80::1%eth0`). */
bool isIpv6Literal(std::string_view s);

}  // namespace sluice::config::detail
