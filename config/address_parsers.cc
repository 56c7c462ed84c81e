// config/'s own text -> value parsers: socket addresses, upstream and Redis
// URLs (declared in config/loader.h) and the host helpers of
// config/address_parsers.h. Durations, sizes and `${VAR}` are the YAML
// toolkit's (common/yaml/value_parsers.h).

#include "config/address_parsers.h"

#include <algorithm>

#include "common/http_headers.h"
#include "common/yaml/value_parsers.h"
#include "config/loader.h"

namespace sluice::config {
namespace detail {

bool isHostname(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return isDigit(c) || isAlpha(c) || c == '-' || c == '.' || c == '_';
  });
}

bool isIpv6Literal(std::string_view s) {
  const size_t zone = s.find('%');  // fe80::1%eth0
  const std::string_view addr = s.substr(0, zone);
  if (addr.find(':') == std::string_view::npos) return false;
  if (zone != std::string_view::npos && zone + 1 == s.size()) return false;
  return std::all_of(addr.begin(), addr.end(), [](char c) {
    return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
  });
}

}  // namespace detail

namespace {

using detail::inQuotes;
using detail::isHostname;
using detail::isIpv6Literal;
using detail::parseError;
using detail::parseInt64;

std::optional<uint16_t> parsePort(std::string_view s, bool allow_zero, std::string& why) {
  if (s.empty()) {
    why = "missing port";
    return std::nullopt;
  }
  const auto value = s.size() <= 5 ? parseInt64(s) : std::nullopt;
  if (!value || s[0] == '-' || *value > 65535 || (!allow_zero && *value == 0)) {
    why = allow_zero ? "port must be 0..65535" : "port must be 1..65535";
    return std::nullopt;
  }
  return static_cast<uint16_t>(*value);
}

// Splits "host:port" / "[v6]:port" / "host" into host and (possibly empty) port text.
bool splitHostPort(std::string_view text, std::string& host, std::optional<std::string_view>& port,
                   std::string& why) {
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      why = "missing \"]\" after an IPv6 address";
      return false;
    }
    host = std::string(text.substr(1, close - 1));
    if (!isIpv6Literal(host)) {
      why = "invalid IPv6 address " + inQuotes(host);
      return false;
    }
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        why = "expected \":\" and a port after \"]\"";
        return false;
      }
      port = rest.substr(1);
    }
    return true;
  }
  const size_t colon = text.rfind(':');
  host = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) port = text.substr(colon + 1);
  if (host.find(':') != std::string::npos) {
    why = "IPv6 addresses must be in brackets, e.g. [::1]:8080";
    return false;
  }
  if (host.empty()) {
    why = "missing host";
    return false;
  }
  if (!isHostname(host)) {
    why = "invalid host " + inQuotes(host);
    return false;
  }
  return true;
}

}  // namespace

std::optional<SocketAddress> parseSocketAddress(std::string_view text, std::string* error) {
  const std::string prefix = "invalid address " + inQuotes(text) + ": ";
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(text, host, port_text, why)) return parseError(error, prefix + why);
  if (!port_text) return parseError(error, prefix + "missing port (expected host:port)");
  const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/true, why);
  if (!port) return parseError(error, prefix + why);
  return SocketAddress{host, *port};
}

std::optional<UpstreamUrl> parseUpstreamUrl(std::string_view text, std::string* error) {
  const std::string prefix = "invalid URL " + inQuotes(text) + ": ";
  UpstreamUrl url;
  const std::string lower = toLower(text);
  std::string_view rest = text;
  if (lower.rfind("http://", 0) == 0) {
    url.scheme = UpstreamUrl::Scheme::Http;
    rest.remove_prefix(7);
  } else if (lower.rfind("https://", 0) == 0) {
    url.scheme = UpstreamUrl::Scheme::Https;
    rest.remove_prefix(8);
  } else {
    return parseError(error, prefix + "must start with http:// or https://");
  }
  if (std::any_of(rest.begin(), rest.end(), [](char c) { return c <= 0x20 || c == 0x7f; })) {
    return parseError(error, prefix + "must not contain spaces or control characters");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return parseError(error, prefix + "must not have a query or fragment");
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) {
    return parseError(error, prefix + "must not contain credentials; set them in headers");
  }
  if (authority.empty()) return parseError(error, prefix + "missing host");
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(authority, host, port_text, why)) return parseError(error, prefix + why);
  url.host = toLower(host);
  url.port = url.isTls() ? 443 : 80;
  if (port_text) {
    const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/false, why);
    if (!port) return parseError(error, prefix + why);
    url.port = *port;
  }
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.path_prefix = std::string(path);
  return url;
}

std::optional<RedisUrl> parseRedisUrl(std::string_view text, std::string* error) {
  // The text may hold a password: messages quote only the parts without it.
  const std::string prefix = "invalid Redis URL: ";
  RedisUrl url;
  const std::string lower = toLower(text);
  std::string_view rest = text;
  if (lower.rfind("rediss://", 0) == 0) {
    url.tls = true;
    rest.remove_prefix(9);
  } else if (lower.rfind("redis://", 0) == 0) {
    rest.remove_prefix(8);
  } else {
    return parseError(error, prefix + "must start with redis:// or rediss://");
  }
  if (std::any_of(rest.begin(), rest.end(), [](char c) { return c <= 0x20 || c == 0x7f; })) {
    return parseError(error, prefix + "must not contain spaces or control characters");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return parseError(error, prefix + "must not have a query or fragment");
  }
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      url.password = std::string(userinfo);  // redis://secret@host: the password alone
    } else {
      url.username = std::string(userinfo.substr(0, colon));
      url.password = std::string(userinfo.substr(colon + 1));
    }
    rest.remove_prefix(at + 1);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.empty()) return parseError(error, prefix + "missing host");
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(authority, host, port_text, why)) return parseError(error, prefix + why);
  url.host = toLower(host);
  if (port_text) {
    const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/false, why);
    if (!port) return parseError(error, prefix + why);
    url.port = *port;
  }
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      const std::optional<int64_t> n = parseInt64(db);
      if (!n || *n < 0 || *n > 15) {
        return parseError(
            error, prefix + "the database must be a number 0..15 (got " + inQuotes(db) + ")");
      }
      url.db = static_cast<int>(*n);
    }
  }
  return url;
}

}  // namespace sluice::config
