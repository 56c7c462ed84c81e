#include "proxy/exchange/delivery_hold.h"

#include <array>
#include <string_view>
#include <utility>

namespace sluice {

DeliveryHold::DeliveryHold(ConfigSnapshotPtr runtime, std::unique_ptr<ReadReceipt> receipt,
                           const AccessRecord* record, AccessLogBuffer* log)
    : runtime_(std::move(runtime)), receipt_(std::move(receipt)), log_(log) {
  if (record == nullptr || log_ == nullptr) return;
  record_ = *record;
  AccessRecord& r = *record_;
  // One allocation for every string the record shows, then re-pointed.
  const std::array<std::string_view*, 13> views = {
      &r.request_id,    &r.trace_id,       &r.route,    &r.upstream, &r.endpoint,
      &r.method,        &r.path,           &r.protocol, &r.model,    &r.run_id,
      &r.parent_run_id, &r.jsonrpc_method, &r.tool};
  size_t total = 0;
  for (const std::string_view* v : views) total += v->size();
  strings_.reserve(total);
  std::array<size_t, views.size()> at{};
  for (size_t i = 0; i < views.size(); ++i) {
    at[i] = strings_.size();
    strings_.append(*views[i]);
  }
  for (size_t i = 0; i < views.size(); ++i) {
    *views[i] = std::string_view(strings_).substr(at[i], views[i]->size());
  }
  retry_causes_.assign(r.retry_causes.begin(), r.retry_causes.end());
  r.retry_causes = retry_causes_;
}

DeliveryHold::~DeliveryHold() { DeliveryHold::settle(0); }

void DeliveryHold::settle(uint64_t unread_body_bytes, std::optional<CancelReason> unread_reason) {
  if (!receipt_) return;
  const std::unique_ptr<ReadReceipt> receipt = std::move(receipt_);
  const AttemptUsage usage = receipt->settle(unread_body_bytes, unread_reason);
  if (!record_) return;
  AccessRecord& r = *record_;
  if (!usage.model.empty()) r.model = usage.model;  // the receipt's, alive until we return
  r.input_tokens += usage.input_tokens;
  r.output_tokens += usage.output_tokens;
  r.spend_usd += usage.spend_usd;
  r.leaked_usd += usage.leaked_usd;
  // The reason the metrics booked the leak under (SpendReceipt::settle).
  if (usage.leaked_usd > 0 && unread_body_bytes > 0 && !r.cancel_reason) {
    r.cancel_reason = unread_reason.value_or(CancelReason::ClientAbandoned);
  }
  log_->append(r);
  record_.reset();
}

}  // namespace sluice
