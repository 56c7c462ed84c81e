#pragma once

// The spend filter (docs/design.md §4 "Leaked spend"): meters every attempt's
// usage as the response streams past (UsageMeter: provider usage where
// reported, estimates otherwise), and when the attempt ends splits its tokens
// and USD into `delivered` (a listening client got them) and `leaked`
// (produced after the client left, abandoned by a retry, a stall or the
// budget, or drained in `finish` mode), attributing leaked USD to the
// Exchange's cancel_reason. It observes only: it never changes the response.
// For a task of a run (FilterCallbacks::runSpend) it also feeds the run's
// spend as the attempt's tokens arrive, a chunk at a time, and corrects it to
// the booked USD when the attempt ends (docs/design.md §9).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "filters/filter.h"
#include "filters/spend/pricing.h"
#include "filters/spend/spend_split.h"
#include "filters/spend/usage_meter.h"

namespace sluice {

/**
 * How an ended attempt counts for spend: drained in `finish` mode (Finished),
 * dropped by sluice — a retry follows or it stalled (Abandoned) —, torn down
 * or broken (Cancelled), else Completed.
 */
AttemptDisposition spendDisposition(const AttemptEnd& end, const AttemptVerdict& verdict);

class SpendFilter final : public StreamFilter {
 public:
  SpendFilter(const PriceTable& prices, RouteMetrics& metrics)
      : prices_(prices), metrics_(metrics) {}

  std::string_view name() const override { return "spend"; }
  FilterStatus decodeComplete(std::string_view body) override;
  Admission beforeAttempt(RequestHead& upstream_request, const AttemptContext& attempt) override;
  FilterStatus encodeHeaders(ResponseHead& response, bool end_stream) override;
  void encodeData(const char* data, size_t len, bool end_stream) override;
  void onAttemptDone(const AttemptEnd& end, const AttemptVerdict& verdict) override;
  void onDestroy() override;

 private:
  /**
   * Books the current attempt's tokens and USD once, then forgets it; an
   * attempt whose whole response went to a still-connected client is handed
   * to the Exchange instead, booked when the client's reading is known.
   */
  void account(const AttemptEnd& end, AttemptDisposition disposition);
  /** Drops the current attempt's meter unbilled, telling the Exchange its model. */
  void forgetAttempt();
  /** Tells the request's run (if any) the current attempt's spend is now `attempt_usd`. */
  void feedRun(double attempt_usd);
  /** The current attempt's spend as metered so far, for its run. */
  void feedRunMetered();

  const PriceTable& prices_;
  RouteMetrics& metrics_;
  std::optional<MeteredRequest> request_;  // (inline: no allocation per request)
  std::unique_ptr<UsageMeter> meter_;      // the attempt in flight
  bool named_model_ = false;               // the record was told a model (addUsage)
  double run_usd_ = 0;                     // the current attempt's spend told to its run
  // What feedRunMetered last priced: a chunk that adds no token is not fed again.
  const ModelPrice* run_price_ = nullptr;
  std::string run_model_;
  uint64_t run_input_ = 0;
  uint64_t run_output_ = 0;
};

}  // namespace sluice
