#include "tools/mock-llm/router.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

namespace mockllm {

namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kDefaultTokens = 10;
constexpr int64_t kMaxTokens = 100'000'000;
constexpr int64_t kMaxMillis = 24LL * 3600 * 1000;

enum class Endpoint {
  kChat,
  kResponses,
  kMessages,
  kModels,
  kEcho,
  kHealth,
  kLedger,
  kSchedule,
  kUnknown
};

Endpoint endpointFor(std::string_view path) {
  if (path == "/v1/chat/completions") return Endpoint::kChat;
  if (path == "/v1/responses") return Endpoint::kResponses;
  if (path == "/v1/messages") return Endpoint::kMessages;
  if (path == "/v1/models") return Endpoint::kModels;
  if (path.substr(0, 5) == "/echo") return Endpoint::kEcho;
  if (path == "/_health") return Endpoint::kHealth;
  if (path == "/_ledger") return Endpoint::kLedger;
  if (path == "/_schedule") return Endpoint::kSchedule;
  return Endpoint::kUnknown;
}

bool isLlm(Endpoint e) {
  return e == Endpoint::kChat || e == Endpoint::kResponses || e == Endpoint::kMessages;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::optional<int64_t> parseInt(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Reads an optional integer header within [lo, hi]. Absent: `out` is left as is.
// Invalid: returns false and explains in `error`.
bool readInt(const Request& req, std::string_view name, int64_t lo, int64_t hi, int64_t& out,
             std::string& error) {
  const std::string* v = req.header(name);
  if (v == nullptr) return true;
  const auto parsed = parseInt(*v);
  if (!parsed || *parsed < lo || *parsed > hi) {
    error = "mock-llm: invalid " + std::string(name) + " header: '" + *v + "'";
    return false;
  }
  out = *parsed;
  return true;
}

bool isTruthy(const std::string* v) { return v != nullptr && (*v == "1" || *v == "true"); }

// x-mock-refuse-stream / x-mock-goaway: only HTTP/2 can turn a request away unprocessed.
Refusal refusalFor(const Request& req) {
  if (req.protocol != Protocol::kHttp2) return Refusal::kNone;
  if (isTruthy(req.header("x-mock-refuse-stream"))) return Refusal::kRefuseStream;
  if (isTruthy(req.header("x-mock-goaway"))) return Refusal::kGoaway;
  return Refusal::kNone;
}

std::string percentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int v = 0;
      const auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      if (ec == std::errc() && p == s.data() + i + 3) {
        out += static_cast<char>(v);
        i += 2;
        continue;
      }
    }
    out += s[i] == '+' ? ' ' : s[i];
  }
  return out;
}

// The value of query parameter `name` in `target`, if present.
std::optional<std::string> queryParam(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (percentDecode(pair.substr(0, eq)) != name) continue;
    return eq == std::string_view::npos ? std::string() : percentDecode(pair.substr(eq + 1));
  }
  return std::nullopt;
}

