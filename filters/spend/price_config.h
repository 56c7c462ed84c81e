#pragma once

// `pricing[]` (docs/design.md §2, §4 "Leaked spend"): what a model's tokens cost, for the
// spend filter's meter; and the YAML decoder of one entry. config/config.h
// keeps the list in Config.

#include <string>

#include "common/yaml/field_reader.h"

namespace sluice::config {

/** One `pricing[]` entry: USD per million tokens for models matching a glob. */
struct PriceConfig {
  std::string model_glob;
  double input_usd_per_mtok = 0;
  double output_usd_per_mtok = 0;
};

/**
 * Decodes one `{model, input, output}` entry, all three required: the model
 * glob becomes a metric label value; the prices are not negative.
 */
PriceConfig decodePrice(detail::FieldReader& reader, const detail::Field& f);

}  // namespace sluice::config
