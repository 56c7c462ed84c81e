#pragma once

// Text -> value helpers shared by the config loader's decoders: character
// classes, integers, hosts, `${VAR}` expansion and the redaction that keeps
// expanded values (which may be secrets) out of error messages.
//
// The public parsers built on them (parseDuration, parseSize,
// parseSocketAddress, parseUpstreamUrl, parseRedisUrl) are declared in
// config/loader.h and defined in config/value_parsers.cc. Nothing here knows
// YAML; config/field_reader.h reads YAML nodes with these.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/loader.h"

namespace sluice::config::detail {

inline constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();
inline constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

inline bool isDigit(char c) { return c >= '0' && c <= '9'; }
inline bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/** An RFC 9110 token (header names, methods): one or more tchars. */
bool isToken(std::string_view s);

/** `s` in double quotes, as error messages show values. */
std::string inQuotes(std::string_view s);

/** ASCII upper case (methods). */
std::string toUpper(std::string_view s);

/** A decimal integer with an optional leading '-'; nullopt if malformed or out of int64. */
std::optional<int64_t> parseInt64(std::string_view s);

/** Letters, digits, '-', '.', '_' (not empty). */
bool isHostname(std::string_view s);

/** An IPv6 address without brackets, optionally with a zone (`fe80::1%eth0`). */
bool isIpv6Literal(std::string_view s);

/** "1.5", "1e+06": the shortest form of a number for messages. */
std::string formatNumber(double v);

/** The Levenshtein distance between `a` and `b` (for "did you mean" hints). */
size_t editDistance(std::string_view a, std::string_view b);

/** A `${NAME}` expansion: the variable and the value it had. */
using Expansion = std::pair<std::string, std::string>;

/**
 * Expands ${VAR} and $$ in `in` into `out`. A '$' followed by anything else is
 * kept as is. Every variable expanded is appended to `used` (when given). On
 * failure (unset variable, bad name, unterminated `${`) returns false and says
 * why in `why`.
 */
bool expandEnv(std::string_view in, const EnvLookup& env, std::string& out, std::string& why,
               std::vector<Expansion>* used = nullptr);

/**
 * Error messages show values as written in the file. A value that came from
 * ${VAR} may be a secret (an API key, a URL with credentials), so it is never
 * echoed: `message` is about a scalar written as `raw` that expanded to
 * `expanded` (both null when the message is not about one scalar);
 * `expansions` are every ${VAR} expanded in the file so far. URL credentials
 * (`user:pass@`) are redacted too.
 */
std::string redactExpansions(std::string message, const std::string* raw,
                             const std::string* expanded, const std::vector<Expansion>& expansions);

}  // namespace sluice::config::detail
