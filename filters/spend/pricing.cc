#include "filters/spend/pricing.h"

#include <fnmatch.h>

#include <algorithm>
#include <string_view>

namespace sluice {

namespace {
constexpr double kTokensPerMillion = 1e6;

// ASCII without NUL: fnmatch(3) reads C strings, and decodes multibyte
// text in a UTF-8 locale.
bool isAscii(std::string_view s) {
  for (const char c : s) {
    if (c == '\0' || static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}
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
    const std::string_view glob = p.model_glob;
    const size_t meta = glob.find_first_of("*?[\\");
    GlobKind kind = GlobKind::Glob;
    if (isAscii(glob) && meta == std::string_view::npos) {
      kind = GlobKind::Literal;
    } else if (isAscii(glob) && meta == glob.size() - 1 && glob.back() == '*') {
      kind = GlobKind::Prefix;
    }
    kinds_.push_back(kind);
  }
}

const ModelPrice& PriceTable::match(const std::string& model) const {
  // A name or a name and '*' is compared, not fnmatch()ed (~300 instructions
  // per answer, PROFILE.md seventh round): for ASCII text, what fnmatch says.
  const bool ascii = isAscii(model);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const ModelPrice& entry = entries_[i];
    const std::string_view glob = entry.label;
    if (ascii && kinds_[i] == GlobKind::Literal) {
      if (model == glob) return entry;
    } else if (ascii && kinds_[i] == GlobKind::Prefix) {
      if (std::string_view(model).starts_with(glob.substr(0, glob.size() - 1))) return entry;
    } else if (fnmatch(entry.label.c_str(), model.c_str(), 0) == 0) {
      // No FNM_PATHNAME / FNM_PERIOD: model names are not paths.
      return entry;
    }
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
