#pragma once

// sluice's configuration as plain structs: the whole schema of DESIGN.md §2.
//
// The loader (config/loader.h) decodes one YAML file into a `Config` and
// validates it strictly; everything downstream reads these structs and never
// touches YAML. Defaults here are the defaults of the contract. Durations are
// std::chrono types, sizes are bytes.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::config {

using Duration = std::chrono::milliseconds;

/** A host and port as written in `listen` / `admin` ("0.0.0.0:8080", "[::1]:0"). */
struct SocketAddress {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;

  std::string toString() const;
};

/** Downstream TLS termination for one listener. */
struct ListenerTlsConfig {
  std::string cert_file;
  std::string key_file;
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
};

/** Where a quota is keyed: one per upstream, or one per value of a request header. */
struct RateLimitKey {
  enum class Kind { None, Header };
  Kind kind = Kind::Header;
  std::string header = "authorization";  // lower-case; only for Kind::Header
};

/**
 * `upstreams[].rate_limit`: proactive throttling from the upstream's quota
 * headers. Absent in YAML = throttling off for that upstream.
 */
struct RateLimitConfig {
  RateLimitKey key;
  int64_t reserve = 1;
  uint32_t max_queue = 1000;
};

/** `failure_rate` of a circuit breaker; threshold in [0, 1]. */
struct FailureRateConfig {
  double threshold = 0.5;
  Duration window = std::chrono::seconds(10);
  uint32_t min_requests = 20;
};

/** The outcome kinds a circuit breaker's `failure_on` and a retry's `on` can name. */
struct OutcomeSet {
  std::vector<int> statuses;  // exact status codes, e.g. 429, 503
  bool any_4xx = false;       // "4xx"
  bool any_5xx = false;       // "5xx"
  bool connect_error = false;
  bool reset = false;
  bool timeout = false;

  /** True when `status` is in the set (exact code or class). */
  bool matchesStatus(int status) const;
};

/** `upstreams[].circuit_breaker`. Always present; defaults as in the contract. */
struct CircuitBreakerConfig {
  uint32_t consecutive_failures = 5;
  FailureRateConfig failure_rate;
  Duration cooldown = std::chrono::seconds(5);
  Duration max_cooldown = std::chrono::seconds(60);
  uint32_t half_open_probes = 1;
  OutcomeSet failure_on{{}, false, true, true, true, true};
  uint32_t max_requests = 1000;
  uint32_t max_pending = 1000;
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
 * One of an upstream's `endpoints` (DESIGN §5): where the one API is
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
  // route with a model glob is matched once the body is in (DESIGN §5).
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
 * to the next fallback at once (a contract addition, DESIGN §5).
 */
enum class FallbackWait { Prefer, Avoid };

/** `routes[].budget`. */
struct BudgetConfig {
  std::string header = "x-budget-ms";  // lower-case
  Duration default_budget = std::chrono::seconds(120);
  Duration max = std::chrono::seconds(600);
  bool propagate = true;
};

struct BackoffConfig {
  Duration base = std::chrono::milliseconds(250);
  Duration max = std::chrono::seconds(8);
};

enum class IdempotencyMode { Auto, Always, Never };

/** `routes[].retry`. */
struct RetryConfig {
  uint32_t attempts = 3;  // total, the first included; 1 = no retries
  // 529 is Anthropic's "overloaded" (a contract addition: DESIGN §2's example omits it).
  OutcomeSet on{{429, 500, 502, 503, 504, 529}, false, false, true, true, true};
  BackoffConfig backoff;
  bool respect_retry_after = true;
  IdempotencyMode idempotent = IdempotencyMode::Always;
  uint32_t budget_percent = 20;
  uint64_t max_body = 8ull * 1024 * 1024;
};

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
};

/** One `pricing[]` entry: USD per million tokens for models matching a glob. */
struct PriceConfig {
  std::string model_glob;
  double input_usd_per_mtok = 0;
  double output_usd_per_mtok = 0;
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
 * `access_log` (DESIGN §7): one JSON line per finished request. `path` is
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
 * `shared_state` (DESIGN §6): quota and circuit state shared by every replica
 * through Redis. Absent = local state only (the default).
 */
struct SharedStateConfig {
  RedisUrl redis;
  std::string raw_redis;  // as written, for reload comparison (it may hold a password)
  std::string prefix = "sluice:";
  Duration timeout = std::chrono::milliseconds(50);  // per Redis call
  UpstreamTlsConfig tls;                             // for rediss://, as upstreams[].tls

  bool operator==(const SharedStateConfig& o) const {
    return raw_redis == o.raw_redis && prefix == o.prefix && timeout == o.timeout &&
           tls.verify == o.tls.verify && tls.ca_file == o.tls.ca_file && tls.sni == o.tls.sni;
  }
};

/** The whole file. */
struct Config {
  int version = 1;
  std::vector<ListenerConfig> listeners;
  SocketAddress admin{"127.0.0.1", 9901};
  // `admin.allowed_hosts`: host names (lower-case, no port) the admin port
  // accepts in `Host` besides localhost, IP literals and the admin address's
  // own host (proxy/admin_access.h). A contract addition.
  std::vector<std::string> admin_allowed_hosts;
  uint32_t workers = 0;  // 0 = auto (one per core)
  Duration drain_timeout = std::chrono::seconds(30);
  std::vector<UpstreamConfig> upstreams;
  std::vector<RouteConfig> routes;
  std::vector<PriceConfig> pricing;
  LimitsConfig limits;
  AccessLogConfig access_log;
  std::optional<SharedStateConfig> shared_state;

  std::string source_path;  // the file it came from, for messages and reloads
  // Advice found while loading ("FILE:LINE:COL: key.path: message"): valid,
  // but probably not what was meant. Logged by --check-config, at start and
  // on every reload.
  std::vector<std::string> warnings;
};

using ConfigPtr = std::shared_ptr<const Config>;

}  // namespace sluice::config
