// Decodes the server sections of the config: `listen` (one address or a
// list of listeners, with TLS), `admin` (an address or {address,
// allowed_hosts}) and `workers`.

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <memory>

#include "common/http_headers.h"
#include "config/address_parsers.h"
#include "config/sections.h"

namespace sluice::config {

bool checkTlsCipherList(const std::string& ciphers, std::string* why) {
  // OpenSSL ignores the names it does not know as long as one cipher is left,
  // so each name is tried on its own too: a typo is an error, not a silently
  // shorter list. Operators (!, -, +) and @ commands are OpenSSL's syntax.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!ctx) {
    *why = "cannot check the cipher list (SSL_CTX_new failed)";
    return false;
  }
  size_t start = 0;
  while (start <= ciphers.size()) {
    size_t end = ciphers.find_first_of(": ,", start);
    if (end == std::string::npos) end = ciphers.size();
    std::string item = ciphers.substr(start, end - start);
    start = end + 1;
    if (item.empty() || item.front() == '@') continue;
    if (item.front() == '!' || item.front() == '-' || item.front() == '+') item.erase(0, 1);
    size_t part_start = 0;
    while (part_start <= item.size()) {
      size_t part_end = item.find('+', part_start);
      if (part_end == std::string::npos) part_end = item.size();
      const std::string part = item.substr(part_start, part_end - part_start);
      part_start = part_end + 1;
      if (part.empty() || part == "DEFAULT" || part == "ALL" || part == "COMPLEMENTOFALL" ||
          part == "COMPLEMENTOFDEFAULT") {
        continue;
      }
      if (SSL_CTX_set_cipher_list(ctx.get(), part.c_str()) != 1) {
        while (ERR_get_error() != 0) {
        }
        *why = "unknown cipher \"" + part + "\"" +
               " in the OpenSSL cipher list (e.g. ECDHE-RSA-AES128-GCM-SHA256)";
        return false;
      }
    }
  }
  if (SSL_CTX_set_cipher_list(ctx.get(), ciphers.c_str()) != 1) {
    while (ERR_get_error() != 0) {
    }
    *why = "the cipher list \"" + ciphers + "\" selects no cipher";
    return false;
  }
  return true;
}

}  // namespace sluice::config

namespace sluice::config::detail {

SocketAddress Decoder::address(const Field& f) {
  const std::string s = scalar(f, "an address (host:port)");
  std::string why;
  const std::optional<SocketAddress> a = parseSocketAddress(s, &why);
  if (!a) fail(f, why);
  return *a;
}

std::vector<ListenerConfig> Decoder::listeners(const Field& f) {
  std::vector<ListenerConfig> out;
  if (f.node.IsScalar()) {
    out.push_back(ListenerConfig{address(f), std::nullopt});
    listener_fields_.emplace_back(out.back().address, f);
    return out;
  }
  if (!f.node.IsSequence()) {
    fail(f, "expected an address (host:port) or a list of listeners, got " + describe(f.node));
  }
  for (const Field& item : items(f)) out.push_back(listener(item));
  if (out.empty()) fail(f, "at least one listener is required");
  return out;
}

ListenerConfig Decoder::listener(const Field& f) {
  ListenerConfig l;
  std::optional<Field> address_field(f);
  if (f.node.IsScalar()) {
    l.address = address(f);  // a bare address in the list: plain HTTP
  } else {
    decodeMap(
        f,
        {
            {"address",
             [&](const Field& a) {
               l.address = address(a);
               address_field.emplace(a);
             }},
            {"tls",
             [&](const Field& t) {
               ListenerTlsConfig tls;
               decodeMap(
                   t,
                   {
                       {"cert", [&](const Field& v) { tls.cert_file = nonEmptyString(v); }},
                       {"key", [&](const Field& v) { tls.key_file = nonEmptyString(v); }},
                       {"min_version", [&](const Field& v) { tls.min_version = tlsMinVersion(v); }},
                       {"ciphers", [&](const Field& v) { tls.ciphers = tlsCiphers(v); }},
                   },
                   {"cert", "key"});
               l.tls = tls;
             }},
        },
        {"address"});
  }
  for (const auto& [other, other_field] : listener_fields_) {
    if (l.address.port != 0 && other.toString() == l.address.toString()) {
      fail(*address_field, "duplicate listener address " + l.address.toString());
    }
  }
  listener_fields_.emplace_back(l.address, *address_field);
  return l;
}

void Decoder::admin(const Field& f, Config& c) {
  if (!f.node.IsMap()) {
    c.admin = address(f);
    admin_field_.emplace(f);
    return;
  }
  decodeMap(f,
            {
                {"address",
                 [&](const Field& a) {
                   c.admin = address(a);
                   admin_field_.emplace(a);
                 }},
                {"allowed_hosts", [&](const Field& a) { c.admin_allowed_hosts = hostNames(a); }},
            },
            {"address"});
}

TlsVersion Decoder::tlsMinVersion(const Field& f) {
  const std::string s = scalar(f, "\"1.2\" or \"1.3\"");
  if (s == "1.2") return TlsVersion::V1_2;
  if (s == "1.3") return TlsVersion::V1_3;
  fail(f, "must be \"1.2\" or \"1.3\" (got " + inQuotes(s) + ")");
}

std::string Decoder::tlsCiphers(const Field& f) {
  const std::string s = nonEmptyString(f);
  std::string why;
  if (!checkTlsCipherList(s, &why)) fail(f, why);
  return s;
}

uint32_t Decoder::workers(const Field& f) {
  const std::string s = scalar(f, "\"auto\" or a positive integer");
  const std::optional<int64_t> n = s == "auto" ? 0 : parseInt64(s);
  if (!n || (s != "auto" && (*n < 1 || *n > kU32Max))) {
    fail(f, "must be \"auto\" or a positive integer (got " + inQuotes(s) + ")");
  }
  return static_cast<uint32_t>(*n);
}

std::vector<std::string> Decoder::hostNames(const Field& f) {
  std::vector<std::string> out;
  for (const Field& item : items(f)) {
    std::string host = toLower(scalar(item, "a host name"));
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    if (bracketed) host = host.substr(1, host.size() - 2);
    if (!(bracketed ? isIpv6Literal(host) : isHostname(host))) {
      fail(item, "expected a host name or IP address without a port (got " + inQuotes(host) + ")");
    }
    if (std::find(out.begin(), out.end(), host) != out.end()) {
      fail(item, "duplicate host " + inQuotes(host));
    }
    out.push_back(std::move(host));
  }
  return out;
}

}  // namespace sluice::config::detail
