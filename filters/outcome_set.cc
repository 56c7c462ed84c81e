// OutcomeSet: the status match and the decoder of an outcome list.

#include "filters/outcome_set.h"

#include <algorithm>
#include <optional>
#include <set>

namespace sluice::config {

using detail::Field;
using detail::inQuotes;

bool OutcomeSet::matchesStatus(int status) const {
  if (any_4xx && status >= 400 && status <= 499) return true;
  if (any_5xx && status >= 500 && status <= 599) return true;
  return std::find(statuses.begin(), statuses.end(), status) != statuses.end();
}

OutcomeSet decodeOutcomeSet(detail::FieldReader& reader, const Field& f) {
  OutcomeSet set;
  std::set<std::string> seen;
  for (const Field& item : reader.items(f)) {
    const std::string s = reader.scalar(item, "a status code or outcome name");
    if (!seen.insert(s).second) reader.fail(item, "duplicate entry " + inQuotes(s));
    if (!addOutcome(reader, item, s, set)) {
      reader.fail(
          item,
          "unknown outcome " + inQuotes(s) +
              " (expected a status code 100..599, 4xx, 5xx, connect_error, reset or timeout)");
    }
  }
  return set;
}

bool addOutcome(detail::FieldReader& reader, const Field& item, const std::string& s,
                OutcomeSet& set) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), detail::isDigit)) {
    const std::optional<int64_t> code = detail::parseInt64(s);
    if (!code || *code < 100 || *code > 599) reader.fail(item, "status code must be 100..599");
    set.statuses.push_back(static_cast<int>(*code));
  } else if (s == "4xx") {
    set.any_4xx = true;
  } else if (s == "5xx") {
    set.any_5xx = true;
  } else if (s == "connect_error") {
    set.connect_error = true;
  } else if (s == "reset") {
    set.reset = true;
  } else if (s == "timeout") {
    set.timeout = true;
  } else {
    return false;
  }
  return true;
}

}  // namespace sluice::config
