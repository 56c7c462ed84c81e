#pragma once

// sluice's configuration as plain structs: the whole schema of docs/design.md §2.
//
// The loader (config/loader.h) decodes one YAML file into a `Config` and
// validates it strictly; everything downstream reads these structs and never
// touches YAML. Defaults here are the defaults of the contract. Durations are
// std::chrono types, sizes are bytes.
//
// Each filter's section is declared, with its decoder, beside the filter
// (as Envoy's per-filter config.cc): BudgetConfig, RetryConfig,
// RateLimitConfig, CircuitBreakerConfig, PriceConfig and the OutcomeSet they
// share come from the headers below; this file composes them into the
// document.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/yaml/value_parsers.h"
#include "filters/budget/budget_config.h"
#include "filters/circuit_breaker/circuit_breaker_config.h"
#include "filters/outcome_set.h"
#include "filters/retry/retry_config.h"
#include "filters/runs/runs_config.h"
#include "filters/spend/price_config.h"
#include "filters/throttle/rate_limit_config.h"
#include "filters/tools/tools_config.h"

namespace sluice::config {

/** A host and port as written in `listen` / `admin` ("0.0.0.0:8080", "[::1]:0"). */
struct SocketAddress {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;

  std::string toString() const;
};

/** `tls.min_version`: the oldest protocol version a handshake may use. */
enum class TlsVersion { V1_2, V1_3 };

/**
 * The default TLS 1.2 cipher list (`tls.ciphers`, an OpenSSL cipher string):
 * ECDHE key exchange (forward secrecy) with AEAD ciphers only, so neither
 * static-RSA key exchange nor CBC suites are offered, whatever the
 * certificate's key type. TLS 1.3 suites are OpenSSL's defaults (all AEAD).
 */
inline constexpr char kDefaultTlsCiphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/**
 * True when `ciphers` is an OpenSSL TLS 1.2 cipher list that selects at least
 * one cipher and every name in it is one OpenSSL knows; else false + `why`.
 */
bool checkTlsCipherList(const std::string& ciphers, std::string* why);

/** Downstream TLS termination for one listener. */
struct ListenerTlsConfig {
  std::string cert_file;
  std::string key_file;
  TlsVersion min_version = TlsVersion::V1_2;
  std::string ciphers = kDefaultTlsCiphers;
};

/** One entry of `listen`: an address, optionally with TLS. */
struct ListenerConfig {
  SocketAddress address;
  std::optional<ListenerTlsConfig> tls;
};

enum class Http2Mode { Auto, On, Off };

/** `upstreams[].tls`: verification is on unless explicitly turned off. */
struct UpstreamTlsConfig {
  bool verify = true;
  std::string ca_file;  // empty = the system CA store
  std::string sni;      // empty = the URL's host
  TlsVersion min_version = TlsVersion::V1_2;
  std::string ciphers = kDefaultTlsCiphers;
};

/** A parsed upstream `url`. */
struct UpstreamUrl {
  enum class Scheme { Http, Https };
  Scheme scheme = Scheme::Http;
  std::string host;
  uint16_t port = 0;        // filled from the scheme when absent
  std::string path_prefix;  // "" or "/base" (no trailing slash); prepended to request paths

