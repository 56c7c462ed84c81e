// The config loader: YAML text through loadConfigString (yaml-cpp, strict
// schema, durations, sizes, URLs, addresses, `${VAR}` expansion — only
// FUZZ_SET is set, any other variable must be a clean error), then the
// redacted JSON rendering the admin /config endpoint serves for a config
// that loaded, or the file:line:column error text for one that did not.
// Seeds: fuzz/corpus/config_loader/ (config/examples and small variants).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "config/loader.h"
#include "config/render.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "FUZZ_SET") return std::string("sk-fuzz");
    return std::nullopt;
  };
  const sluice::config::LoadResult result =
      sluice::config::loadConfigString(text, "fuzz.yaml", env);
  if (result.ok()) {
    // As the admin /config endpoint renders it (invalid UTF-8 replaced, never thrown).
    (void)sluice::config::toRedactedJson(*result.config)
        .dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  } else if (result.error) {
    (void)result.error->toString();
  }
  if (size <= 256) {
    (void)sluice::config::parseDuration(text);
    (void)sluice::config::parseSize(text);
    (void)sluice::config::parseSocketAddress(text);
    (void)sluice::config::parseUpstreamUrl(text);
  }
  return 0;
}
