#pragma once

// Renders a loaded Config back out as JSON for the admin `/config` endpoint.
// Durations and sizes are written by formatDuration() / formatSize()
// (common/yaml/value_parsers.h), the loader's messages' syntax.
//
// The JSON uses the YAML schema's key names (docs/design.md §2), so what an
// operator reads on `/config` maps one-to-one onto the file they wrote,
// with every default filled in. Secrets are never rendered.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/yaml/value_parsers.h"
#include "config/config.h"

namespace sluice::config {

/**
 * The running config as JSON: every key of the schema, durations as strings
 * ("2s", "250ms"), sizes as strings ("8MiB"). Every upstream `headers` value
 * is replaced by "<redacted>" because those values hold API keys; header
 * names are kept. `listen` is always rendered as a list of
 * `{address, tls}`, `admin` as `{address, allowed_hosts}` and `rate_limit`
 * as null when throttling is off.
 */
nlohmann::json toRedactedJson(const Config& config);

/** The `limits` section, every key spelled out. */
nlohmann::json limitsToJson(const LimitsConfig& limits);

/** The `access_log` section: {"path": "off" | "stdout" | FILE, "format": "json"}. */
nlohmann::json accessLogToJson(const AccessLogConfig& access_log);

/** The value of a retry `on` / circuit `failure_on` list, as written in YAML. */
nlohmann::json outcomeSetToJson(const OutcomeSet& set);

}  // namespace sluice::config
