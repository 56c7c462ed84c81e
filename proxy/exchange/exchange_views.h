#pragma once

// The two views of an Exchange that decide nothing: its access log line
// (AccessRecord, docs/design.md §7) and its row of the admin `/exchanges`
// endpoint (ExchangeSnapshot). Both are read from the Exchange's parts —
// the request and its identity, the route, the last attempt's upstream and
// endpoint, the AttemptRouter's spill-overs, the ExchangeRecord, the
// client's stream — which the Exchange lends in one ExchangeView. Free
// functions: they hold nothing, and a test builds each view without sockets.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/http_message.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/exchange_record.h"
#include "proxy/exchange/exchange_state.h"
#include "proxy/http/request_id.h"
#include "proxy/observability/access_log.h"

namespace sluice {

/** A point-in-time view of an Exchange for the admin `/exchanges` endpoint. */
struct ExchangeSnapshot {
  uint64_t id = 0;
  std::string request_id;
  std::string route;
  std::string upstream;  // the current (or last) attempt's; the route's before the first
  std::string endpoint;  // the current (or last) attempt's; "" before the first
  std::string method;
  std::string path;
  std::string state;
  std::string cancel_reason;  // "" while none
  uint32_t attempts = 0;
  uint32_t fallbacks = 0;
  double age_seconds = 0;
  double budget_left_seconds = -1;  // -1 = unbounded
  bool client_attached = true;
  bool upstream_paused = false;  // backpressure: a slow client holds the upstream
  size_t downstream_buffered_bytes = 0;
  uint64_t response_bytes = 0;
};

/** What both views read of an Exchange, lent by it for the call. */
struct ExchangeView {
  uint64_t id = 0;
  const RequestHead& request;
  const RequestIdentity& identity;
  const RouteRuntime& route;
  const UpstreamRuntime* upstream = nullptr;  // the last attempt's; null before the first
  const EndpointRuntime* endpoint = nullptr;  // likewise
  const ExchangeRecord& record;
  ExchangeState state = ExchangeState::Queued;
  MonotonicTime start;
  MonotonicTime deadline = MonotonicTime::max();  // max: unbounded
  uint32_t attempts_started = 0;
  uint32_t attempts_sent = 0;
  uint32_t fallbacks = 0;
  uint64_t bytes_in = 0;                     // request body bytes received
  uint64_t response_bytes = 0;               // response body bytes read from the upstream
  const DownstreamStream* client = nullptr;  // null: the client left
  bool upstream_paused = false;
};

/**
 * The access log line of a request that ended with `status` at `now`
 * (`wall_now`: the same instant on the wall clock). Its string fields point
 * into `view`'s parts: valid while they are.
 */
AccessRecord accessRecordOf(const ExchangeView& view, int status, MonotonicTime now,
                            SystemTime wall_now);

/** The `/exchanges` row of `view` at `now`. */
ExchangeSnapshot snapshotOf(const ExchangeView& view, MonotonicTime now);

}  // namespace sluice
