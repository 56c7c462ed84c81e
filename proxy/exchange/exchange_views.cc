#include "proxy/exchange/exchange_views.h"

#include <chrono>
#include <string_view>

namespace sluice {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Who answered (or failed last): the last attempt's upstream, the route's before the first.
const UpstreamRuntime* answeringUpstream(const ExchangeView& view) {
  return view.upstream != nullptr ? view.upstream : view.route.upstream;
}

}  // namespace

AccessRecord accessRecordOf(const ExchangeView& view, int status, MonotonicTime now,
                            SystemTime wall_now) {
  const auto age = now - view.start;
  AccessRecord r;
  r.start = wall_now - std::chrono::duration_cast<SystemTime::duration>(age);
  r.request_id = view.identity.request_id;
  r.trace_id = view.identity.trace_id;
  r.route = view.route.name();
  const UpstreamRuntime* upstream = answeringUpstream(view);
  r.upstream = upstream != nullptr ? std::string_view(upstream->name()) : "none";
  if (view.endpoint != nullptr) r.endpoint = view.endpoint->name();
  r.fallbacks = view.fallbacks;
  r.method = view.request.method;
  r.path = view.request.pathOnly();
  r.protocol = view.request.version_major == 2   ? "HTTP/2"
               : view.request.version_minor == 0 ? "HTTP/1.0"
                                                 : "HTTP/1.1";
  r.status = status;
  r.attempts = view.attempts_sent;
  r.duration_ms = std::chrono::duration<double, std::milli>(age).count();
  r.bytes_in = view.bytes_in;
  view.record.fill(r, view.start);
  return r;
}

ExchangeSnapshot snapshotOf(const ExchangeView& view, MonotonicTime now) {
  ExchangeSnapshot s;
  s.id = view.id;
  s.request_id = view.identity.request_id;
  s.route = view.route.name();
  const UpstreamRuntime* upstream = answeringUpstream(view);
  s.upstream = upstream != nullptr ? upstream->name() : "none";
  if (view.endpoint != nullptr) s.endpoint = view.endpoint->name();
  s.fallbacks = view.fallbacks;
  s.method = view.request.method;
  s.path = std::string(view.request.pathOnly());
  s.state = std::string(toString(view.state));
  const std::optional<CancelReason> reason = view.record.cancelReason();
  s.cancel_reason = reason ? std::string(toString(*reason)) : "";
  s.attempts = view.attempts_started;
  s.age_seconds = seconds(now - view.start);
  s.budget_left_seconds = view.deadline == MonotonicTime::max() ? -1 : seconds(view.deadline - now);
  s.client_attached = view.client != nullptr;
  s.upstream_paused = view.upstream_paused;
  s.downstream_buffered_bytes = view.client != nullptr ? view.client->bufferedBytes() : 0;
  s.response_bytes = view.response_bytes;
  return s;
}

}  // namespace sluice
