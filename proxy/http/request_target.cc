#include "proxy/http/request_target.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice {

namespace {

bool isAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool isHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/** A registered name (letters, digits, '.', '-', '_') or a bracketed IPv6 literal with an optional
 * zone. */
bool validHost(std::string_view host) {
  if (host.empty()) return false;
  if (host.front() != '[') {
    for (const char c : host) {
      if (!isAlnum(c) && c != '.' && c != '-' && c != '_') return false;
    }
    return true;
  }
  if (host.size() < 3 || host.back() != ']') return false;
  std::string_view inside = host.substr(1, host.size() - 2);
  const size_t zone = inside.find('%');
  if (zone != std::string_view::npos) {
    const std::string_view zone_id = inside.substr(zone + 1);
    if (zone_id.empty()) return false;
    for (const char c : zone_id) {
      if (!isAlnum(c) && c != '%' && c != '.' && c != '-' && c != '_' && c != '~') return false;
    }
    inside = inside.substr(0, zone);
  }
  if (inside.empty()) return false;
  for (const char c : inside) {
    if (!isHex(c) && c != ':' && c != '.') return false;
  }
  return true;
}

/** host[:port]: no userinfo, a port of 1 to 5 digits up to 65535. */
bool validAuthority(std::string_view authority) {
  if (authority.find('@') != std::string_view::npos) return false;  // userinfo
  size_t host_end = authority.size();
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return false;
    host_end = close + 1;
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host_end = colon;
  }
  const std::string_view host = authority.substr(0, host_end);
  if (!validHost(host)) return false;
  if (host_end >= authority.size()) return true;
  if (authority[host_end] != ':') return false;
  const std::string_view port = authority.substr(host_end + 1);
  if (port.empty() || port.size() > 5) return false;
  unsigned value = 0;
  for (const char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value <= 0xffff;
}

// A path segment's dot count when it is a dot segment ("." or "..", each
// dot written as '.', "%2e" or "%2E"); 0 otherwise.
int dotSegment(std::string_view segment) {
  int dots = 0;
  size_t i = 0;
  while (i < segment.size()) {
    if (segment[i] == '.') {
      ++i;
    } else if (segment[i] == '%' && i + 2 < segment.size() && segment[i + 1] == '2' &&
               (segment[i + 2] == 'e' || segment[i + 2] == 'E')) {
      i += 3;
    } else {
      return 0;
    }
    if (++dots > 2) return 0;
  }
  return dots;
}

}  // namespace

PathNormalization normalizePath(std::string& target) {
  if (target.empty() || target.front() != '/') return PathNormalization::Unchanged;  // "*"
  const size_t path_end = std::min(target.find('?'), target.size());
  const std::string_view path(target.data(), path_end);
  // The hot path: most paths have neither byte, and then no dot segment.
  if (std::memchr(path.data(), '.', path.size()) == nullptr &&
      std::memchr(path.data(), '%', path.size()) == nullptr) {
    return PathNormalization::Unchanged;
  }
  // Segment by segment: the output keeps "/seg" per kept segment; "." drops
  // itself, ".." drops itself and the segment before it. A dot segment last
  // leaves the path ending in '/' (RFC 3986 §5.2.4: "/a/b/.." is "/a/").
  std::string out;
  bool changed = false;
  size_t at = 0;  // at a '/'
  while (at < path.size()) {
    size_t next = path.find('/', at + 1);
    if (next == std::string_view::npos) next = path.size();
    const std::string_view segment = path.substr(at + 1, next - at - 1);
    const int dots = dotSegment(segment);
    const bool last = next == path.size();
    if (dots == 0) {
      if (changed) {
        out += '/';
        out.append(segment);
      }
    } else {
      if (!changed) {
        out.assign(path.substr(0, at));
        changed = true;
      }
      if (dots == 2) {
        if (out.empty()) return PathNormalization::AboveRoot;
        out.erase(out.rfind('/'));
      }
      if (last) out += '/';
    }
    at = next;
  }
  if (!changed) return PathNormalization::Unchanged;
  if (out.empty()) out = "/";
  target.replace(0, path_end, out);
  return PathNormalization::Normalized;
}

bool toOriginForm(RequestHead& head) {
  const std::string& target = head.path;
  if (target.empty() || target.front() == '/' || target == "*") return true;
  const size_t scheme_end = target.find("://");
  if (scheme_end == std::string::npos) return false;
  const std::string scheme = toLower(std::string_view(target).substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return false;
  const size_t authority_at = scheme_end + 3;
  size_t authority_end = target.find_first_of("/?#", authority_at);
  if (authority_end == std::string::npos) authority_end = target.size();
  const std::string_view authority =
      std::string_view(target).substr(authority_at, authority_end - authority_at);
  if (!validAuthority(authority)) return false;
  // The rest: path, then '?' query, then '#' fragment (dropped).
  std::string_view rest = std::string_view(target).substr(authority_end);
  rest = rest.substr(0, rest.find('#'));
  const size_t query_at = rest.find('?');
  const std::string_view path = rest.substr(0, query_at);
  const std::string_view query =
      query_at == std::string_view::npos ? std::string_view() : rest.substr(query_at + 1);
  std::string origin = path.empty() ? std::string("/") : std::string(path);
  if (!query.empty()) {
    origin += '?';
    origin += query;
  }
  head.headers.set("host", authority);
  head.path = std::move(origin);
  return true;
}

}  // namespace sluice
