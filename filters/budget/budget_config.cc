// Decodes `routes[].budget`.

#include "filters/budget/budget_config.h"

#include <optional>

namespace sluice::config {

using detail::Field;

BudgetConfig decodeBudget(detail::FieldReader& reader, const Field& f) {
  BudgetConfig b;
  std::optional<Field> default_field, max_field;
  reader.decodeMap(f, {
                          {"header", [&](const Field& v) { b.header = reader.headerName(v); }},
                          {"default",
                           [&](const Field& v) {
                             b.default_budget = reader.duration(v, false);
                             default_field.emplace(v);
                           }},
                          {"max",
                           [&](const Field& v) {
                             b.max = reader.duration(v, false);
                             max_field.emplace(v);
                           }},
                          {"propagate", [&](const Field& v) { b.propagate = reader.boolean(v); }},
                      });
  reader.requireOrdered(b.default_budget, b.max, default_field, max_field, "budget.default",
                        "budget.max");
  return b;
}

}  // namespace sluice::config
