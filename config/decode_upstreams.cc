// Decodes `upstreams[]`: name, url or endpoints, timeouts, http2, tls,
// static headers, rate_limit and circuit_breaker.

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
          {"rate_limit", [&](const Field& v) { u.rate_limit = rateLimit(v); }},
          {"circuit_breaker", [&](const Field& v) { u.circuit_breaker = circuitBreaker(v); }},
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

RateLimitConfig Decoder::rateLimit(const Field& f) {
  RateLimitConfig r;
  decodeMap(f, {
                   {"key",
                    [&](const Field& v) {
                      const std::string s = scalar(v, "\"none\" or \"header:<name>\"");
                      constexpr std::string_view kHeader = "header:";
                      if (s == "none") {
                        r.key.kind = RateLimitKey::Kind::None;
                        r.key.header.clear();
                      } else if (s.compare(0, kHeader.size(), kHeader) == 0) {
                        const std::string name = s.substr(kHeader.size());
                        if (!isToken(name)) fail(v, "invalid header name " + inQuotes(name));
                        r.key.kind = RateLimitKey::Kind::Header;
                        r.key.header = toLower(name);
                      } else {
                        fail(v, "must be \"none\" or \"header:<name>\" (got " + inQuotes(s) + ")");
                      }
                    }},
                   {"reserve", [&](const Field& v) { r.reserve = integer(v, 0, kI64Max); }},
                   {"max_queue", [&](const Field& v) { r.max_queue = u32(v, 0); }},
               });
  return r;
}

CircuitBreakerConfig Decoder::circuitBreaker(const Field& f) {
  CircuitBreakerConfig cb;
  std::optional<Field> cooldown_field, max_cooldown_field;
  decodeMap(
      f, {
             {"consecutive_failures", [&](const Field& v) { cb.consecutive_failures = u32(v, 1); }},
             {"failure_rate",
              [&](const Field& v) {
                FailureRateConfig& fr = cb.failure_rate;
                decodeMap(
                    v, {
                           {"threshold", [&](const Field& x) { fr.threshold = number(x, 0, 1); }},
                           {"window", [&](const Field& x) { fr.window = duration(x, false); }},
                           {"min_requests", [&](const Field& x) { fr.min_requests = u32(x, 1); }},
                       });
              }},
             {"cooldown",
              [&](const Field& v) {
                cb.cooldown = duration(v, false);
                cooldown_field.emplace(v);
              }},
             {"max_cooldown",
              [&](const Field& v) {
                cb.max_cooldown = duration(v, false);
                max_cooldown_field.emplace(v);
              }},
             {"half_open_probes", [&](const Field& v) { cb.half_open_probes = u32(v, 1); }},
             {"failure_on", [&](const Field& v) { cb.failure_on = outcomes(v); }},
             {"max_requests", [&](const Field& v) { cb.max_requests = u32(v, 1); }},
             {"max_pending", [&](const Field& v) { cb.max_pending = u32(v, 0); }},
         });
  requireOrdered(cb.cooldown, cb.max_cooldown, cooldown_field, max_cooldown_field, "cooldown",
                 "max_cooldown");
  return cb;
}

}  // namespace sluice::config::detail
