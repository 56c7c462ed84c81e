#pragma once

// Model pricing for the spend meter (docs/design.md §2 `pricing`, §4 metrics).
//
// A PriceTable is built once from the config's `pricing` list and shared
// read-only by every worker. `match()` maps the model a request named to the
// first entry whose shell glob (`*`, `?`, `[...]`, via fnmatch(3)) matches it,
// or to the built-in `other` entry (price 0) when none does.
//
// The entry's `label` is what goes into the `model` label of the spend and
// token metrics: the configured pattern string, never the raw model name, so
// label cardinality is bounded by the config (patterns + "other") no matter
// what models clients ask for.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "filters/spend/price_config.h"

namespace sluice {

/** The price of one matched model family; USD per million tokens. */
struct ModelPrice {
  /** The metric label: the matching glob as configured, or "other". */
  std::string label;
  double input_usd_per_mtok = 0;
  double output_usd_per_mtok = 0;

  /** USD for `tokens` input tokens at this price. */
  double inputUsd(uint64_t tokens) const;
  /** USD for `tokens` output tokens at this price. */
  double outputUsd(uint64_t tokens) const;
};

class PriceTable {
 public:
  /** The label (and zero price) used when no pattern matches. */
  static constexpr std::string_view kOtherLabel = "other";

  /** An empty table: every model is `other`. */
  PriceTable() : PriceTable(std::vector<config::PriceConfig>{}) {}
  /** Entries keep their config order; the first match wins. */
  explicit PriceTable(const std::vector<config::PriceConfig>& pricing);

  /**
   * The first entry whose glob matches `model` (case-sensitive, `*` also
   * matches `/` so "openai/gpt-4o" style names work), else the `other` entry.
   * An empty (unknown) model only matches patterns that match "" such as "*".
   * The reference stays valid for the table's lifetime. Thread-safe.
   */
  const ModelPrice& match(const std::string& model) const;

  /**
   * Every label match() can return, in config order with "other" last and
   * duplicates removed: lets callers create their metric series up front.
   */
  std::vector<std::string_view> labels() const;

  /** The configured entries (without `other`). */
  const std::vector<ModelPrice>& entries() const { return entries_; }

 private:
  /** How an entry's glob is matched: most are a name or a name and a '*'. */
  enum class GlobKind : uint8_t {
    Literal,  // no '*', '?', '[' or '\\': equality
    Prefix,   // such a name and one trailing '*': a prefix
    Glob,     // anything else: fnmatch(3)
  };

  std::vector<ModelPrice> entries_;
  std::vector<GlobKind> kinds_;  // one per entry
  ModelPrice other_;
};

}  // namespace sluice
