// Decodes `runs`.

#include "filters/runs/runs_config.h"

namespace sluice::config {

using detail::Field;

RunsConfig decodeRuns(detail::FieldReader& reader, const Field& f) {
  RunsConfig r;
  reader.decodeMap(
      f, {
             {"header", [&](const Field& v) { r.header = reader.headerName(v); }},
             {"parent_header", [&](const Field& v) { r.parent_header = reader.headerName(v); }},
             {"budget", [&](const Field& v) { r.budget = reader.duration(v, false); }},
             {"idle_expiry", [&](const Field& v) { r.idle_expiry = reader.duration(v, false); }},
             {"tombstone", [&](const Field& v) { r.tombstone = reader.duration(v, false); }},
             {"max_runs", [&](const Field& v) { r.max_runs = reader.u32Max(v, 16, 10'000'000); }},
             {"max_usd", [&](const Field& v) { r.max_usd = reader.number(v, 0, 1e9); }},
             {"cancel_token",
              [&](const Field& v) {
                r.cancel_token = reader.scalar(v, "a token");
                // A short token is guessable: the listeners are open to every client.
                if (r.cancel_token.size() < 16) reader.fail(v, "must be at least 16 characters");
              }},
         });
  return r;
}

}  // namespace sluice::config
