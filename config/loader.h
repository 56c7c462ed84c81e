#pragma once

// Loads sluice's YAML config (docs/design.md §2) into the plain structs of
// config/config.h, validating strictly.
//
// Every problem is reported as one ConfigError naming the file, the 1-based
// line and column, and the key path (`upstreams[0].circuit_breaker.cooldown`),
// so an operator can fix the file without guessing. The first error found
// wins; the loader never throws (yaml-cpp's exceptions are converted).
//
// `${VAR}` in any scalar value expands from the environment before the value
// is interpreted; an unset variable is an error; `$$` is a literal `$`.
//
// Where docs/design.md §2 is silent, the loader decides:
// - Positions: a value error points at the value; an unknown or duplicate key
//   at the key; a missing required key at its parent mapping (path = the
//   missing key); an empty value (`admin:`) at its key. Cross-field checks
//   (`base <= max`) point at whichever of the two was written, the first
//   preferred. Duplicate YAML keys are errors (yaml-cpp accepts them).
// - Types: every scalar is text until converted, so `"5"` and `5` are the
//   same; an empty value is never "absent", it is a type error. Booleans are
//   true/false only (not yes/on). Unknown keys suggest a close match.
// - `${...}`: names are [A-Za-z_][A-Za-z0-9_]*; a `$` not followed by `$` or
//   `{` is literal; a set-but-empty variable is fine. Keys are not expanded.
// - Errors never show an expanded value (it may be an API key): a value that
//   came from `${VAR}` is quoted as written (`"${OPENAI_URL}"`), a quoted part
//   of it is `"<redacted>"`, and any URL's credentials (`user:pass@`) are
//   `<redacted>` even when written literally.
// - Names (`upstreams[].name`, `routes[].name`, `pricing[].model`) become
//   metric label values: no control characters (NUL included), and not
//   `none` or `other`, which sluice's own labels use.
// - `admin`: an address, or `{address, allowed_hosts: [names]}`.
// - Warnings (Config::warnings), not errors: a route whose path_prefix starts
//   with the same segment as its upstream url's path (`/v1` + `/v1/...` sends
//   `/v1/v1/...`, since the url path is prepended to every request path).
// - Durations: h/m/s/ms, may be combined largest-first ("1m30s"), at most
//   10 years, whole milliseconds. Zero is allowed where it means "off" or
//   "no wait" (drain_timeout, first_byte_timeout, idle_timeout, finish_grace,
//   backoff, the `limits` timeouts) and rejected for connect_timeout, failure_rate.window,
//   cooldown, max_cooldown and the budget's default/max.
// - Counts: consecutive_failures, min_requests, half_open_probes,
//   max_requests and attempts are >= 1; max_pending, max_queue, reserve and
//   budget_percent (<= 100) may be 0.
// - `listen`: a string, or a list whose items are `{address, tls}` or plain
//   address strings. Two listeners on the same non-zero port, or a listener
//   on the admin address, are errors. `routes` and `upstreams` may be absent.
// - URLs: scheme case-insensitive; no credentials (put them in `headers`);
//   port 1..65535. `tls.ca_file` / `tls.sni` may be "" (= the default).
// - `headers`: names must be tokens and unique ignoring case; values may not
//   hold CR/LF/NUL; framing headers (content-length, transfer-encoding,
//   connection, keep-alive, proxy-connection, te, upgrade) are rejected.
// - Outcome lists (`on`, `failure_on`) replace the default list; duplicates
//   are errors. `methods` are upper-cased; duplicates are errors.
// - `pricing` entries need all of model, input and output.
// - `limits` (a contract addition): sizes max_header_bytes 1KiB..16MiB and
//   max_body 1B..1GiB; max_headers 1..10000, max_connections_per_worker
//   1..1000000, http2_max_concurrent_streams 1..100000; the timeouts
//   (header_read_timeout, body_read_timeout, idle_timeout) take 0 = off.
// - Multiple YAML documents in one file are an error; so is a file above
//   kMaxConfigBytes or a directory.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/yaml/field_reader.h"
#include "common/yaml/value_parsers.h"
#include "config/config.h"

namespace sluice::config {

// ConfigError, EnvLookup, parseDuration() and parseSize() are the YAML
// toolkit's (common/yaml/), shared with the filters' section decoders.

/** The process environment (getenv). */
EnvLookup processEnvironment();

/** Either a validated config or the first error found. */
struct LoadResult {
  ConfigPtr config;                  // null on error
  std::optional<ConfigError> error;  // set on error

  bool ok() const { return config != nullptr; }
};

/**
 * The largest config accepted (4 MiB): real configs are a few KiB, and
 * yaml-cpp needs ~60× a file's size in memory and seconds per MiB to parse it.
 */
constexpr uint64_t kMaxConfigBytes = 4ull << 20;

/**
 * Reads, parses and validates the file at `path`; `Config::source_path` = `path`.
 * A directory, an unreadable file or one above kMaxConfigBytes is an error
 * without a position.
 */
LoadResult loadConfigFile(const std::string& path, const EnvLookup& env = processEnvironment());

/**
 * Parses and validates YAML text. `source_name` is used in error messages and
 * as `Config::source_path`.
 */
LoadResult loadConfigString(const std::string& yaml_text, const std::string& source_name,
                            const EnvLookup& env = processEnvironment());

/** Parses "host:port" or "[v6]:port" (port 0..65535; 0 = pick an ephemeral port). */
std::optional<SocketAddress> parseSocketAddress(std::string_view text,
                                                std::string* error = nullptr);

/**
 * Parses an upstream URL: `http://` or `https://`, a host, an optional port
 * (1..65535; default from the scheme) and an optional base path. Credentials,
 * a query or a fragment are rejected. The host is lower-cased and trailing
 * slashes are dropped from the base path.
 */
std::optional<UpstreamUrl> parseUpstreamUrl(std::string_view text, std::string* error = nullptr);

/**
 * Parses a `shared_state.redis` URL: `redis://[[user]:password@]host[:port][/db]`
 * (port 6379 by default, db 0..15 by default 0); `rediss://` is the same over
 * TLS (`shared_state.tls`). Error messages never contain the password.
 */
std::optional<RedisUrl> parseRedisUrl(std::string_view text, std::string* error = nullptr);

}  // namespace sluice::config