  bool isTls() const { return scheme == Scheme::Https; }
  /** The Host header value: host, plus ":port" when not the scheme's default. */
  std::string authority() const;
  /** host:port, the port always written ("[::1]:8080"): an endpoint's default name. */
  std::string hostPort() const;
};

/**
 * One of an upstream's `endpoints` (docs/design.md §5): where the one API is
 * reachable. `url: X` on the upstream is the shorthand for one endpoint.
 */
struct EndpointConfig {
  std::string name;  // the metric label and access log `endpoint`; default host:port of url
  UpstreamUrl url;
  std::string raw_url;
  uint32_t weight = 1;    // share of requests among endpoints of the same priority (1..1000)
  uint32_t priority = 0;  // 0 first; a higher level only while no lower one is available
};

/** One `upstreams[]` entry. */
struct UpstreamConfig {
  std::string name;
  std::vector<EndpointConfig> endpoints;  // at least one; `url:` = one, named host:port
  Duration connect_timeout = std::chrono::seconds(2);
  Http2Mode http2 = Http2Mode::Auto;
  UpstreamTlsConfig tls;
  // Set on every upstream request; keys lower-cased, values already ${VAR}-expanded.
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<RateLimitConfig> rate_limit;
  CircuitBreakerConfig circuit_breaker;
};

/** `routes[].match`. An empty `methods` list matches every method. */
struct RouteMatch {
  std::string path_prefix = "/";
  std::vector<std::string> methods;  // upper-case
  // A shell glob on the JSON body's top-level "model"; "" = any request. A
  // route with a model glob is matched once the body is in (docs/design.md §5).
  std::string model;
};

/** One `routes[].fallback` entry: the next upstream to try once the current one cannot serve. */
struct FallbackTarget {
  std::string upstream;
  size_t upstream_index = 0;  // into Config::upstreams
  std::string model;          // "" = keep the request's model; else rewrite the body's "model"
};

/**
 * `routes[].fallback_on`: the endings that move a request to the next
 * fallback upstream. `outcomes` names attempt results (as `retry.on`); the
 * three flags the refusals that happen before anything is sent.
 */
struct FallbackOn {
  OutcomeSet outcomes{{429}, false, true, true, true, true};
  bool circuit_open = true;
  bool rate_limited = true;
  bool overloaded = true;
};

/**
 * `routes[].fallback_wait`: when the current upstream's quota is spent but
 * frees up within the budget, `prefer` waits for it and `avoid` spills over
 * to the next fallback at once (a contract addition, docs/design.md §5).
 */
enum class FallbackWait { Prefer, Avoid };

enum class ClientDisconnectMode { Cancel, Finish };

/** One `routes[]` entry. `upstream_index` points into Config::upstreams. */
struct RouteConfig {
  std::string name;
  RouteMatch match;
  std::string upstream;
  size_t upstream_index = 0;
  BudgetConfig budget;
  RetryConfig retry;
  Duration first_byte_timeout = Duration::zero();  // 0 = only the budget bounds it
  Duration idle_timeout = std::chrono::seconds(30);
  ClientDisconnectMode on_client_disconnect = ClientDisconnectMode::Cancel;
  Duration finish_grace = std::chrono::seconds(30);
  std::vector<FallbackTarget> fallback;  // tried in order once the primary cannot serve
  FallbackOn fallback_on;
  FallbackWait fallback_wait = FallbackWait::Prefer;
  RouteProtocol protocol = RouteProtocol::Http;  // `mcp`: JSON-RPC tool calls (docs/design.md §10)
  ToolsConfig tools;                             // `tools`, `tool_retry`: only with `protocol: mcp`
};

/**
 * `limits`: what sluice tolerates from a downstream client (a contract
 * addition; README "Limits"). Every key has a safe default; the timeouts
 * take 0 to mean "off". A reload applies them to connections accepted after
 * it; live connections keep the limits they started with.
 */
struct LimitsConfig {
  uint64_t max_header_bytes = 64 * 1024;    // request line + headers (HTTP/2: header list) → 431
  uint32_t max_headers = 100;               // header fields → 431
  uint64_t max_body = 64ull * 1024 * 1024;  // request body → 413
  // Request body bytes held by the whole process (every worker) → 503 overloaded.
  uint64_t max_buffered_body_bytes = 256ull * 1024 * 1024;
  uint32_t max_connections_per_worker = 10000;              // beyond: accepted and closed at once
  uint32_t http2_max_concurrent_streams = 128;              // beyond: REFUSED_STREAM
  Duration header_read_timeout = std::chrono::seconds(10);  // TLS/preface + request head → 408
  Duration body_read_timeout = std::chrono::seconds(30);    // no request body byte → 408
  Duration idle_timeout = std::chrono::seconds(60);  // keep-alive, nothing in flight → closed
  Duration send_timeout = std::chrono::seconds(60);  // output pending, no byte accepted → closed
};

/**
 * `access_log` (docs/design.md §7): one JSON line per finished request. `path` is
 * `off` (the default), `stdout` or a file (appended to, reopened on SIGHUP).
 * `format` is `json`, the only format.
 */
struct AccessLogConfig {
  enum class Target { Off, Stdout, File };
  Target target = Target::Off;
  std::string path;  // the file, for Target::File

  bool operator==(const AccessLogConfig&) const = default;
};

/** A parsed `shared_state.redis` URL: redis[s]://[[user]:password@]host[:port][/db]. */
struct RedisUrl {
  bool tls = false;  // rediss://
  std::string host;
  uint16_t port = 6379;
  std::string username;  // empty = AUTH with the password only (Redis < 6 style)
  std::string password;  // empty = no AUTH; never rendered or logged
  int db = 0;

  /** host:port, without credentials: safe for logs. */
  std::string address() const;
};

/**
 * `shared_state` (docs/design.md §6): quota and circuit state shared by every replica
 * through Redis. Absent = local state only (the default).
 */
struct SharedStateConfig {
  RedisUrl redis;
  std::string raw_redis;  // as written, for reload comparison (it may hold a password)
  std::string prefix = "sluice:";
  Duration timeout = std::chrono::milliseconds(50);  // per Redis call
  UpstreamTlsConfig tls;                             // for rediss://, as upstreams[].tls
  // `required`: true = /ready answers 503 while the store is down (the
  // replica leaves its balancer's rotation); false = it keeps serving on local state.
  bool required = false;

  bool operator==(const SharedStateConfig& o) const {
    return raw_redis == o.raw_redis && prefix == o.prefix && timeout == o.timeout &&
           required == o.required && tls.verify == o.tls.verify && tls.ca_file == o.tls.ca_file &&
           tls.sni == o.tls.sni && tls.min_version == o.tls.min_version &&
           tls.ciphers == o.tls.ciphers;
  }
};

/** The whole file. */
struct Config {
  int version = 1;
  std::vector<ListenerConfig> listeners;
  SocketAddress admin{"127.0.0.1", 9901};
  // `admin.allowed_hosts`: host names (lower-case, no port) the admin port
  // accepts in `Host` besides localhost, IP literals and the admin address's
  // own host (proxy/server/admin_access.h). A contract addition.
  std::vector<std::string> admin_allowed_hosts;
  uint32_t workers = 0;  // 0 = auto (one per core)
  Duration drain_timeout = std::chrono::seconds(30);
  std::vector<UpstreamConfig> upstreams;
  std::vector<RouteConfig> routes;
  std::vector<PriceConfig> pricing;
  LimitsConfig limits;
  AccessLogConfig access_log;
  std::optional<SharedStateConfig> shared_state;
  std::optional<RunsConfig> runs;  // absent = requests are not grouped into runs

  std::string source_path;  // the file it came from, for messages and reloads
  // Advice found while loading ("FILE:LINE:COL: key.path: message"): valid,
  // but probably not what was meant. Logged by --check-config, at start and
  // on every reload.
  std::vector<std::string> warnings;
};

using ConfigPtr = std::shared_ptr<const Config>;

}  // namespace sluice::config
