#pragma once

// The config loader's section decoders: one Decoder turns one YAML document
// into a Config. decode() (config/loader.cc) dispatches the top-level keys to
// the decoders below and then runs the checks that span sections; each group
// of sections is decoded in its own file, named beside its declarations. A
// filter's own section (`budget`, `retry`, `rate_limit`, `circuit_breaker`,
// `pricing[]`) is decoded by that filter's decoder (filters/*/…_config.h),
// which the Decoder calls with itself as the FieldReader.

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/yaml/field_reader.h"
#include "config/config.h"
#include "config/loader.h"

namespace sluice::config::detail {

/** Decodes one YAML document into a Config, throwing DecodeFailure at the first problem. */
class Decoder : private FieldReader {
 public:
  Decoder(const std::string& file, const EnvLookup& env) : FieldReader(file, env) {}

  /** The whole document: every section, then route -> upstream and listener/admin checks. */
  Config decode(const YAML::Node& root);

 private:
  // config/decode_server.cc: `listen`, `admin`, `workers`.
  SocketAddress address(const Field& f);
  std::vector<ListenerConfig> listeners(const Field& f);
  ListenerConfig listener(const Field& f);
  void admin(const Field& f, Config& c);
  std::vector<std::string> hostNames(const Field& f);
  uint32_t workers(const Field& f);

  // config/decode_upstreams.cc: `upstreams[]`.
  UpstreamConfig upstream(const Field& f);
  void headers(const Field& f, UpstreamConfig& u);
  UpstreamTlsConfig clientTls(const Field& f);  // also shared_state.tls
  TlsVersion tlsMinVersion(const Field& f);     // `tls.min_version` ("1.2" | "1.3")
  std::string tlsCiphers(const Field& f);       // `tls.ciphers`, checked by OpenSSL
  std::vector<EndpointConfig> endpoints(const Field& f);
  void endpointUrl(const Field& f, EndpointConfig& e);

  // config/decode_routes.cc: `routes[]`.
  RouteConfig route(const Field& f);
  RouteMatch routeMatch(const Field& f, std::optional<Field>& prefix_field);
  std::vector<FallbackTarget> fallback(const Field& f, std::vector<Field>& upstream_fields);
  FallbackOn fallbackOn(const Field& f);

  // config/decode_settings.cc: `limits`, `access_log`, `shared_state`.
  LimitsConfig limits(const Field& f);
  AccessLogConfig accessLog(const Field& f);
  SharedStateConfig sharedState(const Field& f);

  // config/loader.cc: a warning that needs both a route and its upstream.
  void warnIfPathDoubles(const Config& c, size_t route_index);

  // What the sections leave for the cross-section checks in decode().
  std::optional<Field> admin_field_;  // the admin address, if written
  std::vector<std::pair<SocketAddress, Field>> listener_fields_;
  std::map<std::string, int> upstream_lines_;  // name -> 1-based line of its definition
  std::map<std::string, int> route_lines_;
  std::vector<Field> route_upstream_fields_;  // routes[i].upstream, resolved at the end
  std::vector<std::vector<Field>> route_fallback_fields_;  // routes[i].fallback[k].upstream
  std::vector<std::optional<Field>>
      route_prefix_fields_;  // routes[i].match.path_prefix, if written
  std::vector<std::string> warnings_;
};

}  // namespace sluice::config::detail
