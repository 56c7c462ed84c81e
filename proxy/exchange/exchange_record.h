#pragma once

// What a request leaves behind for the access log (docs/design.md §7): the
// facts the Exchange and its filters gather as it runs — time to first
// byte, retry causes, bytes out, the model and tokens the spend meter read,
// its run, its JSON-RPC call, its cancel reason (first cause wins) — that
// no other part needs to decide anything. One per Exchange, held by value;
// the filters write to it as their RequestRecord (filters/filter.h); the
// access log line is filled from it once, when the request ends. (Read
// back: the JSON-RPC id, where sluice's own answers to an MCP call go, and
// the cancel reason.)

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "filters/filter.h"
#include "proxy/observability/access_log.h"

namespace sluice {

class ExchangeRecord final : public RequestRecord {
 public:
  /** The first response byte went to the client at `at`; later calls keep the first. */
  bool noteFirstByte(MonotonicTime at);
  std::optional<MonotonicTime> firstByteAt() const { return first_byte_at_; }

  /** A retry or spill-over, by its sluice_retries_total `cause`. */
  void noteRetry(std::string cause) { retry_causes_.push_back(std::move(cause)); }
  /** Response body bytes handed to the client (sluice's own answers included). */
  void addBytesOut(uint64_t n) { bytes_out_ += n; }

  /** One attempt's tokens and spend (summed); its model, when it names one, replaces the last. */
  void addUsage(const AttemptUsage& usage) override;
  void setRun(std::string_view run_id, std::string_view parent_run_id) override;
  void setJsonRpc(std::string_view method, std::optional<std::string_view> id,
                  std::string_view tool) override;
  /** The JSON-RPC id of an MCP request as JSON text; nullopt for a notification or none. */
  const std::optional<std::string>& jsonRpcId() const { return jsonrpc_id_; }

  /** The request is cancelled for `reason`, unless a first cause was noted already. */
  void noteCancel(CancelReason reason) {
    if (!cancel_reason_) cancel_reason_ = reason;
  }
  std::optional<CancelReason> cancelReason() const override { return cancel_reason_; }

  /** Fills the fields of `r` this record holds (`start`: when the request head arrived). */
  void fill(AccessRecord& r, MonotonicTime start) const;

 private:
  std::optional<MonotonicTime> first_byte_at_;
  std::vector<std::string> retry_causes_;
  uint64_t bytes_out_ = 0;
  std::string model_;   // the last attempt's model, as the spend filter read it
  AttemptUsage usage_;  // summed over attempts (its `model` unused: see model_)
  std::string run_id_;
  std::string parent_run_id_;
  std::string jsonrpc_method_;
  std::optional<std::string> jsonrpc_id_;
  std::string tool_;
  std::optional<CancelReason> cancel_reason_;
};

}  // namespace sluice
