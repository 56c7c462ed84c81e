#pragma once

// Text -> value helpers of the YAML toolkit (common/yaml/): durations, sizes,
// character classes, integers, `${VAR}` expansion and the redaction that
// keeps expanded values (which may be secrets) out of error messages.
//
// Nothing here knows YAML; common/yaml/field_reader.h reads YAML nodes with
// these. The toolkit sits below filters/ so that each filter can decode its
// own config section (filters/*/…_config.cc) and config/ can compose them.
// Its names are in `sluice::config`: the namespace of the configuration
// vocabulary, whichever folder declares it. The parsers for sluice's own
// address and URL syntaxes are config/'s (config/loader.h).

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::config {

/** Every duration in the config: whole milliseconds. */
using Duration = std::chrono::milliseconds;

/** Resolves `${NAME}`: the variable's value, or nullopt when it is unset. */
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/**
 * Parses a duration: one or more `<number><unit>` parts with units h, m, s, ms
 * in decreasing order ("250ms", "1.5s", "5m", "1h30m", "0s"). A bare number is
 * rejected (no unit to guess), as are negative values and sub-millisecond
 * precision. On failure returns nullopt and, if `error` is given, says why.
 */
std::optional<Duration> parseDuration(std::string_view text, std::string* error = nullptr);

/**
 * Parses a byte size: a plain integer of bytes, or a number with a unit —
 * B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024), e.g.
 * "8MiB", "1.5KiB", "10MB". The result must be a whole number of bytes.
 */
std::optional<uint64_t> parseSize(std::string_view text, std::string* error = nullptr);

/**
 * A duration in the loader's syntax, as docs/design.md writes them: whole seconds
 * as "0s", "30s", "120s", "3600s"; anything finer in milliseconds ("250ms",
 * "1500ms"). One unit only, so values compare easily. Round-trips through
 * parseDuration().
 */
std::string formatDuration(Duration d);

/**
 * A byte size in the largest binary unit that represents it exactly:
 * "8MiB", "512KiB", "1GiB", "100B". Round-trips through parseSize().
 */
std::string formatSize(uint64_t bytes);

namespace detail {

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

/** "1.5", "1e+06": the shortest form of a number for messages. */
std::string formatNumber(double v);

/** The Levenshtein distance between `a` and `b` (for "did you mean" hints). */
size_t editDistance(std::string_view a, std::string_view b);

/** Sets `*error` (when given) to `message`; returns nullopt, for `return parseError(...)`. */
std::nullopt_t parseError(std::string* error, std::string message);

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

}  // namespace detail
}  // namespace sluice::config
