#include "filters/spend/pricing.h"

#include <fnmatch.h>

#include <algorithm>

namespace sluice {

namespace {
constexpr double kTokensPerMillion = 1e6;
}  // namespace

double ModelPrice::inputUsd(uint64_t tokens) const {
  return static_cast<double>(tokens) * input_usd_per_mtok / kTokensPerMillion;
}

double ModelPrice::outputUsd(uint64_t tokens) const {
  return static_cast<double>(tokens) * output_usd_per_mtok / kTokensPerMillion;
}

PriceTable::PriceTable(const std::vector<config::PriceConfig>& pricing)
    : other_{std::string(kOtherLabel), 0, 0} {
  entries_.reserve(pricing.size());
  for (const config::PriceConfig& p : pricing) {
    entries_.push_back(ModelPrice{p.model_glob, p.input_usd_per_mtok, p.output_usd_per_mtok});
  }
}

const ModelPrice& PriceTable::match(const std::string& model) const {
  for (const ModelPrice& entry : entries_) {
    // No FNM_PATHNAME / FNM_PERIOD: model names are not paths.
    if (fnmatch(entry.label.c_str(), model.c_str(), 0) == 0) return entry;
  }
  return other_;
}

std::vector<std::string_view> PriceTable::labels() const {
  std::vector<std::string_view> out;
  out.reserve(entries_.size() + 1);
  for (const ModelPrice& entry : entries_) {
    if (std::find(out.begin(), out.end(), entry.label) == out.end()) out.push_back(entry.label);
  }
  if (std::find(out.begin(), out.end(), kOtherLabel) == out.end()) out.push_back(kOtherLabel);
  return out;
}

}  // namespace sluice