void append(HeaderList& to, const HeaderList& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// A complete non-streaming plan: `status`, `content_type`, `body`.
ResponsePlan simplePlan(int status, std::string_view content_type, std::string body,
                        bool keep_alive, const HeaderList& extra_headers = {}) {
  ResponsePlan plan;
  plan.status = status;
  plan.keep_alive = keep_alive;
  const bool bodiless = status == 204 || status == 304;
  if (!bodiless) {
    plan.headers.emplace_back("content-type", std::string(content_type));
    plan.headers.emplace_back("content-length", std::to_string(body.size()));
    plan.body = std::move(body);
  }
  append(plan.headers, extra_headers);
  return plan;
}

int64_t steadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// GET /_schedule: the fault in force; POST /_schedule: the schedule starts over now.
ResponsePlan schedulePlan(const Request& req, SharedState& state) {
  if (req.method == "POST") state.schedule_epoch_us.store(steadyMicros());
  if (req.method != "GET" && req.method != "POST") {
    const ErrorBody err =
        makeErrorBody(ErrorFlavor::kOpenAi, 405, "mock-llm: /_schedule supports GET and POST",
                      false, std::nullopt);
    return simplePlan(405, err.content_type, err.body, req.keep_alive, {{"allow", "GET, POST"}});
  }
  const ScheduledFault* fault = state.scheduledFault();
  const Json body{{"scheduled", state.schedule.has_value()},
                  {"elapsed_ms", (steadyMicros() - state.schedule_epoch_us.load()) / 1000},
                  {"active", fault != nullptr ? Json(fault->describe()) : Json(nullptr)}};
  return simplePlan(200, "application/json", dump(body), req.keep_alive);
}

// `req` as the scheduled `fault` reshapes it: the fault becomes x-mock-* headers
// (replacing the client's own), so one code path plays every fault.
Request withScheduledFault(const Request& req, const ScheduledFault& fault) {
  Request shaped = req;
  HeaderList& h = shaped.headers;
  const auto drop = [&h](std::string_view name) {
    h.erase(std::remove_if(h.begin(), h.end(), [&](const auto& kv) { return kv.first == name; }),
            h.end());
  };
  for (const char* name : {"x-mock-status", "x-mock-fail-times", "x-mock-stall-before-headers-ms",
                           "x-mock-reset-after-tokens"}) {
    drop(name);
  }
  switch (fault.kind) {
    case ScheduledFault::Kind::kStatus:
      h.emplace_back("x-mock-status", std::to_string(fault.status));
      if (fault.retry_after_s) {
        drop("x-mock-retry-after");
        h.emplace_back("x-mock-retry-after", std::to_string(*fault.retry_after_s));
      }
      break;
    case ScheduledFault::Kind::kSlow:
      h.emplace_back("x-mock-stall-before-headers-ms", std::to_string(fault.delay.count()));
      break;
    case ScheduledFault::Kind::kReset:
      h.emplace_back("x-mock-reset-after-tokens", "0");
      break;
    case ScheduledFault::Kind::kHang:
      h.emplace_back("x-mock-stall-before-headers-ms", "-1");
      break;
  }
  return shaped;
}

ResponsePlan planUnscheduled(const Request& req, SharedState& state);

// The tokens an answer's `usage` reports: the prompt as body bytes / 4 (rounded
// up), the completion as `tokens` (x-mock-tokens) capped by the request's max_tokens.
int64_t inputTokens(const Request& req) { return static_cast<int64_t>((req.body.size() + 3) / 4); }
int64_t outputTokens(const Request& req, int64_t tokens) {
  return req.info.max_tokens ? std::min(*req.info.max_tokens, tokens) : tokens;
}

ResponsePlan controlPlan(const Request& req, Endpoint e, SharedState& state) {
  const bool ka = req.keep_alive;
  const auto ok = [&](std::string body) {
    return simplePlan(200, "application/json", std::move(body), ka);
  };
  if (e == Endpoint::kHealth) return ok("{\"status\":\"ok\"}");
  if (e == Endpoint::kSchedule) return schedulePlan(req, state);
  if (req.method == "GET") {
    const auto id = queryParam(req.target, "id");
    return ok(state.ledger.toJson(id ? std::optional<std::string_view>(*id) : std::nullopt)
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (req.method == "DELETE") {
    state.ledger.clear();
    state.fail_counter.clear();
    state.quotas.clear();
    return ok("{\"cleared\":true}");
  }
  const ErrorBody err = makeErrorBody(
      ErrorFlavor::kOpenAi, 405, "mock-llm: /_ledger supports GET and DELETE", false, std::nullopt);
  return simplePlan(405, err.content_type, err.body, ka, {{"allow", "GET, DELETE"}});
}

}  // namespace

const std::string* Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return &v;
  }
  return nullptr;
}

std::string_view Request::path() const {
  std::string_view t = target;
  return t.substr(0, t.find('?'));
}

bool isControlPath(std::string_view path) {
  const Endpoint e = endpointFor(path);
  return e == Endpoint::kHealth || e == Endpoint::kLedger || e == Endpoint::kSchedule;
}

const ScheduledFault* SharedState::scheduledFault() const {
  if (!schedule) return nullptr;
  const int64_t elapsed_us = steadyMicros() - schedule_epoch_us.load();
  return schedule->activeAt(std::chrono::milliseconds(elapsed_us / 1000));
}

ResponsePlan planResponse(const Request& req, SharedState& state) {
  const ScheduledFault* fault = isControlPath(req.path()) ? nullptr : state.scheduledFault();
  if (fault == nullptr) return planUnscheduled(req, state);
  if (req.entry) {
    state.ledger.update(req.entry, [&](LedgerEntry& e) { e.scheduled_fault = fault->describe(); });
  }
  return planUnscheduled(withScheduledFault(req, *fault), state);
}

