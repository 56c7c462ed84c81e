// Decodes `routes[].retry`.

#include "filters/retry/retry_config.h"

#include <optional>

namespace sluice::config {

using detail::Field;

RetryConfig decodeRetry(detail::FieldReader& reader, const Field& f) {
  RetryConfig r;
  std::optional<Field> base_field, max_field;
  reader.decodeMap(f, {
                          {"attempts", [&](const Field& v) { r.attempts = reader.u32(v, 1); }},
                          {"on", [&](const Field& v) { r.on = decodeOutcomeSet(reader, v); }},
                          {"backoff",
                           [&](const Field& v) {
                             reader.decodeMap(v, {
                                                     {"base",
                                                      [&](const Field& x) {
                                                        r.backoff.base = reader.duration(x, true);
                                                        base_field.emplace(x);
                                                      }},
                                                     {"max",
                                                      [&](const Field& x) {
                                                        r.backoff.max = reader.duration(x, true);
                                                        max_field.emplace(x);
                                                      }},
                                                 });
                           }},
                          {"respect_retry_after",
                           [&](const Field& v) { r.respect_retry_after = reader.boolean(v); }},
                          {"idempotent",
                           [&](const Field& v) {
                             r.idempotent = reader.oneOf<IdempotencyMode>(
                                 v, {{"auto", IdempotencyMode::Auto},
                                     {"always", IdempotencyMode::Always},
                                     {"never", IdempotencyMode::Never}});
                           }},
                          {"budget_percent",
                           [&](const Field& v) {
                             r.budget_percent = static_cast<uint32_t>(reader.integer(v, 0, 100));
                           }},
                          {"max_body", [&](const Field& v) { r.max_body = reader.size(v); }},
                      });
  reader.requireOrdered(r.backoff.base, r.backoff.max, base_field, max_field, "backoff.base",
                        "backoff.max");
  return r;
}

}  // namespace sluice::config
