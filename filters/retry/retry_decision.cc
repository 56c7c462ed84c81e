#include "filters/retry/retry_decision.h"

#include <nlohmann/json.hpp>

#include "common/retry_after.h"
#include "filters/throttle/quota_headers.h"

namespace sluice {

namespace {

using std::chrono::milliseconds;

// Problem bodies are small; anything bigger is not worth parsing on this path.
constexpr size_t kMaxProblemBodyBytes = 64 * 1024;

bool isProblemJson(const HeaderMap& headers) {
  const auto content_type = headers.get("content-type");
  if (!content_type) return false;
  std::string_view media = *content_type;
  media = trimOws(media.substr(0, media.find(';')));
  return equalsIgnoreCase(media, "application/problem+json");
}

std::optional<bool> problemVerdict(std::string_view body) {
  if (body.empty() || body.size() > kMaxProblemBodyBytes) return std::nullopt;
  const auto json = nlohmann::json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;  // also the `discarded` value of a parse error
  for (const char* key : {"is_retriable", "retryable"}) {
    const auto it = json.find(key);
    if (it != json.end() && it->is_boolean()) return it->get<bool>();
  }
  return std::nullopt;
}

}  // namespace

bool RetryBudget::tryAcquireRetry() {
  const uint64_t cap = maxRetriesInFlight();
  uint64_t current = in_flight_.load(std::memory_order_relaxed);
  while (current < cap) {
    if (in_flight_.compare_exchange_weak(current, current + 1, std::memory_order_relaxed)) {
      return true;
    }
  }
  overflows_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

uint64_t RetryBudget::maxRetriesInFlight() const {
  const uint64_t by_percent =
      activeRequests() * budget_percent_.load(std::memory_order_relaxed) / 100;
  return std::max<uint64_t>(min_retries_, by_percent);
}

std::string_view toString(NoRetryReason reason) {
  switch (reason) {
    case NoRetryReason::None:
      return "";
    case NoRetryReason::ResponseStarted:
      return "response_started";
    case NoRetryReason::NotRetriable:
      return "not_retriable";
    case NoRetryReason::NotIdempotent:
      return "not_idempotent";
    case NoRetryReason::BodyTooLarge:
      return "body_too_large";
    case NoRetryReason::AttemptsExhausted:
      return "attempts_exhausted";
    case NoRetryReason::WaitExceedsBudget:
      return "wait_exceeds_budget";
    case NoRetryReason::RetryBudgetExhausted:
      return "retry_budget_exhausted";
  }
  return "";
}

bool isRetrySafe(config::IdempotencyMode mode, std::string_view method, bool has_idempotency_key) {
  switch (mode) {
    case config::IdempotencyMode::Always:
      return true;
    case config::IdempotencyMode::Never:
      return false;
    case config::IdempotencyMode::Auto:
      if (has_idempotency_key) return true;
      for (std::string_view m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) {
        if (method == m) return true;  // methods are case-sensitive (RFC 9110 §9.1)
      }
      return false;
  }
  return false;
}

std::optional<bool> upstreamRetryVerdict(const HeaderMap* headers, std::string_view body) {
  if (headers == nullptr) return std::nullopt;
  if (isProblemJson(*headers)) {
    if (auto verdict = problemVerdict(body)) return verdict;
  }
  if (auto h = headers->get("x-should-retry")) {
    const std::string_view v = trimOws(*h);
    if (equalsIgnoreCase(v, "true")) return true;
    if (equalsIgnoreCase(v, "false")) return false;
  }
  return std::nullopt;
}

bool clientRetryMayHelp(const ClientRetryInput& in) {
  if (in.attempts > 1 || in.retry_wait_exceeded_budget) return false;
  const auto wait = in.wait.value_or(std::chrono::milliseconds(0));
  return wait < kClientRetryMaxWait && wait < in.remaining_budget;
}

RetryDecision decideRetry(const RetryInput& in) {
  RetryDecision d;
  const config::RetryConfig& cfg = *in.config;
  const Clock& clock = in.clock ? *in.clock : RealClock::instance();
  d.cause = causeLabel(in.outcome);

  const bool has_head = in.outcome.isStatus() && in.response_headers != nullptr;
  if (has_head) {
    d.upstream_wait = parseRetryAfter(*in.response_headers, clock.systemNow());
    if (!d.upstream_wait) {
      d.upstream_wait =
          exhaustedQuotaWait(parseQuotaHeaders(*in.response_headers, clock), clock.now());
    }
  }

  auto no = [&](NoRetryReason reason) {
    d.retry = false;
    d.reason = reason;
    return d;
  };

  if (in.response_started) return no(NoRetryReason::ResponseStarted);

  bool retriable =
      outcomeIn(cfg.on, in.outcome) || (in.unprocessed && (cfg.on.connect_error || cfg.on.reset));
  if (in.outcome.isStatus() && in.outcome.status >= 400) {
    if (auto verdict = upstreamRetryVerdict(in.response_headers, in.response_body)) {
      retriable = *verdict;
    }
  }
  if (!retriable) return no(NoRetryReason::NotRetriable);
  if (!in.unprocessed && !isRetrySafe(cfg.idempotent, in.method, in.has_idempotency_key)) {
    return no(NoRetryReason::NotIdempotent);
  }
  if (!in.body_replayable) return no(NoRetryReason::BodyTooLarge);
  if (in.attempt >= cfg.attempts) return no(NoRetryReason::AttemptsExhausted);

  const UniformRandom random = in.random ? in.random : threadLocalUniform();
  const uint32_t retry_index = in.attempt > 0 ? in.attempt - 1 : 0;
  d.delay = retryDelay(cfg.backoff, retry_index, d.upstream_wait, cfg.respect_retry_after, random);
  // The retry needs some budget of its own after the wait, so an exact fit fails too.
  if (d.delay >= in.remaining_budget) return no(NoRetryReason::WaitExceedsBudget);

  if (in.retry_budget != nullptr) {
    if (!in.retry_budget->tryAcquireRetry()) {
      d.delay = milliseconds(0);
      return no(NoRetryReason::RetryBudgetExhausted);
    }
    d.budget_acquired = true;
  }
  d.retry = true;
  d.reason = NoRetryReason::None;
  return d;
}

}  // namespace sluice
