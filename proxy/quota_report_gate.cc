#include "proxy/quota_report_gate.h"

#include <algorithm>

namespace sluice {

void QuotaReportGate::learned(const std::string& key, int64_t avail,
                              std::optional<MonotonicTime> reset_at, MonotonicTime now) {
  std::lock_guard lock(mu_);
  if (known_.size() >= kMaxKeys && known_.count(key) == 0) known_.clear();
  const auto [it, inserted] = known_.try_emplace(key);
  Known& k = it->second;
  if (inserted) k.reported_at = now;
  k.avail = avail;
  k.reset_at = reset_at;
}

bool QuotaReportGate::shouldReport(const std::string& key, int64_t remaining, int64_t unanswered,
                                   std::optional<MonotonicTime> reset_at, MonotonicTime now) {
  const int64_t fresh = std::max<int64_t>(remaining - unanswered, 0);
  std::lock_guard lock(mu_);
  const auto it = known_.find(key);
  if (it == known_.end()) {
    if (known_.size() >= kMaxKeys) known_.clear();
    known_.emplace(key, Known{fresh, reset_at, now});
    return true;
  }
  Known& k = it->second;
  const bool window_unknown = !k.reset_at || now >= *k.reset_at;
  const bool later_window = reset_at && k.reset_at && *reset_at > *k.reset_at + kSameWindow;
  if (window_unknown || later_window) {
    k = Known{fresh, reset_at, now};
    return true;
  }
  const int64_t slack = fresh - unanswered > reserve_ + unanswered ? unanswered : 0;
  if (now - k.reported_at < refresh_ && fresh + slack >= k.avail) return false;
  k.avail = std::min(k.avail, fresh);
  if (reset_at && *reset_at > *k.reset_at) k.reset_at = reset_at;
  k.reported_at = now;
  return true;
}

}  // namespace sluice
