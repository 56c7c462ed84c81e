#pragma once

// Renders a loaded Config back out: as JSON for the admin `/config` endpoint,
// and the duration/size formatting shared with the loader's messages.
//
// The JSON uses the YAML schema's key names (DESIGN.md §2), so what an
// operator reads on `/config` maps one-to-one onto the file they wrote,
// with every default filled in. Secrets are never rendered.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

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

/**
 * A duration in the loader's syntax, as DESIGN.md writes them: whole seconds
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

/** The `limits` section, every key spelled out. */
nlohmann::json limitsToJson(const LimitsConfig& limits);

/** The value of a retry `on` / circuit `failure_on` list, as written in YAML. */
nlohmann::json outcomeSetToJson(const OutcomeSet& set);

}  // namespace sluice::config