void inspectBody(Request& req) {
  BodyInfo& info = req.info;
  if (req.body.empty() || req.body.front() != '{') return;
  const nlohmann::json j = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  info.valid_json = true;
  if (auto it = j.find("model"); it != j.end() && it->is_string()) {
    info.model = it->get<std::string>();
  }
  if (auto it = j.find("stream"); it != j.end() && it->is_boolean()) info.stream = it->get<bool>();
  if (auto it = j.find("stream_options"); it != j.end() && it->is_object()) {
    if (auto u = it->find("include_usage"); u != it->end() && u->is_boolean()) {
      info.include_usage = u->get<bool>();
    }
  }
  for (const char* key : {"max_completion_tokens", "max_tokens", "max_output_tokens"}) {
    if (auto it = j.find(key); it != j.end() && it->is_number_integer()) {
      info.max_tokens = std::max<int64_t>(0, it->get<int64_t>());
      break;
    }
  }
}

LedgerEntryPtr makeLedgerEntry(const Request& req, uint64_t connection_id, SharedState& state) {
  auto e = std::make_shared<LedgerEntry>();
  if (const std::string* id = req.header("x-mock-request-id"); id != nullptr && !id->empty()) {
    e->id = *id;
  } else {
    e->id = "req-" + std::to_string(state.next_request_id.fetch_add(1));
  }
  e->method = req.method;
  e->path = req.target;
  e->model = req.info.model;
  e->stream = req.info.stream && isLlm(endpointFor(req.path()));
  e->input_tokens = static_cast<int64_t>((req.body.size() + 3) / 4);
  e->received_us = req.received_us;
  e->connection_id = connection_id;
  e->request_headers = req.headers;
  e->protocol = req.protocol == Protocol::kHttp2 ? "h2" : "http/1.1";
  e->stream_id = req.stream_id;
  return e;
}

