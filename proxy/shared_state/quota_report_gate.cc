#include "proxy/shared_state/quota_report_gate.h"

#include <algorithm>

namespace sluice {

QuotaReportGate::Counters& QuotaReportGate::entryLocked(const std::string& key) {
  if (const auto it = known_.find(key); it != known_.end()) return it->second;
  if (known_.size() >= kMaxKeys) known_.clear();
  return known_[key];
}

void QuotaReportGate::learned(const std::string& key, int64_t avail,
                              std::optional<MonotonicTime> reset_at, MonotonicTime now,
                              Counter counter) {
  std::lock_guard lock(mu_);
  Known& k = entryLocked(key)[static_cast<size_t>(counter)];
  if (!k.seen) k.reported_at = now;
  k.seen = true;
  k.avail = avail;
  k.reset_at = reset_at;
}

bool QuotaReportGate::shouldReport(const std::string& key, int64_t remaining, int64_t unanswered,
                                   std::optional<MonotonicTime> reset_at, MonotonicTime now,
                                   Counter counter) {
  const int64_t fresh = std::max<int64_t>(remaining - unanswered, 0);
  std::lock_guard lock(mu_);
  Known& k = entryLocked(key)[static_cast<size_t>(counter)];
  if (!k.seen) {
    k = Known{true, fresh, reset_at, now};
    return true;
  }
  const bool window_unknown = !k.reset_at || now >= *k.reset_at;
  const bool later_window = reset_at && k.reset_at && *reset_at > *k.reset_at + kSameWindow;
  if (window_unknown || later_window) {
    k = Known{true, fresh, reset_at, now};
    return true;
  }
  // Tokens have no reserve: the fleet admits while a request's need fits.
  const int64_t reserve = counter == Counter::kRequests ? reserve_ : 0;
  const int64_t slack = fresh - unanswered > reserve + unanswered ? unanswered : 0;
  if (now - k.reported_at < refresh_ && fresh + slack >= k.avail) return false;
  k.avail = std::min(k.avail, fresh);
  if (reset_at && *reset_at > *k.reset_at) k.reset_at = reset_at;
  k.reported_at = now;
  return true;
}

}  // namespace sluice
