// Decodes `upstreams[]`: name, url or endpoints, timeouts, http2, tls and
// static headers; `rate_limit` and `circuit_breaker` through their filters'
// decoders.

#include <map>
#include <set>

#include "common/http_headers.h"
#include "config/sections.h"

namespace sluice::config::detail {

UpstreamConfig Decoder::upstream(const Field& f) {
  UpstreamConfig u;
  std::optional<Field> name_field, url_field, endpoints_field;
  decodeMap(
      f,
      {
          {"name",
           [&](const Field& v) {
             u.name = labelName(v);
             name_field.emplace(v);
           }},
          {"url",
           [&](const Field& v) {
             url_field.emplace(v);
             EndpointConfig e;
             endpointUrl(v, e);
             e.name = e.url.hostPort();
             u.endpoints.push_back(std::move(e));
           }},
          {"endpoints",
           [&](const Field& v) {
             endpoints_field.emplace(v);
             u.endpoints = endpoints(v);
           }},
          {"connect_timeout", [&](const Field& v) { u.connect_timeout = duration(v, false); }},
          {"http2",
           [&](const Field& v) {
             u.http2 = oneOf<Http2Mode>(
                 v, {{"auto", Http2Mode::Auto}, {"on", Http2Mode::On}, {"off", Http2Mode::Off}});
           }},
          {"tls", [&](const Field& v) { u.tls = clientTls(v); }},
          {"headers", [&](const Field& v) { headers(v, u); }},
          {"rate_limit", [&](const Field& v) { u.rate_limit = decodeRateLimit(*this, v); }},
          {"circuit_breaker",
           [&](const Field& v) { u.circuit_breaker = decodeCircuitBreaker(*this, v); }},
      },
      {"name"});
  if (url_field && endpoints_field) {
    fail(*endpoints_field, "give either `url` (one endpoint) or `endpoints`, not both");
  }
  if (!url_field && !endpoints_field) {
    fail(f.mark, childPath(f.path, "url"), "required key is missing (or give `endpoints`)");
  }
  const int line = name_field->mark.line + 1;
  const auto [it, inserted] = upstream_lines_.emplace(u.name, line);
  if (!inserted) {
    fail(*name_field, "duplicate upstream name " + inQuotes(u.name) + " (first defined at line " +
                          std::to_string(it->second) + ")");
  }
  return u;
}

void Decoder::endpointUrl(const Field& f, EndpointConfig& e) {
  e.raw_url = scalar(f, "a URL");
  std::string why;
  const std::optional<UpstreamUrl> url = parseUpstreamUrl(e.raw_url, &why);
  if (!url) fail(f, why);
  e.url = *url;
}

UpstreamTlsConfig Decoder::clientTls(const Field& f) {
  UpstreamTlsConfig tls;
  decodeMap(f, {
                   {"verify", [&](const Field& x) { tls.verify = boolean(x); }},
                   // "" = the default (system CA store / the URL's host), as rendered.
                   {"ca_file", [&](const Field& x) { tls.ca_file = scalar(x, "a path"); }},
                   {"sni", [&](const Field& x) { tls.sni = scalar(x, "a host name"); }},
                   {"min_version", [&](const Field& x) { tls.min_version = tlsMinVersion(x); }},
                   {"ciphers", [&](const Field& x) { tls.ciphers = tlsCiphers(x); }},
               });
  return tls;
}

std::vector<EndpointConfig> Decoder::endpoints(const Field& f) {
  std::vector<EndpointConfig> out;
  std::map<std::string, int> lines;  // name -> line, for the duplicate message
  const std::vector<Field> list = items(f);
  if (list.empty()) fail(f, "must list at least one endpoint");
  for (const Field& item : list) {
    EndpointConfig e;
    std::optional<Field> name_field;
    decodeMap(item,
              {
                  {"name",
                   [&](const Field& v) {
                     e.name = labelName(v);
                     name_field.emplace(v);
                   }},
                  {"url", [&](const Field& v) { endpointUrl(v, e); }},
                  {"weight", [&](const Field& v) { e.weight = u32Max(v, 1, 1000); }},
                  {"priority", [&](const Field& v) { e.priority = u32Max(v, 0, 100); }},
              },
              {"url"});
    if (e.name.empty()) e.name = e.url.hostPort();
    const int line = (name_field ? name_field->mark : item.mark).line + 1;
    const auto [it, inserted] = lines.emplace(e.name, line);
    if (!inserted) {
      fail(name_field ? *name_field : item,
           "duplicate endpoint name " + inQuotes(e.name) + " (first at line " +
               std::to_string(it->second) + "; two endpoints with one url need distinct names)");
    }
    out.push_back(std::move(e));
  }
  return out;
}

void Decoder::headers(const Field& f, UpstreamConfig& u) {
  // sluice owns message framing and connection management; a static value would break them.
  static const std::set<std::string, std::less<>> kManaged = {
      "connection", "content-length",    "keep-alive", "proxy-connection",
      "te",         "transfer-encoding", "upgrade"};
  forEachEntry(f, [&](const YAML::Mark& key_mark, const std::string& key, const Field& value) {
    if (!isToken(key)) fail(key_mark, value.path, "invalid header name " + inQuotes(key));
    const std::string name = toLower(key);
    if (kManaged.count(name) != 0) {
      fail(key_mark, value.path,
           "header " + inQuotes(name) + " is managed by sluice and cannot be set");
    }
    for (const auto& [existing, unused] : u.headers) {
      if (existing == name) {
        fail(key_mark, value.path, "duplicate header (header names are case-insensitive)");
      }
    }
    std::string text = scalar(value, "a header value");
    if (text.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      fail(value, "header value must not contain CR, LF or NUL");
    }
    u.headers.emplace_back(name, std::move(text));
  });
}

}  // namespace sluice::config::detail