namespace {

ResponsePlan planUnscheduled(const Request& req, SharedState& state) {
  const std::string_view path = req.path();
  const Endpoint endpoint = endpointFor(path);
  if (endpoint == Endpoint::kHealth || endpoint == Endpoint::kLedger ||
      endpoint == Endpoint::kSchedule) {
    return controlPlan(req, endpoint, state);
  }
  const bool keep_alive = req.keep_alive && !req.malformed;
  const ErrorFlavor flavor =
      path.substr(0, 12) == "/v1/messages" ? ErrorFlavor::kAnthropic : ErrorFlavor::kOpenAi;
  const auto now = std::chrono::steady_clock::now();
  const auto wall_now = std::chrono::system_clock::now();
  const LedgerEntryPtr& entry = req.entry;

  const bool problem = isTruthy(req.header("x-mock-problem"));
  std::optional<bool> retriable;
  std::string error;  // a malformed x-mock-* header: answered with 400
  if (const std::string* r = req.header("x-mock-problem-retriable")) {
    if (*r == "true" || *r == "1") {
      retriable = true;
    } else if (*r == "false" || *r == "0") {
      retriable = false;
    } else {
      error = "mock-llm: invalid x-mock-problem-retriable header: '" + *r + "'";
    }
  }

  // Headers every answer to this request carries.
  HeaderList extra;
  if (entry) extra.emplace_back("x-request-id", entry->id);
  if (entry && flavor == ErrorFlavor::kAnthropic) extra.emplace_back("request-id", entry->id);
  const std::string* retry_after = req.header("x-mock-retry-after");
  if (retry_after) extra.emplace_back("Retry-After", *retry_after);
  if (const std::string* v = req.header("x-mock-retry-after-ms")) {
    extra.emplace_back("retry-after-ms", *v);
  }

  // The fault script.
  int64_t tokens = kDefaultTokens, interval_ms = 0, stall_before = 0, stall_after = -1,
          stall_ms = 0, reset_after = -1, fail_times = -1, status_override = 0;
  const bool ok =
      error.empty() && readInt(req, "x-mock-tokens", 0, kMaxTokens, tokens, error) &&
      readInt(req, "x-mock-token-interval-ms", 0, kMaxMillis, interval_ms, error) &&
      readInt(req, "x-mock-stall-before-headers-ms", -1, kMaxMillis, stall_before, error) &&
      readInt(req, "x-mock-stall-after-tokens", 0, kMaxTokens, stall_after, error) &&
      readInt(req, "x-mock-stall-ms", -1, kMaxMillis, stall_ms, error) &&
      readInt(req, "x-mock-reset-after-tokens", 0, kMaxTokens, reset_after, error) &&
      readInt(req, "x-mock-fail-times", 0, kMaxTokens, fail_times, error) &&
      readInt(req, "x-mock-status", 200, 599, status_override, error);

  // Fail-key attempts count every request carrying the key.
  int64_t attempt = 0;
  if (const std::string* key = req.header("x-mock-fail-key"))
    attempt = state.fail_counter.next(*key);
  if (ok && fail_times >= 0 && !req.header("x-mock-fail-key")) {
    attempt = state.fail_counter.next("default");
  }
  const bool failing_attempt = fail_times >= 0 ? attempt <= fail_times : true;

  // HTTP/2 refusals: nothing is processed (no quota consumed, no status). With
  // x-mock-fail-times only the failing attempts are refused.
  if (const Refusal refusal = ok && failing_attempt ? refusalFor(req) : Refusal::kNone;
      refusal != Refusal::kNone) {
    if (entry) {
      state.ledger.update(entry, [&](LedgerEntry& e) { e.attempt_for_key = attempt; });
    }
    ResponsePlan plan;
    plan.status = 0;
    plan.refusal = refusal;
    return plan;
  }

  // Quotas: admitted requests consume them; every answer reports them.
  std::optional<QuotaStatus> quota, token_quota;
  if (ok && (req.header("x-mock-quota") || req.header("x-mock-token-quota"))) {
    unsigned styles = kQuotaAll;
    if (const std::string* s = req.header("x-mock-quota-style")) {
      if (auto parsed = parseQuotaStyles(*s)) {
        styles = *parsed;
      } else {
        error = "mock-llm: invalid x-mock-quota-style header: '" + *s + "'";
      }
    }
    const std::string* key = req.header("x-mock-quota-key");
    std::vector<QuotaAsk> asks;
    const auto ask = [&](const char* name, QuotaUnit unit, int64_t cost) {
      const std::string* q = req.header(name);
      if (q == nullptr) return;
      const size_t slash = q->find('/');
      int64_t limit = -1, window = -1;
      if (slash != std::string::npos) {
        limit = parseInt(std::string_view(*q).substr(0, slash)).value_or(-1);
        window = parseInt(std::string_view(*q).substr(slash + 1)).value_or(-1);
      }
      if (limit < 0 || window <= 0 || window > kMaxMillis) {
        error = "mock-llm: invalid " + std::string(name) + " header (want LIMIT/WINDOW_MS): '" +
                *q + "'";
      }
      asks.push_back(
          {unit, key ? *key : "default", limit, std::chrono::milliseconds(window), cost});
    };
    ask("x-mock-quota", QuotaUnit::kRequests, 1);
    // A token quota counts what the answer's `usage` reports: prompt + completion tokens.
    ask("x-mock-token-quota", QuotaUnit::kTokens, inputTokens(req) + outputTokens(req, tokens));
    if (error.empty()) {
      const std::vector<QuotaStatus> statuses = state.quotas.admitAll(asks, now);
      for (size_t i = 0; i < asks.size(); ++i) {
        (asks[i].unit == QuotaUnit::kTokens ? token_quota : quota) = statuses[i];
        append(extra, quotaHeaders(statuses[i], styles, wall_now, asks[i].unit));
      }
    }
  }
  const QuotaStatus* refusing = nullptr;  // the quota whose window frees latest among those full
  for (const auto& q : {&quota, &token_quota}) {
    if (*q && !(*q)->admitted && !(*q)->fits &&
        (refusing == nullptr || (*q)->reset_in > refusing->reset_in)) {
      refusing = &**q;
    }
  }

  // Decide the status.
  int status = 200;
  std::string message;
  if (req.malformed) {
    status = 400;
    message = "mock-llm: malformed HTTP request";
  } else if (!error.empty()) {
    status = 400;
    message = error;
  } else if (refusing != nullptr) {
    status = 429;
    message = quota && refusing == &*quota ? "Rate limit reached for requests (mock-llm quota)"
                                           : "Rate limit reached for tokens (mock-llm token quota)";
    if (!retry_after)
      extra.emplace_back("Retry-After", std::to_string(ceilSeconds(refusing->reset_in)));
  } else if (fail_times >= 0 ? failing_attempt : status_override != 0) {
    status = status_override != 0 ? static_cast<int>(status_override) : 503;
    message = "mock-llm: injected status " + std::to_string(status);
  }
  if (status == 200) {
    const bool is_post = req.method == "POST";
    if (endpoint == Endpoint::kUnknown) {
      status = 404;
      message = "Invalid URL (" + req.method + " " + std::string(path) + ")";
    } else if ((isLlm(endpoint) && !is_post) ||
               (endpoint == Endpoint::kModels && req.method != "GET")) {
      status = 405;
      message = "Invalid method for URL (" + req.method + " " + std::string(path) + ")";
    } else if (isLlm(endpoint) && !req.info.valid_json) {
      status = 400;
      message = "We could not parse the JSON body of your request.";
    }
  }
  if (entry) {
    state.ledger.update(entry, [&](LedgerEntry& e) {
      e.status = status;
      e.attempt_for_key = attempt;
    });
  }

  // Build the plan.
  ResponsePlan plan;
  if (status != 200) {
    const ErrorBody err = makeErrorBody(flavor, status, message, problem, retriable);
    plan = simplePlan(status, err.content_type, err.body, keep_alive, extra);
  } else if (endpoint == Endpoint::kModels) {
    plan = simplePlan(200, "application/json", modelsBody(), keep_alive, extra);
  } else if (endpoint == Endpoint::kEcho) {
    const Json echo{{"method", req.method},
                    {"path", req.target},
                    {"headers", headersToJson(req.headers)},
                    {"body", req.body}};
    plan = simplePlan(200, "application/json", dump(echo), keep_alive, extra);
  } else {
    Generation gen;
    gen.api = endpoint == Endpoint::kChat        ? Api::kChatCompletions
              : endpoint == Endpoint::kResponses ? Api::kResponses
                                                 : Api::kMessages;
    gen.id = entry ? entry->id : "unknown";
    gen.model = req.info.model.empty()
                    ? (gen.api == Api::kMessages ? "claude-sonnet-4-5" : "gpt-4o-mini")
                    : req.info.model;
    gen.created =
        std::chrono::duration_cast<std::chrono::seconds>(wall_now.time_since_epoch()).count();
    gen.input_tokens = inputTokens(req);
    gen.output_tokens = outputTokens(req, tokens);
    gen.truncated = gen.output_tokens < tokens;
    gen.include_usage = req.info.include_usage;
    if (req.info.stream) {
      plan.keep_alive = keep_alive && !req.http10;
      plan.chunked = !req.http10;
      plan.status = 200;
      plan.headers = {{"content-type", "text/event-stream; charset=utf-8"},
                      {"cache-control", "no-cache"}};
      append(plan.headers, extra);
      plan.sse = makeSseStream(gen);
    } else {
      plan = simplePlan(200, "application/json", nonStreamingBody(gen), keep_alive, extra);
      plan.usage_in_body = true;
    }
    plan.tokens = gen.output_tokens;
    plan.token_interval = std::chrono::milliseconds(interval_ms);
    plan.stall_after_tokens = stall_after;
    plan.stall_ms = stall_ms;
    plan.reset_after_tokens = reset_after;
  }
  if (ok) {
    plan.stall_before_headers_ms = stall_before;
    plan.close_after_headers = isTruthy(req.header("x-mock-close-after-headers"));
    plan.garbage = isTruthy(req.header("x-mock-garbage"));
  }
  return plan;
}

}  // namespace

std::string http1Head(const ResponsePlan& plan) {
  std::string out = "HTTP/1.1 " + std::to_string(plan.status) + " ";
  out += reasonPhrase(plan.status);
  out += "\r\n";
  for (const auto& [name, value] : plan.headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (plan.chunked) out += "transfer-encoding: chunked\r\n";
  if (!plan.keep_alive) out += "connection: close\r\n";
  out += "\r\n";
  return out;
}

}  // namespace mockllm
