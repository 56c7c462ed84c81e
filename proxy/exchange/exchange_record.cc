#include "proxy/exchange/exchange_record.h"

namespace sluice {

bool ExchangeRecord::noteFirstByte(MonotonicTime at) {
  if (first_byte_at_) return false;
  first_byte_at_ = at;
  return true;
}

void ExchangeRecord::addUsage(const AttemptUsage& usage) {
  if (!usage.model.empty()) model_ = std::string(usage.model);
  usage_.input_tokens += usage.input_tokens;
  usage_.output_tokens += usage.output_tokens;
  usage_.spend_usd += usage.spend_usd;
  usage_.leaked_usd += usage.leaked_usd;
}

void ExchangeRecord::setRun(std::string_view run_id, std::string_view parent_run_id) {
  // (Appended in place: cheaper than a temporary's move or a general assign.)
  run_id_.clear();
  run_id_.append(run_id.data(), run_id.size());
  parent_run_id_.clear();
  if (!parent_run_id.empty()) parent_run_id_.append(parent_run_id.data(), parent_run_id.size());
}

void ExchangeRecord::setJsonRpc(std::string_view method, std::optional<std::string_view> id,
                                std::string_view tool) {
  jsonrpc_method_ = std::string(method);
  jsonrpc_id_ = id ? std::optional<std::string>(std::string(*id)) : std::nullopt;
  tool_ = std::string(tool);
}

void ExchangeRecord::fill(AccessRecord& r, MonotonicTime start) const {
  r.retry_causes = retry_causes_;
  if (first_byte_at_) {
    r.ttfb_ms = std::chrono::duration<double, std::milli>(*first_byte_at_ - start).count();
  }
  r.model = model_;
  r.input_tokens = usage_.input_tokens;
  r.output_tokens = usage_.output_tokens;
  r.spend_usd = usage_.spend_usd;
  r.leaked_usd = usage_.leaked_usd;
  r.bytes_out = bytes_out_;
  r.run_id = run_id_;
  r.parent_run_id = parent_run_id_;
  r.jsonrpc_method = jsonrpc_method_;
  r.tool = tool_;
  r.cancel_reason = cancel_reason_;
}

}  // namespace sluice
