// Decodes one `pricing[]` entry.

#include "filters/spend/price_config.h"

#include <limits>

namespace sluice::config {

using detail::Field;

PriceConfig decodePrice(detail::FieldReader& reader, const Field& f) {
  PriceConfig p;
  const double kNoMax = std::numeric_limits<double>::max();
  reader.decodeMap(
      f,
      {
          {"model", [&](const Field& v) { p.model_glob = reader.labelName(v); }},
          {"input", [&](const Field& v) { p.input_usd_per_mtok = reader.number(v, 0, kNoMax); }},
          {"output", [&](const Field& v) { p.output_usd_per_mtok = reader.number(v, 0, kNoMax); }},
      },
      {"model", "input", "output"});
  return p;
}

}  // namespace sluice::config
