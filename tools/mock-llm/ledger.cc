#include "tools/mock-llm/ledger.h"

namespace mockllm {

int64_t monotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

nlohmann::json headersToJson(const HeaderList& headers) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : headers) {
    auto it = out.find(name);
    if (it == out.end()) {
      out[name] = value;
    } else if (it->is_array()) {
      it->push_back(value);
    } else {
      *it = nlohmann::json::array({*it, value});
    }
  }
  return out;
}

nlohmann::json entryToJson(const LedgerEntry& e) {
  return nlohmann::json{
      {"id", e.id},
      {"method", e.method},
      {"path", e.path},
      {"model", e.model},
      {"stream", e.stream},
      {"status", e.status},
      {"attempt_for_key", e.attempt_for_key},
      {"tokens_emitted", e.tokens_emitted},
      {"usage_reported", e.usage_reported},
      {"input_tokens", e.input_tokens},
      {"completed", e.completed},
      {"peer_closed", e.peer_closed},
      {"received_us", e.received_us},
      {"headers_sent_us", e.headers_sent_us},
      {"last_token_us", e.last_token_us},
      {"peer_closed_us", e.peer_closed_us},
      {"finished_us", e.finished_us},
      {"connection_id", e.connection_id},
      {"request_headers", headersToJson(e.request_headers)},
      {"protocol", e.protocol},
      {"stream_id", e.stream_id},
      {"client_reset", e.client_reset},
      {"rst_error_code", e.rst_error_code},
      {"mock_reset", e.mock_reset},
      {"mock_rst_error_code", e.mock_rst_error_code},
      {"refused", e.refused},
      {"scheduled_fault", e.scheduled_fault},
  };
}

void Ledger::append(LedgerEntryPtr entry) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(std::move(entry));
    if (max_entries_ != 0 && entries_.size() > max_entries_) entries_.pop_front();
  }
  changed_.notify_all();
}

nlohmann::json Ledger::toJson(std::optional<std::string_view> id) const {
  nlohmann::json requests = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : entries_) {
    if (id && e->id != *id) continue;
    requests.push_back(entryToJson(*e));
  }
  return nlohmann::json{{"requests", std::move(requests)}};
}

std::vector<LedgerEntry> Ledger::snapshotLocked() const {
  std::vector<LedgerEntry> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(*e);
  return out;
}

std::vector<LedgerEntry> Ledger::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return snapshotLocked();
}

std::vector<LedgerEntry> Ledger::find(std::string_view id) const {
  std::vector<LedgerEntry> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : entries_) {
    if (e->id == id) out.push_back(*e);
  }
  return out;
}

void Ledger::clear() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
  }
  changed_.notify_all();
}

bool Ledger::waitUntil(const std::function<bool(const std::vector<LedgerEntry>&)>& pred,
                       std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (pred(snapshotLocked())) return true;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return pred(snapshotLocked());
    }
  }
}

}  // namespace mockllm
