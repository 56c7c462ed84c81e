#pragma once

// An ended exchange whose spend waits for the client's reading
// (docs/reference/metrics.md, "Delivered means read"): "delivered" means read
// by the client, not written to its socket. The Exchange builds it when its
// response (whole, or cut by sluice) went to a client that is still
// connected; the client's connection keeps it (HeldDelivery) until it learns
// how much of the response was read and settles it: the spend is booked
// then, and the request's access log line is written then. At most one per
// HTTP/1.1 connection; it lives no longer than its connection.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "filters/filter.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/observability/access_log.h"

namespace sluice {

class DeliveryHold final : public HeldDelivery {
 public:
  /**
   * `record` (may be null: access log off) is copied; `log` receives it
   * when settled. `runtime` is pinned: the receipt books into its metrics.
   */
  DeliveryHold(ConfigSnapshotPtr runtime, std::unique_ptr<ReadReceipt> receipt,
               const AccessRecord* record, AccessLogBuffer* log);
  /** Settles as read if nothing settled it (a connection torn down quietly). */
  ~DeliveryHold() override;
  DeliveryHold(const DeliveryHold&) = delete;
  DeliveryHold& operator=(const DeliveryHold&) = delete;

  void settle(uint64_t unread_body_bytes,
              std::optional<CancelReason> unread_reason = std::nullopt) override;

 private:
  ConfigSnapshotPtr runtime_;
  std::unique_ptr<ReadReceipt> receipt_;
  AccessLogBuffer* log_ = nullptr;
  // The access log record, owning what its views pointed at.
  std::optional<AccessRecord> record_;
  std::string strings_;
  std::vector<std::string> retry_causes_;
};

}  // namespace sluice
