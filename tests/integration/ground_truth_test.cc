// The spend ground truth (docs/design.md §4). A seeded, mixed
// workload goes through a real sluice to a real mock-llm over loopback; then,
// model by model, sluice's token and USD counters are held against what the
// mock says it generated (its ledger) and what the clients actually parsed.
//
// Every request is judged by what happened to it (the client's observation
// and the mock's ledger entries), not by what the plan hoped for, so the
// workload may race freely; each outcome pins sluice's numbers as follows.
//
//   complete 2xx answer     output = the mock's tokens_emitted, all delivered,
//                           and the client parsed exactly those tokens;
//   finish route, client    the client read K deltas while the mock paused,
//   left during a pause     then sluice drained the rest: output = emitted
//                           (the provider's usage, or every delta seen), all
//                           of it leaked, none delivered (docs/design.md §3);
//   cut mid-stream          (the client left, or the budget expired) the one
//                           place with slack, see "in flight" below;
//   error / no answer       no output; the input of an attempt the mock
//                           accepted (2xx in its ledger) is leaked.
//
// Input tokens are exact everywhere: ceil(body bytes / 4) is both the mock's
// count and sluice's estimate, and an attempt's input is delivered exactly
// when its client parsed output (or got the whole answer).
//
// "In flight", the tolerance of a cut stream. The client parsed R deltas;
// the mock emitted E. sluice saw at least the R it forwarded and at most the
// E that were sent, and of those it can only call delivered what left its
// own buffer, so R <= delivered <= total <= E. The gap E - R is what was in
// flight when the stream was cut: in the mock's socket, in sluice's kernel or
// user-space buffers, or in the client's socket after its last read. To keep
// that gap small rather than assumed, a leaving client first takes what has
// already reached its socket (readAvailable), and mid-flow cuts only happen
// on paced streams (a token every few ms), so E - R is the one or two tokens
// of a race, not a burst. The test prints how much of that slack was used.
// It can still fail: an undercount drops below R, an overcount rises above E,
// and every other outcome is exact. (Anthropic's message_start already
// reports output_tokens: 1, which sluice keeps as a floor: for a cut
// Anthropic stream the upper bound is max(E, 1).)
//
// "Exact where usage was reported, within 2% where estimated" (the issue's
// words): output (delivered + leaked) must also be within 2% of the tokens
// the mock emitted, counting only requests sluice had to estimate (cut
// streams, and chat streams without stream_options.include_usage) in the 2%
// base. The interval above bounds where the total may lie; this check bounds
// how far an estimate may fall short of what the provider generated.
//
// The second test covers what the first cannot see: bytes sluice buffered
// for a slow client when the stream ended. One stream at a time, the client
// reads a few deltas and stops; the test waits until the stream is quiescent
// (sluice paused the upstream and neither its byte counts move), reads what
// sluice forwarded and what it still holds from /exchanges, and ends the
// stream at once (client close, client reset, or sluice draining — the
// cancel path a budget or a stall takes with the client still attached).
// Delivered must then be exactly the deltas whose SSE events end before the
// bytes sluice still held: what it handed to the client's socket (kernel
// buffers count as delivered: sluice cannot see past its socket). The event
// layout comes from the same answer fetched straight from the mock. There is
// no tolerance here, and none is needed: the snapshot and the end of the
// stream see the same state (the test checks that sluice read nothing more).

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/support/h2_client.h"
#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/redis_process.h"
#include "tests/support/wait.h"

namespace sluice::test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr uint64_t kDefaultSeed = 20260417;  // GROUND_TRUTH_SEED=N replays another workload
constexpr size_t kRequests = 360;
constexpr size_t kConcurrentClients = 24;
constexpr uint32_t kAttempts = 3;  // the routes' retry.attempts

// sluice runs in this process; as its main() does, a write to a client that
// reset the connection must fail with EPIPE, not kill the process.
void ignoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }

uint64_t seed() {
  const char* env = std::getenv("GROUND_TRUTH_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : kDefaultSeed;
}

// ---- sluice's configuration ---------------------------------------------------

struct Price {
  const char* pattern;  // also the `model` label
  double input_usd_per_mtok;
  double output_usd_per_mtok;
};

// Must match the `pricing` block of config(); first match wins, as in sluice.
constexpr Price kPrices[] = {
    {"gpt-4o-mini*", 0.15, 0.60},
    {"gpt-4o*", 2.50, 10.00},
    {"claude-*", 3.00, 15.00},
};
constexpr Price kOther = {"other", 0, 0};

const Price& priceFor(const std::string& model) {
  for (const Price& p : kPrices) {
    if (::fnmatch(p.pattern, model.c_str(), 0) == 0) return p;
  }
  return kOther;
}

// Three cancel-mode routes, one per API, and a `finish` route reached by the
// same paths without "/v1" (its upstream URL adds it back). The breaker never
// opens and the retry budget never refuses, so every planned retry happens.
// With `redis_url`, the same config with shared state on (docs/design.md §6) and a
// throttle in every chain (its quota key unthrottled: the mock sends no quota).
std::string config(const std::string& mock_url, const std::string& redis_url = "") {
  std::string breaker =
      "    circuit_breaker: {consecutive_failures: 100000,\n"
      "                      failure_rate: {threshold: 1.0, window: 10s, min_requests: 100000}}\n";
  if (!redis_url.empty()) breaker += "    rate_limit: {key: none, reserve: 0}\n";
  const std::string retry =
      "    retry: {attempts: 3, on: [429, 500, 502, 503], backoff: {base: 1ms, max: 4ms},\n"
      "            budget_percent: 100}\n";
  auto route = [&](const std::string& name, const std::string& prefix, const std::string& upstream,
                   const std::string& extra) {
    return "  - name: " + name + "\n    match: {path_prefix: " + prefix +
           ", methods: [POST]}\n    upstream: " + upstream + "\n" + retry + extra;
  };
  // drain_timeout 0: the slow-reader test drains to cut a stream at a moment of its choosing.
  std::string yaml = "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nworkers: 2\ndrain_timeout: 0s\n";
  if (!redis_url.empty()) {
    yaml += "shared_state: {redis: \"" + redis_url + "\", prefix: \"gt:\", timeout: 500ms}\n";
  }
  yaml += "upstreams:\n";
  yaml += "  - name: mock\n    url: " + mock_url + "\n" + breaker;
  yaml += "  - name: mock_v1\n    url: " + mock_url + "/v1\n" + breaker;
  yaml += "routes:\n";
  yaml += route("chat", "/v1/chat/completions", "mock", "");
  yaml += route("responses", "/v1/responses", "mock", "");
  yaml += route("messages", "/v1/messages", "mock", "");
  yaml +=
      route("finish", "/", "mock_v1", "    on_client_disconnect: finish\n    finish_grace: 30s\n");
  yaml += "pricing:\n";
  for (const Price& p : kPrices) {
    std::ostringstream line;
    line << "  - {model: \"" << p.pattern << "\", input: " << p.input_usd_per_mtok
         << ", output: " << p.output_usd_per_mtok << "}\n";
    yaml += line.str();
  }
  return yaml;
}

// ---- the wire formats mock-llm speaks ---------------------------------------------

enum class Wire {
  ChatUsage,    // chat completions, SSE with stream_options.include_usage
  ChatNoUsage,  // chat completions, SSE without usage: sluice must estimate
  Responses,    // the Responses API
  Anthropic,    // Anthropic Messages
};

const char* toString(Wire wire) {
  switch (wire) {
    case Wire::ChatUsage:
      return "chat+usage";
    case Wire::ChatNoUsage:
      return "chat-no-usage";
    case Wire::Responses:
      return "responses";
    case Wire::Anthropic:
      return "anthropic";
  }
  return "?";
}

std::string apiPath(Wire wire) {
  switch (wire) {
    case Wire::ChatUsage:
    case Wire::ChatNoUsage:
      return "/v1/chat/completions";
    case Wire::Responses:
      return "/v1/responses";
    case Wire::Anthropic:
      return "/v1/messages";
  }
  return "/";
}

std::string requestBody(Wire wire, const std::string& model, bool stream,
                        const std::string& prompt) {
  json body = {{"model", model}, {"stream", stream}};
  switch (wire) {
    case Wire::ChatUsage:
      if (stream) body["stream_options"] = {{"include_usage", true}};
      body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
      break;
    case Wire::ChatNoUsage:
      body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
      break;
    case Wire::Responses:
      body["input"] = prompt;
      break;
    case Wire::Anthropic:
      body["max_tokens"] = 100000;
      body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
      break;
  }
  return body.dump();
}

// The content deltas a client parsed, each checked to be the mock's next
// token ("tok0 ", "tok1 ", ...), with where each one's SSE event ended.
struct Parsed {
  std::vector<size_t> delta_ends;  // body offset just past each delta's event
  std::string error;               // out of order or malformed; empty if fine
  size_t tokens() const { return delta_ends.size(); }
};

// The text of a content delta, if this SSE event carries one.
std::optional<std::string> deltaText(Wire wire, std::string_view type, const std::string& data) {
  if (wire == Wire::Responses && type != "response.output_text.delta") return std::nullopt;
  if (wire == Wire::Anthropic && type != "content_block_delta") return std::nullopt;
  if (data == "[DONE]") return std::nullopt;
  const json j = json::parse(data, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const json* text = nullptr;
  if (wire == Wire::Responses) {
    text = j.contains("delta") ? &j["delta"] : nullptr;
  } else if (wire == Wire::Anthropic) {
    if (j.contains("delta") && j["delta"].contains("text")) text = &j["delta"]["text"];
  } else if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
             j["choices"][0].contains("delta") && j["choices"][0]["delta"].contains("content")) {
    text = &j["choices"][0]["delta"]["content"];
  }
  if (text == nullptr || !text->is_string() || text->get<std::string>().empty()) {
    return std::nullopt;
  }
  return text->get<std::string>();
}

// Complete events only: a client cannot use half an event.
Parsed parseSse(Wire wire, std::string_view body) {
  Parsed out;
  size_t pos = 0;
  for (size_t end; (end = body.find("\n\n", pos)) != std::string_view::npos; pos = end + 2) {
    std::string_view event = body.substr(pos, end - pos);
    std::string_view type;
    std::string data;
    while (!event.empty()) {
      const size_t nl = event.find('\n');
      std::string_view line = event.substr(0, nl);
      event = nl == std::string_view::npos ? std::string_view() : event.substr(nl + 1);
      auto field = [&](std::string_view name) -> std::optional<std::string_view> {
        if (line.substr(0, name.size()) != name) return std::nullopt;
        std::string_view v = line.substr(name.size());
        if (!v.empty() && v[0] == ' ') v.remove_prefix(1);
        return v;
      };
      if (auto v = field("event:")) type = *v;
      if (auto v = field("data:")) data += std::string(*v);
    }
    const auto text = deltaText(wire, type, data);
    if (!text) continue;
    const std::string expected = "tok" + std::to_string(out.tokens()) + " ";
    if (*text != expected) {
      out.error = "delta " + std::to_string(out.tokens()) + " is \"" + *text + "\"";
      break;
    }
    out.delta_ends.push_back(end + 2);
  }
  return out;
}

// A non-streaming answer's generated text, counted as the mock's tokens.
Parsed parseJsonAnswer(Wire wire, const std::string& body) {
  Parsed out;
  const json j = json::parse(body, nullptr, false);
  std::string text;
  try {
    if (wire == Wire::Responses) {
      text = j.at("output").at(0).at("content").at(0).at("text").get<std::string>();
    } else if (wire == Wire::Anthropic) {
      text = j.at("content").at(0).at("text").get<std::string>();
    } else {
      text = j.at("choices").at(0).at("message").at("content").get<std::string>();
    }
  } catch (const json::exception& e) {
    out.error = std::string("unexpected answer: ") + e.what();
    return out;
  }
  std::string expected;
  for (size_t i = 0; expected.size() < text.size(); ++i) {
    expected += "tok" + std::to_string(i) + " ";
    out.delta_ends.push_back(0);
  }
  if (expected != text) out.error = "answer text is \"" + text.substr(0, 80) + "\"";
  return out;
}

// ---- the workload ---------------------------------------------------------------------

enum class Scenario {
  Complete,             // read the whole answer (stream or JSON), maybe after retries
  AllAttemptsFail,      // every attempt fails before the first byte: the error is answered
  FlowCancel,           // paced stream; the client leaves after a random number of deltas
  StallCancel,          // the mock pauses for good after K deltas; the client reads them, leaves
  FinishLeave,          // `finish` route: the client leaves during a pause, sluice drains the rest
  BudgetStall,          // the mock pauses for good after K deltas; the budget ends the stream
  BudgetFlow,           // a paced stream longer than its budget: cut mid-flow
  LeaveBeforeHeaders,   // the mock never answers; the client leaves once the mock has the request
  BudgetBeforeHeaders,  // the mock never answers; the budget answers 504
};

const char* toString(Scenario s) {
  switch (s) {
    case Scenario::Complete:
      return "complete";
    case Scenario::AllAttemptsFail:
      return "all-attempts-fail";
    case Scenario::FlowCancel:
      return "flow-cancel";
    case Scenario::StallCancel:
      return "stall-cancel";
    case Scenario::FinishLeave:
      return "finish-leave";
    case Scenario::BudgetStall:
      return "budget-stall";
    case Scenario::BudgetFlow:
      return "budget-flow";
    case Scenario::LeaveBeforeHeaders:
      return "leave-before-headers";
    case Scenario::BudgetBeforeHeaders:
      return "budget-before-headers";
  }
  return "?";
}

struct Plan {
  std::string id;  // x-mock-request-id: groups the request's attempts in the ledger
  Scenario scenario = Scenario::Complete;
  Wire wire = Wire::ChatUsage;
  bool stream = true;
  std::string model;
  std::string path;
  std::string body;
  uint32_t tokens = 10;
  uint32_t interval_ms = 0;
  uint32_t cut = 0;         // deltas read before leaving, or where the mock pauses
  uint32_t fail_times = 0;  // attempts that fail before the first byte (retried)
  int fail_status = 0;
  uint32_t budget_ms = 0;
  bool reset = false;  // leave with RST rather than FIN

  std::string describe() const {
    std::ostringstream s;
    s << id << " " << toString(scenario) << " " << toString(wire) << (stream ? " stream" : " json")
      << " model=" << model << " path=" << path << " tokens=" << tokens
      << " interval=" << interval_ms << "ms cut=" << cut << " fail=" << fail_times << "x"
      << fail_status << " budget=" << budget_ms << "ms" << (reset ? " rst" : "");
    return s.str();
  }

  Headers headers() const {
    Headers h = {{"content-type", "application/json"},
                 {"x-mock-request-id", id},
                 {"x-mock-tokens", std::to_string(tokens)}};
    if (interval_ms > 0) h.emplace_back("x-mock-token-interval-ms", std::to_string(interval_ms));
    switch (scenario) {
      case Scenario::StallCancel:
      case Scenario::BudgetStall:
        h.emplace_back("x-mock-stall-after-tokens", std::to_string(cut));
        h.emplace_back("x-mock-stall-ms", "-1");
        break;
      case Scenario::FinishLeave:
        // Long enough that the client is gone before the stream resumes.
        h.emplace_back("x-mock-stall-after-tokens", std::to_string(cut));
        h.emplace_back("x-mock-stall-ms", "300");
        break;
      case Scenario::LeaveBeforeHeaders:
      case Scenario::BudgetBeforeHeaders:
        h.emplace_back("x-mock-stall-before-headers-ms", "-1");
        break;
      case Scenario::AllAttemptsFail:
        h.emplace_back("x-mock-status", std::to_string(fail_status));
        break;
      default:
        break;
    }
    if (fail_times > 0) {
      h.emplace_back("x-mock-fail-times", std::to_string(fail_times));
      h.emplace_back("x-mock-fail-key", id);
      h.emplace_back("x-mock-status", std::to_string(fail_status));
      if (fail_status == 429) h.emplace_back("x-mock-retry-after-ms", "2");
    }
    if (budget_ms > 0) h.emplace_back("x-budget-ms", std::to_string(budget_ms));
    return h;
  }
};

// Deterministic for a seed on a given standard library (no <random> distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + gen_() % (hi - lo + 1); }
  bool percent(uint64_t p) { return gen_() % 100 < p; }
  template <typename T>
  T pick(const std::vector<T>& v) {
    return v[gen_() % v.size()];
  }

 private:
  std::mt19937_64 gen_;
};

Plan makePlan(size_t index, Rng& rng) {
  Plan p;
  p.id = "gt-" + std::to_string(index);
  struct Weighted {
    Scenario scenario;
    uint64_t weight;
  };
  static const std::vector<Weighted> kMix = {
      {Scenario::Complete, 34},           {Scenario::AllAttemptsFail, 4},
      {Scenario::FlowCancel, 18},         {Scenario::StallCancel, 8},
      {Scenario::FinishLeave, 10},        {Scenario::BudgetStall, 7},
      {Scenario::BudgetFlow, 8},          {Scenario::LeaveBeforeHeaders, 5},
      {Scenario::BudgetBeforeHeaders, 6},
  };
  uint64_t roll = rng.between(0, 99);
  for (const auto& w : kMix) {
    if (roll < w.weight) {
      p.scenario = w.scenario;
      break;
    }
    roll -= w.weight;
  }
  const bool finish = p.scenario == Scenario::FinishLeave;
  // The finish route's paths lose "/v1", which only the OpenAI paths survive.
  p.wire = finish ? rng.pick(std::vector<Wire>{Wire::ChatUsage, Wire::ChatNoUsage, Wire::Responses})
                  : rng.pick(std::vector<Wire>{Wire::ChatUsage, Wire::ChatNoUsage, Wire::Responses,
                                               Wire::Anthropic});
  p.model = p.wire == Wire::Anthropic
                ? rng.pick(std::vector<std::string>{"claude-sonnet-4-5", "claude-3-5-haiku-latest"})
                : rng.pick(std::vector<std::string>{"gpt-4o-mini", "gpt-4o-mini-2024-07-18",
                                                    "gpt-4o", "gpt-4o-2024-08-06", "o3-mini"});
  p.path = finish ? apiPath(p.wire).substr(3) : apiPath(p.wire);
  p.reset = rng.percent(50);
  auto maybeRetries = [&](uint64_t percent) {
    if (!rng.percent(percent)) return;
    p.fail_times = static_cast<uint32_t>(rng.between(1, kAttempts - 1));
    p.fail_status = rng.pick(std::vector<int>{429, 500, 503});
  };
  switch (p.scenario) {
    case Scenario::Complete:
      p.stream = rng.percent(65);
      p.tokens = rng.percent(5) ? 0 : static_cast<uint32_t>(rng.between(1, 80));
      if (rng.percent(30)) p.interval_ms = static_cast<uint32_t>(rng.between(1, 2));
      maybeRetries(30);
      break;
    case Scenario::AllAttemptsFail:
      p.stream = rng.percent(50);
      p.fail_status = rng.pick(std::vector<int>{500, 503});
      break;
    case Scenario::FlowCancel:
      // Paced like a real model (~100 tokens/s): a cut mid-flow leaves about
      // one token in flight, not a burst.
      p.tokens = static_cast<uint32_t>(rng.between(20, 60));
      p.interval_ms = static_cast<uint32_t>(rng.between(8, 12));
      p.cut = static_cast<uint32_t>(rng.between(1, p.tokens - 1));
      maybeRetries(20);
      break;
    case Scenario::StallCancel:
      p.tokens = static_cast<uint32_t>(rng.between(5, 60));
      p.cut = static_cast<uint32_t>(rng.between(1, p.tokens));
      maybeRetries(20);
      break;
    case Scenario::FinishLeave:
      p.tokens = static_cast<uint32_t>(rng.between(10, 60));
      p.cut = static_cast<uint32_t>(rng.between(1, p.tokens));
      maybeRetries(20);
      break;
    case Scenario::BudgetStall:
      p.tokens = static_cast<uint32_t>(rng.between(5, 60));
      p.cut = static_cast<uint32_t>(rng.between(1, p.tokens));
      p.budget_ms = static_cast<uint32_t>(rng.between(40, 150));
      break;
    case Scenario::BudgetFlow:
      p.tokens = static_cast<uint32_t>(rng.between(40, 80));
      p.interval_ms = static_cast<uint32_t>(rng.between(8, 12));
      p.budget_ms = static_cast<uint32_t>(rng.between(60, 250));  // < 40 tokens x 8 ms
      maybeRetries(10);
      break;
    case Scenario::LeaveBeforeHeaders:
      p.stream = rng.percent(50);
      break;
    case Scenario::BudgetBeforeHeaders:
      p.stream = rng.percent(50);
      p.budget_ms = static_cast<uint32_t>(rng.between(30, 80));
      break;
  }
  // Prompts of varied size give every request its own input count.
  const std::string prompt(rng.between(0, 600), static_cast<char>('a' + index % 26));
  p.body = requestBody(p.wire, p.model, p.stream, prompt);
  return p;
}

// ---- one client -----------------------------------------------------------------------

struct Observation {
  int status = 0;         // 0: no response head
  bool complete = false;  // the response ended as its framing says
  bool left = false;      // the client closed or reset before that
  uint64_t tokens = 0;    // deltas (or answer tokens) parsed, in order
  std::string error;
};

Observation observe(const Plan& p, const TestResponse& r, bool left) {
  Observation o;
  o.status = r.status;
  o.complete = r.complete;
  o.left = left;
  if (r.status != 200) return o;
  const Parsed parsed = p.stream     ? parseSse(p.wire, r.body)
                        : r.complete ? parseJsonAnswer(p.wire, r.body)
                                     : Parsed{};
  o.tokens = parsed.tokens();
  o.error = parsed.error;
  return o;
}

void leave(TestConnection& conn, bool reset) {
  if (reset) {
    conn.reset();
  } else {
    conn.close();
  }
}

Observation runClient(const Plan& p, uint16_t port, MockLlm& mock) {
  TestConnection conn(port);
  conn.sendRequest("POST", p.path, p.headers(), p.body);
  switch (p.scenario) {
    case Scenario::FlowCancel:
    case Scenario::StallCancel:
    case Scenario::FinishLeave: {
      conn.readUntil(
          [&](const TestResponse& r) {
            return r.complete || (r.status != 0 && r.status != 200) ||
                   parseSse(p.wire, r.body).tokens() >= p.cut;
          },
          seconds(30));
      // What already reached the client's socket was delivered: take it too.
      conn.readAvailable();
      const TestResponse r = conn.completed().empty() ? conn.current() : conn.completed().back();
      Observation o = observe(p, r, !r.complete);
      leave(conn, p.reset);
      return o;
    }
    case Scenario::LeaveBeforeHeaders: {
      mock.waitForEntry(
          p.id, [](const json&) { return true; }, seconds(30));
      conn.readAvailable();
      Observation o = observe(p, conn.current(), true);
      leave(conn, p.reset);
      return o;
    }
    default:
      return observe(p, conn.readResponse(seconds(30)), false);
  }
}

// ---- what sluice must report ------------------------------------------------------------

struct Range {
  double lo = 0;
  double hi = 0;
  void add(double low, double high) {
    lo += low;
    hi += high;
  }
  bool contains(double v, double slack = 0) const { return v >= lo - slack && v <= hi + slack; }
};

std::ostream& operator<<(std::ostream& os, const Range& r) {
  return os << "[" << r.lo << ", " << r.hi << "]";
}

struct ModelExpectation {
  uint64_t requests = 0;
  uint64_t input_delivered = 0;  // exact
  uint64_t input_leaked = 0;     // exact
  Range output_total;            // delivered + leaked
  Range output_delivered;
  uint64_t emitted = 0;            // the mock's tokens_emitted, 2xx attempts
  uint64_t emitted_estimated = 0;  // ... of requests sluice had to estimate
  uint64_t received = 0;           // deltas the clients parsed (finish route excluded)
  uint64_t in_flight = 0;          // E - R over cut streams: the delivered tolerance
  // Output of attempts that failed before sluice read their head (a budget
  // ending while the answer sat in the socket): emitted, never seen by sluice.
  uint64_t unseen = 0;
  std::map<std::string, Range> leaked_usd;  // by cancel_reason
};

enum class Outcome { Complete, Failed, Cut, FinishLeft, LeftBeforeHeaders };

const char* toString(Outcome o) {
  switch (o) {
    case Outcome::Complete:
      return "complete";
    case Outcome::Failed:
      return "failed";
    case Outcome::Cut:
      return "cut";
    case Outcome::FinishLeft:
      return "finish-left";
    case Outcome::LeftBeforeHeaders:
      return "left-before-headers";
  }
  return "?";
}

Outcome classify(const Plan& p, const Observation& o) {
  if (p.scenario == Scenario::LeaveBeforeHeaders) return Outcome::LeftBeforeHeaders;
  if (o.complete) return o.status >= 200 && o.status < 300 ? Outcome::Complete : Outcome::Failed;
  return p.scenario == Scenario::FinishLeave ? Outcome::FinishLeft : Outcome::Cut;
}

bool budgetScenario(Scenario s) {
  return s == Scenario::BudgetStall || s == Scenario::BudgetFlow ||
         s == Scenario::BudgetBeforeHeaders;
}

// Adds one request's share to its model's expectation; checks the request
// itself (did the workload do what sluice will be judged on?).
void expect(const Plan& p, const Observation& o, const std::vector<json>& attempts,
            ModelExpectation& m) {
  SCOPED_TRACE(p.describe());
  EXPECT_TRUE(o.error.empty()) << o.error;
  const Outcome outcome = classify(p, o);
  const Price& price = priceFor(p.model);

  // The attempt the provider billed: the one the mock answered 2xx (failures
  // before the first byte are not billed, and sluice meters them as 0).
  const json* billed = nullptr;
  uint32_t failed = 0;
  for (const json& a : attempts) {
    const int status = a.value("status", 0);
    if (status >= 200 && status < 300) {
      EXPECT_EQ(billed, nullptr) << "two billed attempts";
      billed = &a;
    } else {
      ++failed;
    }
  }
  const uint64_t emitted = billed ? (*billed)["tokens_emitted"].get<uint64_t>() : 0;
  const uint64_t input = billed ? (*billed)["input_tokens"].get<uint64_t>() : 0;
  const bool usage_reported = billed && (*billed)["usage_reported"].get<bool>();
  const uint64_t received = o.tokens;
  m.requests++;
  m.emitted += emitted;

  // What each scenario may legitimately turn into.
  switch (p.scenario) {
    case Scenario::Complete:
      EXPECT_EQ(outcome, Outcome::Complete) << "status " << o.status;
      EXPECT_EQ(failed, p.fail_times);
      EXPECT_EQ(emitted, p.tokens);
      break;
    case Scenario::AllAttemptsFail:
      EXPECT_EQ(o.status, p.fail_status);
      EXPECT_EQ(failed, kAttempts);
      break;
    case Scenario::StallCancel:
      EXPECT_EQ(outcome, Outcome::Cut);
      EXPECT_EQ(received, p.cut) << "the mock paused after " << p.cut;
      EXPECT_EQ(emitted, p.cut);
      break;
    case Scenario::FinishLeave:
      EXPECT_EQ(outcome, Outcome::FinishLeft);
      EXPECT_EQ(received, p.cut) << "the mock paused after " << p.cut;
      EXPECT_EQ(emitted, p.tokens) << "sluice drains a finish attempt to its end";
      EXPECT_EQ(usage_reported, p.wire != Wire::ChatNoUsage);
      break;
    case Scenario::BudgetStall:
      EXPECT_TRUE(outcome == Outcome::Cut || (outcome == Outcome::Failed && o.status == 504))
          << toString(outcome) << " " << o.status;
      EXPECT_LE(emitted, p.cut);
      break;
    case Scenario::BudgetFlow:
      EXPECT_TRUE(outcome == Outcome::Cut || outcome == Outcome::Complete ||
                  (outcome == Outcome::Failed && o.status == 504))
          << toString(outcome) << " " << o.status;
      break;
    case Scenario::FlowCancel:
      EXPECT_TRUE(outcome == Outcome::Cut || outcome == Outcome::Complete) << toString(outcome);
      break;
    case Scenario::LeaveBeforeHeaders:
      EXPECT_EQ(o.status, 0);
      EXPECT_EQ(emitted, 0u);
      break;
    case Scenario::BudgetBeforeHeaders:
      EXPECT_EQ(o.status, 504);
      EXPECT_EQ(emitted, 0u);
      break;
  }

  const std::string reason = budgetScenario(p.scenario) ? "budget_exhausted" : "client_disconnect";
  auto leak = [&](uint64_t input_tokens, double output_lo, double output_hi) {
    const double in_usd = input_tokens * price.input_usd_per_mtok / 1e6;
    m.leaked_usd[reason].add(in_usd + output_lo * price.output_usd_per_mtok / 1e6,
                             in_usd + output_hi * price.output_usd_per_mtok / 1e6);
  };

  switch (outcome) {
    case Outcome::Complete:
      // Whole answer, every token received, every token delivered.
      EXPECT_EQ(received, emitted);
      m.output_total.add(emitted, emitted);
      m.output_delivered.add(received, received);
      m.received += received;
      m.input_delivered += input;
      if (p.stream && p.wire == Wire::ChatNoUsage) m.emitted_estimated += emitted;
      break;
    case Outcome::FinishLeft:
      // Drained to the end after the client left: all of it leaked (§3).
      m.output_total.add(emitted, emitted);
      (received > 0 ? m.input_delivered : m.input_leaked) += input;
      leak(received > 0 ? 0 : input, emitted, emitted);
      if (p.wire == Wire::ChatNoUsage) m.emitted_estimated += emitted;
      break;
    case Outcome::Cut: {
      // See "in flight" at the top: R <= delivered <= total <= E.
      const uint64_t upper =
          p.wire == Wire::Anthropic && o.status == 200 ? std::max<uint64_t>(emitted, 1) : emitted;
      EXPECT_LE(received, upper);
      m.output_total.add(received, upper);
      m.output_delivered.add(received, upper);
      m.received += received;
      m.in_flight += upper - std::min(received, upper);
      m.emitted_estimated += emitted;
      (received > 0 ? m.input_delivered : m.input_leaked) += input;
      leak(received > 0 ? 0 : input, 0, upper - std::min(received, upper));
      break;
    }
    case Outcome::Failed:
    case Outcome::LeftBeforeHeaders:
      // No output reached the client; an accepted attempt's input is leaked.
      EXPECT_EQ(received, 0u);
      m.output_total.add(0, emitted);
      m.emitted_estimated += emitted;
      m.unseen += emitted;
      m.input_leaked += input;
      if (input > 0 || emitted > 0) leak(input, 0, emitted);
      break;
  }
}

// ---- reading sluice -------------------------------------------------------------------------

// One /metrics scrape: sums of the samples of a name whose labels include the given ones.
class Scrape {
 public:
  explicit Scrape(std::string text) : text_(std::move(text)) {}
  double sum(const std::string& name, const Headers& labels) const {
    std::istringstream in(text_);
    double total = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
      bool all = true;
      for (const auto& [k, v] : labels) {
        all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
      }
      if (all) total += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return total;
  }
  double tokens(const std::string& model, const char* kind, const char* disposition) const {
    return sum("sluice_tokens_total",
               {{"model", model}, {"kind", kind}, {"disposition", disposition}});
  }
  double usd(const std::string& model, const char* disposition) const {
    return sum("sluice_spend_usd_total", {{"model", model}, {"disposition", disposition}});
  }

 private:
  std::string text_;
};

json exchanges(SluiceUnderTest& sluice) {
  const auto r = httpRequest(sluice.adminPort(), "GET", "/exchanges");
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("exchanges") ? j["exchanges"] : json::array();
}

// Accounting happens when an exchange ends, and the mock finalises its ledger
// entries on its own loop: wait for both facts before reading either side.
void waitUntilSettled(SluiceUnderTest& sluice, MockLlm& mock) {
  EXPECT_TRUE(waitUntil([&] { return exchanges(sluice).empty(); }, seconds(60)))
      << "exchanges still in flight: " << exchanges(sluice).dump();
  EXPECT_TRUE(waitUntil(
      [&] {
        for (const json& e : mock.ledger()) {
          if (e.value("finished_us", 0) == 0) return false;
        }
        return true;
      },
      seconds(60)))
      << "the mock's ledger never settled";
  // An HTTP/1.1 answer is booked when its client's reading is known (its
  // close, or a look at its socket 5 and 25 ms after the answer;
  // docs/reference/metrics.md, "Delivered means read"), a little after its
  // exchange ended: wait until the spend counters stop moving.
  auto spendLines = [&] {
    std::istringstream in(sluice.metricsText());
    std::string lines;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("sluice_tokens_total{", 0) == 0 ||
          line.rfind("sluice_spend_usd_total{", 0) == 0) {
        lines += line + "\n";
      }
    }
    return lines;
  };
  std::string last = spendLines();
  auto quiet_since = std::chrono::steady_clock::now();
  EXPECT_TRUE(waitUntil(
      [&] {
        std::string now = spendLines();
        if (now != last) {
          last = std::move(now);
          quiet_since = std::chrono::steady_clock::now();
          return false;
        }
        return std::chrono::steady_clock::now() - quiet_since >= milliseconds(60);
      },
      seconds(60)))
      << "the spend counters kept moving";
}

bool nearUsd(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-12 + 1e-9 * std::fabs(expected);
}

// sluice's USD is its own token counts at the configured price.
void expectPricedConsistently(const Scrape& s, const Price& price) {
  SCOPED_TRACE(price.pattern);
  for (const char* disposition : {"delivered", "leaked"}) {
    const double expected =
        (s.tokens(price.pattern, "input", disposition) * price.input_usd_per_mtok +
         s.tokens(price.pattern, "output", disposition) * price.output_usd_per_mtok) /
        1e6;
    const double usd = s.usd(price.pattern, disposition);
    EXPECT_TRUE(nearUsd(usd, expected)) << disposition << " USD " << usd << " != " << expected;
  }
}

// ---- the test -------------------------------------------------------------------------------

void runMixedWorkload(bool shared_state);

TEST(GroundTruthTest, MixedWorkloadSpendMatchesTheMockAndTheClients) { runMixedWorkload(false); }

// The same with shared state on: Redis on the request path changes no count.
TEST(GroundTruthTest, MixedWorkloadSpendMatchesWithSharedStateOn) { runMixedWorkload(true); }

void runMixedWorkload(bool shared_state) {
  ignoreSigpipe();
  const uint64_t workload_seed = seed();
  SCOPED_TRACE("ground truth seed " + std::to_string(workload_seed) +
               " (GROUND_TRUTH_SEED=" + std::to_string(workload_seed) + " replays it)");
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  std::unique_ptr<RedisProcess> redis;
  if (shared_state) redis = std::make_unique<RedisProcess>();
  SluiceUnderTest sluice(config(mock.url(), redis ? redis->url() : ""));
  if (shared_state) {
    ASSERT_TRUE(waitUntil([&] { return sluice.metric("sluice_shared_state_up", {}) == 1; }))
        << "sluice never reached Redis";
  }

  Rng rng(workload_seed);
  std::vector<Plan> plans;
  for (size_t i = 0; i < kRequests; ++i) plans.push_back(makePlan(i, rng));

  const auto started = std::chrono::steady_clock::now();
  std::vector<Observation> observations(plans.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> clients;
  for (size_t c = 0; c < kConcurrentClients; ++c) {
    clients.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < plans.size();) {
        observations[i] = runClient(plans[i], sluice.port(), mock);
      }
    });
  }
  for (auto& t : clients) t.join();
  waitUntilSettled(sluice, mock);
  const auto took = std::chrono::steady_clock::now() - started;

  std::map<std::string, std::vector<json>> attempts;
  for (const json& e : mock.ledger()) attempts[e.value("id", "")].push_back(e);
  const Scrape scrape(sluice.metricsText());

  std::map<std::string, ModelExpectation> models;
  std::map<std::string, int> outcomes;
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i];
    expect(p, observations[i], attempts[p.id], models[priceFor(p.model).pattern]);
    outcomes[std::string(toString(p.scenario)) + "/" + toString(classify(p, observations[i]))]++;
  }

  std::cout << "[ground truth] seed " << workload_seed << ", " << plans.size() << " requests in "
            << std::chrono::duration_cast<milliseconds>(took).count() << " ms\n";
  for (const auto& [what, n] : outcomes) std::cout << "  " << what << ": " << n << "\n";

  std::vector<Price> labels(std::begin(kPrices), std::end(kPrices));
  labels.push_back(kOther);
  for (const Price& price : labels) {
    const std::string label = price.pattern;
    SCOPED_TRACE("model " + label);
    const ModelExpectation& m = models[label];
    ASSERT_GT(m.requests, 0u) << "the workload must cover every pricing entry";

    const double in_delivered = scrape.tokens(label, "input", "delivered");
    const double in_leaked = scrape.tokens(label, "input", "leaked");
    const double out_delivered = scrape.tokens(label, "output", "delivered");
    const double out_leaked = scrape.tokens(label, "output", "leaked");
    const double out_total = out_delivered + out_leaked;
    std::cout << "  " << label << ": " << m.requests << " requests; output emitted " << m.emitted
              << " (estimated part " << m.emitted_estimated << "), sluice " << out_total
              << " (delivered " << out_delivered << ", leaked " << out_leaked
              << "); clients received " << m.received << ", in-flight allowance " << m.in_flight
              << ", used " << out_delivered - static_cast<double>(m.received) << "; input "
              << in_delivered << "/" << in_leaked << "\n";

    // Input: exact, and split by whether the client got output.
    EXPECT_EQ(in_delivered, m.input_delivered) << "delivered input tokens";
    EXPECT_EQ(in_leaked, m.input_leaked) << "leaked input tokens";

    // Output: delivered + leaked vs what the mock emitted.
    EXPECT_TRUE(m.output_total.contains(out_total))
        << "delivered + leaked output " << out_total << " outside " << m.output_total
        << " (emitted " << m.emitted << ")";
    // What failed attempts emitted may have been torn down unread (up to m.unseen).
    const double tolerance = 0.02 * static_cast<double>(m.emitted_estimated);
    EXPECT_LE(out_total, static_cast<double>(m.emitted) + tolerance)
        << "delivered + leaked output " << out_total << " vs emitted " << m.emitted
        << ": more than 2% of the estimated " << m.emitted_estimated;
    EXPECT_GE(out_total, static_cast<double>(m.emitted - m.unseen) - tolerance)
        << "delivered + leaked output " << out_total << " vs emitted " << m.emitted << " ("
        << m.unseen << " of it by attempts that failed before sluice read them)"
        << ": more than 2% of the estimated " << m.emitted_estimated;

    // Output: delivered vs what the clients parsed, within what was in flight.
    EXPECT_TRUE(m.output_delivered.contains(out_delivered))
        << "delivered output " << out_delivered << " outside " << m.output_delivered
        << " (clients received " << m.received << ", in flight " << m.in_flight << ")";

    // USD: sluice's own tokens at the configured price, and the leak by reason.
    expectPricedConsistently(scrape, price);
    double by_reason = 0;
    for (const char* reason :
         {"client_disconnect", "budget_exhausted", "circuit_open", "rate_limited", "overloaded",
          "upstream_timeout", "draining", "upstream_reset"}) {
      const double usd = scrape.sum("sluice_leaked_spend_usd_total",
                                    {{"model", label}, {"cancel_reason", reason}});
      by_reason += usd;
      const auto it = m.leaked_usd.find(reason);
      const Range expected = it == m.leaked_usd.end() ? Range{} : it->second;
      EXPECT_TRUE(expected.contains(usd, 1e-12 + 1e-9 * expected.hi))
          << "leaked USD for " << reason << ": " << usd << " outside " << expected;
    }
    EXPECT_TRUE(nearUsd(by_reason, scrape.usd(label, "leaked")))
        << "every leak in this workload has a cancel_reason";
    if (price.input_usd_per_mtok == 0) {
      EXPECT_GT(in_delivered + in_leaked, 0) << "unpriced models still count tokens";
      EXPECT_EQ(scrape.usd(label, "delivered") + scrape.usd(label, "leaked"), 0);
    }
  }
}

// ---- bytes sluice buffered for a slow client
// ------------------------------------------------------

struct SlowCase {
  Wire wire;
  std::string model;
  enum class End { ClientClose, ClientReset, Drain } end;
};

// The state a slow stream must hold still in while it ends: what sluice
// forwarded and still buffers (/exchanges), and what reached the client's
// socket unread. The last moves whenever the kernel lets a zero window creep
// open (its window probes do, after a while), and only then can sluice's
// buffer drain.
struct SlowState {
  uint64_t forwarded = 0;
  uint64_t buffered = 0;
  size_t unread = 0;
  bool paused = false;
  bool operator==(const SlowState&) const = default;
};

std::optional<SlowState> slowState(SluiceUnderTest& sluice, const TestConnection& conn) {
  const json list = exchanges(sluice);
  if (list.size() != 1 || !list[0].value("client_attached", false)) return std::nullopt;
  SlowState s;
  s.forwarded = list[0]["response_bytes"].get<uint64_t>();
  s.buffered = list[0]["downstream_buffered_bytes"].get<uint64_t>();
  s.paused = list[0].value("upstream_paused", false);
  s.unread = conn.unreadBytes();
  return s;
}

// Waits until sluice paused the upstream for the client that stopped reading
// and nothing has moved over three polls.
std::optional<SlowState> waitQuiescent(SluiceUnderTest& sluice, const TestConnection& conn) {
  std::optional<SlowState> last;
  int same = 0;
  waitUntil(
      [&] {
        const auto now = slowState(sluice, conn);
        same = now && now->paused && last && *now == *last ? same + 1 : 0;
        last = now;
        return same >= 3;
      },
      seconds(20), milliseconds(5));
  if (same < 3) return std::nullopt;
  return last;
}

TEST(GroundTruthTest, BytesBufferedForASlowClientAreNotDelivered) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 60000;  // far more than the socket buffers and the 64 KiB watermark
  constexpr uint32_t kRead = 5;        // deltas the client reads before it stops reading
  constexpr int kTries = 10;           // only when the kernel moved bytes while the stream ended
  const std::vector<SlowCase> cases = {
      {Wire::ChatUsage, "gpt-4o-mini", SlowCase::End::ClientClose},
      {Wire::Responses, "gpt-4o", SlowCase::End::ClientReset},
      {Wire::Anthropic, "claude-sonnet-4-5", SlowCase::End::ClientClose},
      {Wire::ChatNoUsage, "gpt-4o", SlowCase::End::Drain},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const SlowCase& c = cases[k];
    SCOPED_TRACE(std::string("slow reader ") + toString(c.wire));
    const std::string body = requestBody(c.wire, c.model, true, "slow reader");
    auto headersFor = [&](const std::string& id) {
      return Headers{{"content-type", "application/json"},
                     {"x-mock-request-id", id},
                     {"x-mock-tokens", std::to_string(kTokens)}};
    };
    // The same answer straight from the mock (ids all of one length): where
    // each delta's event ends in the body.
    const TestResponse ref = httpRequest(mock.port(), "POST", apiPath(c.wire),
                                         headersFor("gt-sref-" + std::to_string(k) + "-0"), body);
    const Parsed layout = parseSse(c.wire, ref.body);
    ASSERT_EQ(layout.tokens(), kTokens) << layout.error;
    auto deltasWithin = [&](uint64_t bytes) {
      return static_cast<uint64_t>(
          std::upper_bound(layout.delta_ends.begin(), layout.delta_ends.end(), bytes) -
          layout.delta_ends.begin());
    };

    for (int attempt = 1;; ++attempt) {
      const std::string id = "gt-slow-" + std::to_string(k) + "-" + std::to_string(attempt);
      SluiceUnderTest sluice(config(mock.url()));  // fresh counters; draining ends it
      TestConnection conn(sluice.port(), /*receive_buffer=*/4096);
      conn.sendRequest("POST", apiPath(c.wire), headersFor(id), body);
      const TestResponse& head = conn.readUntil(
          [&](const TestResponse& r) { return parseSse(c.wire, r.body).tokens() >= kRead; },
          seconds(10));
      const Parsed got = parseSse(c.wire, head.body);
      ASSERT_GE(got.tokens(), kRead) << got.error;
      for (size_t i = 0; i < got.tokens(); ++i) {
        ASSERT_EQ(got.delta_ends[i], layout.delta_ends[i]) << "the reference layout differs";
      }

      // End the stream while it is quiescent, and make sure it still was.
      std::optional<SlowState> quiet;
      bool held_still = true;
      if (c.end == SlowCase::End::Drain) {
        quiet = waitQuiescent(sluice, conn);
        ASSERT_TRUE(quiet) << "the stream never went quiescent: " << exchanges(sluice);
        // sluice cuts the stream (cancel → `draining`) with the client still
        // attached and bytes still in its buffer: the path a budget, a stall
        // or an upstream reset takes too. Nothing may reach the client's
        // socket meanwhile, or sluice's buffer may have drained a little.
        sluice.server().drain();
        held_still = conn.unreadBytes() == quiet->unread;
        conn.close();
      } else {
        // Re-check right before leaving: after this the client's RST stops
        // sluice's writes.
        do {
          quiet = waitQuiescent(sluice, conn);
          ASSERT_TRUE(quiet) << "the stream never went quiescent: " << exchanges(sluice);
        } while (slowState(sluice, conn) != quiet);
        leave(conn, c.end == SlowCase::End::ClientReset);
      }
      waitUntilSettled(sluice, mock);
      if (!held_still) {
        ASSERT_LT(attempt, kTries) << "the kernel kept moving bytes while the stream ended";
        std::cout << "[slow reader] bytes moved while the stream ended; again\n";
        continue;
      }

      const json entry = mock.entry(id);
      const Scrape after(sluice.metricsText());
      const std::string label = priceFor(c.model).pattern;
      auto tokens = [&](const char* kind, const char* disposition) {
        return after.tokens(label, kind, disposition);
      };
      const uint64_t seen = deltasWithin(quiet->forwarded);
      // A stream the client left: what left sluice's buffer counts as
      // delivered (its socket is gone; docs/reference/metrics.md). A stream
      // sluice cut with the client still there: only what the client read
      // (its socket's unread bytes are looked at before it resets).
      const uint64_t delivered = c.end == SlowCase::End::Drain
                                     ? got.tokens()
                                     : deltasWithin(quiet->forwarded - quiet->buffered);
      std::cout << "[slow reader] " << toString(c.wire) << ": forwarded " << quiet->forwarded
                << " bytes (" << seen << " deltas), " << quiet->buffered
                << " still buffered; delivered " << tokens("output", "delivered") << " (expected "
                << delivered << "), leaked " << tokens("output", "leaked") << " (expected "
                << seen - delivered << "); the mock emitted " << entry["tokens_emitted"] << "\n";
      ASSERT_GT(seen, delivered) << "sluice's buffer must hold whole events to test anything";
      ASSERT_EQ(tokens("output", "delivered") + tokens("output", "leaked"), seen)
          << "sluice read on after the quiescent snapshot: the check below would be unsound";
      if (c.end == SlowCase::End::Drain) {
        // Chunk framing is mapped to body bytes by its share of the span
        // read (docs/reference/metrics.md): within a chunk or two.
        EXPECT_NEAR(tokens("output", "delivered"), delivered, 2)
            << "what the client read before sluice cut the stream";
      } else {
        EXPECT_EQ(tokens("output", "delivered"), delivered)
            << "deltas whose events left sluice's buffer before the stream ended";
      }
      EXPECT_EQ(tokens("output", "leaked"), seen - tokens("output", "delivered"))
          << "the rest of what sluice read";
      if (c.end != SlowCase::End::Drain) {
        EXPECT_GE(tokens("output", "delivered"), got.tokens()) << "at least what the client parsed";
      }
      if (c.end == SlowCase::End::Drain) {
        EXPECT_LT(got.tokens(), deltasWithin(quiet->forwarded - quiet->buffered))
            << "the client's socket must hold unread whole events to test anything";
      }
      // What sluice never read (still in the sockets between it and the mock
      // when it closed the upstream) it cannot count: usage never arrived.
      EXPECT_GE(entry["tokens_emitted"].get<uint64_t>(), seen);
      EXPECT_EQ(tokens("input", "delivered"), entry["input_tokens"].get<double>());
      EXPECT_EQ(tokens("input", "leaked"), 0);
      const char* reason = c.end == SlowCase::End::Drain ? "draining" : "client_disconnect";
      const double leaked_usd =
          after.sum("sluice_leaked_spend_usd_total", {{"model", label}, {"cancel_reason", reason}});
      EXPECT_TRUE(nearUsd(leaked_usd,
                          tokens("output", "leaked") * priceFor(c.model).output_usd_per_mtok / 1e6))
          << "leaked USD " << leaked_usd;
      break;
    }
  }
}

// ---- leaky clients: the answer written whole, read or not ------------------------------
//
// A whole answer fits in the kernel's socket buffers: sluice writes all of it
// and the exchange ends whether or not anyone reads. Its spend is booked once
// the client's reading is known (docs/reference/metrics.md, "Delivered means
// read"): the next request, a FIN, or a look at the socket of a client on
// this host that shows nothing unread — read; a reset — the part the last
// look found unread is not, under client_abandoned.

// Whether the request's spend is booked yet (its input is, delivered or leaked).
bool spendBooked(SluiceUnderTest& sluice, const std::string& label) {
  const Scrape s(sluice.metricsText());
  return s.tokens(label, "input", "delivered") + s.tokens(label, "input", "leaked") > 0;
}

// A client that stops reading: sluice's spend stays unbooked while the
// client says nothing; it closes (RST with unread data, FIN with none).
void expectHeldUntilTheClientCloses(SluiceUnderTest& sluice, const std::string& label,
                                    TestConnection& conn) {
  EXPECT_FALSE(
      waitUntil([&] { return spendBooked(sluice, label); }, std::chrono::milliseconds(300)))
      << "booked before the client said whether it read the answer";
  conn.close();
}

// The client closes — a FIN when it read everything, else (unread data) a
// reset after sluice was seen holding the spend — and sluice books it.
Scrape closeAndScrape(SluiceUnderTest& sluice, const std::string& label, TestConnection& conn,
                      bool read_everything) {
  if (read_everything) {
    conn.close();
  } else {
    expectHeldUntilTheClientCloses(sluice, label, conn);
  }
  EXPECT_TRUE(waitUntil([&] { return spendBooked(sluice, label); })) << "never booked";
  return Scrape(sluice.metricsText());
}

// A response the request's budget cut, against the mock's ledger: what the
// client parsed was delivered, the rest of what the mock emitted leaked under
// `budget_exhausted`; the input goes with the client's reading.
void expectCutLeakAsTheLedger(const Scrape& s, const Price& price, const char* what,
                              uint64_t emitted, uint64_t input, uint64_t parsed, bool reads) {
  const std::string label = price.pattern;
  const double out_delivered = s.tokens(label, "output", "delivered");
  const double out_leaked = s.tokens(label, "output", "leaked");
  std::cout << "[" << what << "] client parsed " << parsed << " of " << emitted
            << "; sluice delivered " << out_delivered << ", leaked " << out_leaked << " (ledger "
            << emitted - parsed << ")\n";
  // What the mock emitted after sluice's last read (in flight when the
  // budget cut the upstream) sluice cannot count: a token or two.
  EXPECT_LE(out_delivered + out_leaked, emitted);
  EXPECT_GE(out_delivered + out_leaked + 2, emitted);
  EXPECT_EQ(out_delivered, parsed);
  const double ledger_leaked = static_cast<double>(emitted - parsed);
  EXPECT_LE(std::fabs(out_leaked - ledger_leaked), std::max(2.0, 0.05 * ledger_leaked))
      << "sluice leaked " << out_leaked << ", the ledger " << ledger_leaked;
  EXPECT_EQ(s.tokens(label, "input", reads ? "delivered" : "leaked"), input);
  const double budget = s.sum("sluice_leaked_spend_usd_total",
                              {{"model", label}, {"cancel_reason", "budget_exhausted"}});
  EXPECT_TRUE(nearUsd(budget, s.usd(label, "leaked"))) << "the leak is the cut's: " << budget;
  expectPricedConsistently(s, price);
}

struct LeakyCase {
  const char* what;
  uint32_t read_deltas;  // deltas the client parses before it stops reading (0: none)
  bool read_all;         // reads the answer whole, keeps the socket
};

// A leaky client's answer as sluice booked it (`s`) against the mock's
// ledger: leaked = emitted - what the client parsed, within 5% or one event
// (a chunk's framing, or a DATA frame the client's read ended inside, is
// mapped to body bytes by proportion); the whole leak client_abandoned.
void expectLeakAsTheLedger(const Scrape& s, const Price& price, const LeakyCase& c, const char* tag,
                           uint64_t emitted, uint64_t input, uint64_t parsed) {
  const std::string label = price.pattern;
  const double out_delivered = s.tokens(label, "output", "delivered");
  const double out_leaked = s.tokens(label, "output", "leaked");
  const double ledger_leaked = static_cast<double>(emitted - parsed);
  std::cout << "[" << tag << "] " << c.what << ": client parsed " << parsed << " of " << emitted
            << "; sluice delivered " << out_delivered << ", leaked " << out_leaked << " (ledger "
            << ledger_leaked << ")\n";
  EXPECT_EQ(out_delivered + out_leaked, emitted);
  EXPECT_LE(std::fabs(out_leaked - ledger_leaked), std::max(1.0, 0.05 * ledger_leaked))
      << "sluice leaked " << out_leaked << ", the ledger " << ledger_leaked;
  const double abandoned = s.sum("sluice_leaked_spend_usd_total",
                                 {{"model", label}, {"cancel_reason", "client_abandoned"}});
  if (c.read_all) {
    EXPECT_EQ(out_leaked, 0);
    EXPECT_EQ(s.tokens(label, "input", "delivered"), input);
    EXPECT_EQ(abandoned, 0);
  } else {
    // The input is delivered once any output was read (as the ledger says).
    EXPECT_EQ(s.tokens(label, "input", parsed > 0 ? "delivered" : "leaked"), input);
    EXPECT_TRUE(nearUsd(abandoned, s.usd(label, "leaked")))
        << "the whole leak is client_abandoned: " << abandoned;
    EXPECT_GT(abandoned, 0);
  }
  expectPricedConsistently(s, price);
}

TEST(GroundTruthTest, LeakyHttp1ClientsAreBookedAsReadNotAsWritten) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 40;
  const std::vector<LeakyCase> cases = {
      {"never reads, closes later (reset)", 0, false},
      {"reads 3 deltas, stops, closes later (reset)", 3, false},
      {"reads 17 deltas, stops, closes later (reset)", 17, false},
      {"reads it all, keeps the socket, closes later (FIN)", kTokens, true},
  };
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (size_t k = 0; k < cases.size(); ++k) {
    const LeakyCase& c = cases[k];
    SCOPED_TRACE(c.what);
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    const std::string id = "gt-leaky-" + std::to_string(k);
    const std::string body = requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "leaky");
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"content-type", "application/json"},
                      {"x-mock-request-id", id},
                      {"x-mock-tokens", std::to_string(kTokens)},
                      {"x-mock-token-interval-ms", "2"}},
                     body);
    uint64_t parsed = 0;
    if (c.read_all) {
      const TestResponse r = conn.readResponse(seconds(10));
      ASSERT_TRUE(r.complete);
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
    } else if (c.read_deltas > 0) {
      const TestResponse& r = conn.readUntil(
          [&](const TestResponse& r) {
            return parseSse(Wire::ChatUsage, r.body).tokens() >= c.read_deltas;
          },
          seconds(10));
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
      ASSERT_FALSE(r.complete) << "the client must stop before the end";
    }
    // The answer is written whole and the exchange has ended...
    mock.waitForEntry(id, [](const json& e) { return e.value("finished_us", 0) != 0; });
    waitUntilSettled(sluice, mock);
    const json entry = mock.entry(id);
    const uint64_t emitted = entry["tokens_emitted"].get<uint64_t>();
    const uint64_t input = entry["input_tokens"].get<uint64_t>();
    ASSERT_EQ(emitted, kTokens) << entry.dump();
    auto booked = [&] { return spendBooked(sluice, label); };
    if (c.read_all) {
      // ... a client that read it all is booked without closing: a look at
      // its socket finds nothing unread.
      ASSERT_TRUE(waitUntil(booked)) << "a fully read answer was never booked";
    }
    // ... but an unread one is not booked while the client says nothing (the
    // looks at its socket keep finding unread bytes).
    const Scrape s = closeAndScrape(sluice, label, conn, c.read_all);
    expectLeakAsTheLedger(s, price, c, "leaky", emitted, input, parsed);
  }
}

// A client that read the whole answer and resets its connection at once
// (an abortive close, as the mixed workload's cancelling clients do when the
// answer beat their cancel): the reset comes before sluice's first look at
// its socket. It was booked as all unread; it read everything.
TEST(GroundTruthTest, AClientThatReadItAllAndResetsAtOnceIsBookedAsRead) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 20;
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (int k = 0; k < 3; ++k) {
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    const std::string id = "gt-read-reset-" + std::to_string(k);
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"content-type", "application/json"},
                      {"x-mock-request-id", id},
                      {"x-mock-tokens", std::to_string(kTokens)}},
                     requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "read then reset"));
    const TestResponse r = conn.readResponse(seconds(10));
    ASSERT_TRUE(r.complete);
    ASSERT_EQ(parseSse(Wire::ChatUsage, r.body).tokens(), kTokens);
    conn.reset();
    ASSERT_TRUE(waitUntil([&] { return spendBooked(sluice, label); })) << "never booked";
    const Scrape s(sluice.metricsText());
    EXPECT_EQ(s.tokens(label, "output", "delivered"), kTokens);
    EXPECT_EQ(s.tokens(label, "output", "leaked"), 0);
    EXPECT_EQ(s.tokens(label, "input", "leaked"), 0);
  }
}

// The same over HTTP/2, on a connection that served a stream before: the
// first stream is read whole and booked by a look at the client's socket;
// the second is read whole too, then the client resets at once, before any
// look since the second ended. The first stream's look said nothing about
// the second, whose bytes came after its read point: it was booked as all
// unread.
TEST(GroundTruthTest, AnHttp2ClientThatReadASecondStreamAndResetsAtOnceIsBookedAsRead) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 20;
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (int k = 0; k < 3; ++k) {
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    H2Connection h2(sluice.port());
    ASSERT_TRUE(h2.connected());
    auto readWhole = [&](const std::string& id) {
      const int32_t stream = h2.submit("POST", "/v1/chat/completions",
                                       {{"content-type", "application/json"},
                                        {"x-mock-request-id", id},
                                        {"x-mock-tokens", std::to_string(kTokens)}},
                                       requestBody(Wire::ChatUsage, "gpt-4o-mini", true, id));
      EXPECT_GT(stream, 0);
      const H2Response& r = h2.response(stream);
      EXPECT_TRUE(h2.runUntil([&] { return r.complete; }));
      EXPECT_EQ(parseSse(Wire::ChatUsage, r.body).tokens(), kTokens);
    };
    const auto delivered = [&] {
      return Scrape(sluice.metricsText()).tokens(label, "output", "delivered");
    };
    readWhole("gt-h2-second-" + std::to_string(k) + "-a");
    // Booked by a look (the client keeps its socket): the connection has a read point.
    ASSERT_TRUE(waitUntil([&] { return delivered() == kTokens; })) << "never booked";
    readWhole("gt-h2-second-" + std::to_string(k) + "-b");
    h2.abort();
    ASSERT_TRUE(waitUntil([&] {
      const Scrape s(sluice.metricsText());
      return s.tokens(label, "output", "delivered") + s.tokens(label, "output", "leaked") >=
             2 * kTokens;
    })) << "the second stream was never booked";
    const Scrape s(sluice.metricsText());
    EXPECT_EQ(s.tokens(label, "output", "delivered"), 2 * kTokens);
    EXPECT_EQ(s.tokens(label, "output", "leaked"), 0);
    EXPECT_EQ(s.tokens(label, "input", "leaked"), 0);
  }
}

// A response sluice cuts itself (here: the request's budget) with the client
// still connected: what was written may sit unread in the client's socket.
// It is held like a whole answer and looked at once at once (the client may
// reset at any moment); a FIN after reading books what it read. The leak
// stays under the cut's reason.
TEST(GroundTruthTest, LeakyHttp1ClientsOfACutResponseAreBookedAsRead) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (const bool reads : {false, true}) {
    SCOPED_TRACE(reads ? "reads to the cut, then closes (FIN)" : "never reads, closes (reset)");
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    const std::string id = std::string("gt-leaky-cut-") + (reads ? "read" : "unread");
    const std::string body = requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "leaky cut");
    TestConnection conn(sluice.port());
    conn.sendRequest("POST", "/v1/chat/completions",
                     {{"content-type", "application/json"},
                      {"x-mock-request-id", id},
                      {"x-mock-tokens", "400"},
                      {"x-mock-token-interval-ms", "2"},
                      {"x-budget-ms", "200"}},
                     body);
    uint64_t parsed = 0;
    if (reads) {
      const TestResponse r = conn.readResponse(seconds(10));  // to sluice's FIN
      ASSERT_FALSE(r.complete);
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
    }
    mock.waitForEntry(id, [](const json& e) { return e.value("finished_us", 0) != 0; });
    waitUntilSettled(sluice, mock);
    const json entry = mock.entry(id);
    const uint64_t emitted = entry["tokens_emitted"].get<uint64_t>();
    const uint64_t input = entry["input_tokens"].get<uint64_t>();
    ASSERT_GT(emitted, 0u);
    ASSERT_LT(emitted, 400u) << "the budget did not cut the stream";
    const Scrape s = closeAndScrape(sluice, label, conn, reads);
    expectCutLeakAsTheLedger(s, price, "leaky cut", emitted, input, parsed, reads);
  }
}

// The same leaky clients over HTTP/2 (cleartext, prior knowledge): the
// client reads its socket only when the test says, so what it did not read
// stays in its socket as it would under a synchronous client library. Each
// stream's DATA frames are placed on the connection's wire; a look at the
// client's socket (one per connection) gives the read point, and the frames
// before it are what was read.
TEST(GroundTruthTest, LeakyHttp2ClientsAreBookedAsReadNotAsWritten) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 40;
  const std::vector<LeakyCase> cases = {
      {"never reads, closes later (reset)", 0, false},
      {"reads 3 deltas, stops, closes later (reset)", 3, false},
      {"reads 17 deltas, stops, closes later (reset)", 17, false},
      {"reads it all, keeps the socket, closes later (FIN)", kTokens, true},
  };
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (size_t k = 0; k < cases.size(); ++k) {
    const LeakyCase& c = cases[k];
    SCOPED_TRACE(c.what);
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    const std::string id = "gt-leaky-h2-" + std::to_string(k);
    const std::string body = requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "leaky h2");
    H2Connection h2(sluice.port());
    ASSERT_TRUE(h2.connected());
    const int32_t stream = h2.submit("POST", "/v1/chat/completions",
                                     {{"content-type", "application/json"},
                                      {"x-mock-request-id", id},
                                      {"x-mock-tokens", std::to_string(kTokens)},
                                      {"x-mock-token-interval-ms", "2"}},
                                     body);
    ASSERT_GT(stream, 0);
    uint64_t parsed = 0;
    const H2Response& r = h2.response(stream);
    if (c.read_all) {
      ASSERT_TRUE(h2.runUntil([&] { return r.complete; }));
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
    } else if (c.read_deltas > 0) {
      ASSERT_TRUE(
          h2.runUntil([&] { return parseSse(Wire::ChatUsage, r.body).tokens() >= c.read_deltas; }));
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
      ASSERT_FALSE(r.complete) << "the client must stop before the end";
    } else {
      ASSERT_TRUE(h2.runUntil([] { return true; }));  // sends the request, reads nothing
    }
    // The answer is written whole and the exchange has ended...
    mock.waitForEntry(id, [](const json& e) { return e.value("finished_us", 0) != 0; });
    waitUntilSettled(sluice, mock);
    const json entry = mock.entry(id);
    const uint64_t emitted = entry["tokens_emitted"].get<uint64_t>();
    const uint64_t input = entry["input_tokens"].get<uint64_t>();
    ASSERT_EQ(emitted, kTokens) << entry.dump();
    auto booked = [&] { return spendBooked(sluice, label); };
    if (c.read_all) {
      // ... a client that read it all is booked without closing.
      ASSERT_TRUE(waitUntil(booked)) << "a fully read answer was never booked";
    } else {
      // ... an unread one is not booked while the client says nothing.
      EXPECT_FALSE(waitUntil(booked, std::chrono::milliseconds(300)))
          << "booked before the client said whether it read the answer";
    }
    h2.drop();  // unread bytes in its socket: a reset; none: a FIN
    EXPECT_TRUE(waitUntil(booked)) << "never booked";
    const Scrape s(sluice.metricsText());
    expectLeakAsTheLedger(s, price, c, "leaky h2", emitted, input, parsed);
  }
}

// A response sluice cuts itself (the request's budget) on an HTTP/2 stream
// whose client is still connected: RST_STREAM(CANCEL) after a final SSE
// error event. What was written may sit unread in the client's socket: held
// like a whole answer, and the leak stays under the cut's reason.
TEST(GroundTruthTest, LeakyHttp2ClientsOfACutResponseAreBookedAsRead) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  for (const bool reads : {false, true}) {
    SCOPED_TRACE(reads ? "reads to the cut, keeps the socket" : "never reads, closes (reset)");
    SluiceUnderTest sluice(config(mock.url()));  // fresh counters
    const std::string id = std::string("gt-leaky-h2-cut-") + (reads ? "read" : "unread");
    const std::string body = requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "leaky h2 cut");
    H2Connection h2(sluice.port());
    ASSERT_TRUE(h2.connected());
    const int32_t stream = h2.submit("POST", "/v1/chat/completions",
                                     {{"content-type", "application/json"},
                                      {"x-mock-request-id", id},
                                      {"x-mock-tokens", "400"},
                                      {"x-mock-token-interval-ms", "2"},
                                      {"x-budget-ms", "200"}},
                                     body);
    ASSERT_GT(stream, 0);
    uint64_t parsed = 0;
    const H2Response& r = h2.response(stream);
    if (reads) {
      ASSERT_TRUE(h2.waitForStream(stream));  // to sluice's RST_STREAM
      ASSERT_FALSE(r.complete);
      ASSERT_TRUE(r.reset_by_peer);
      parsed = parseSse(Wire::ChatUsage, r.body).tokens();
    } else {
      ASSERT_TRUE(h2.runUntil([] { return true; }));  // sends the request, reads nothing
    }
    mock.waitForEntry(id, [](const json& e) { return e.value("finished_us", 0) != 0; });
    waitUntilSettled(sluice, mock);
    const json entry = mock.entry(id);
    const uint64_t emitted = entry["tokens_emitted"].get<uint64_t>();
    const uint64_t input = entry["input_tokens"].get<uint64_t>();
    ASSERT_GT(emitted, 0u);
    ASSERT_LT(emitted, 400u) << "the budget did not cut the stream";
    auto booked = [&] { return spendBooked(sluice, label); };
    if (reads) {
      ASSERT_TRUE(waitUntil(booked)) << "a cut read to its end was never booked";
    } else {
      EXPECT_FALSE(waitUntil(booked, std::chrono::milliseconds(300)))
          << "booked before the client said whether it read the answer";
    }
    h2.drop();
    EXPECT_TRUE(waitUntil(booked)) << "never booked";
    const Scrape s(sluice.metricsText());
    expectCutLeakAsTheLedger(s, price, "leaky h2 cut", emitted, input, parsed, reads);
  }
}

// An HTTP/2 client that reads its socket but never opens a stream's
// flow-control window again: the answer's rest stays in sluice (the
// exchange has ended: it fits the stream's buffer). Once the client read all
// that went out and opened no window for limits.idle_timeout, the rest is
// booked unread, without waiting for the connection to end.
TEST(GroundTruthTest, AnHttp2StreamWhoseWindowStaysShutIsBookedAfterTheIdleTimeout) {
  ignoreSigpipe();
  MockLlm mock;
  ASSERT_NE(mock.port(), 0);
  constexpr uint32_t kTokens = 40;
  const Price& price = priceFor("gpt-4o-mini");
  const std::string label = price.pattern;
  SluiceUnderTest sluice(config(mock.url()) + "limits:\n  idle_timeout: 300ms\n");
  const std::string id = "gt-leaky-h2-window";
  const std::string body = requestBody(Wire::ChatUsage, "gpt-4o-mini", true, "leaky h2 window");
  H2ClientOptions options;
  options.manual_window = true;
  options.initial_window = 1024;  // a few events of a 40-event answer
  H2Connection h2(sluice.port(), options);
  ASSERT_TRUE(h2.connected());
  const int32_t stream = h2.submit("POST", "/v1/chat/completions",
                                   {{"content-type", "application/json"},
                                    {"x-mock-request-id", id},
                                    {"x-mock-tokens", std::to_string(kTokens)},
                                    {"x-mock-token-interval-ms", "2"}},
                                   body);
  ASSERT_GT(stream, 0);
  h2.hold(stream);
  const H2Response& r = h2.response(stream);
  ASSERT_TRUE(h2.runUntil([&] { return r.body.size() >= 1024; })) << r.body.size();
  mock.waitForEntry(id, [](const json& e) { return e.value("finished_us", 0) != 0; });
  waitUntilSettled(sluice, mock);
  ASSERT_FALSE(r.complete);
  const uint64_t parsed = parseSse(Wire::ChatUsage, r.body).tokens();
  const json entry = mock.entry(id);
  const uint64_t emitted = entry["tokens_emitted"].get<uint64_t>();
  ASSERT_EQ(emitted, kTokens) << entry.dump();
  // Booked with the socket still open (the connection is not idle: the
  // stream is still open, its rest waiting for the window).
  ASSERT_TRUE(waitUntil([&] { return spendBooked(sluice, label); })) << "never booked";
  const Scrape s(sluice.metricsText());
  const double out_delivered = s.tokens(label, "output", "delivered");
  const double out_leaked = s.tokens(label, "output", "leaked");
  const double ledger_leaked = static_cast<double>(emitted - parsed);
  std::cout << "[leaky h2 window] client parsed " << parsed << " of " << emitted
            << "; sluice delivered " << out_delivered << ", leaked " << out_leaked << " (ledger "
            << ledger_leaked << ")\n";
  EXPECT_GT(parsed, 0u);
  EXPECT_EQ(out_delivered + out_leaked, emitted);
  // The last frame the client read may end inside an event: one event either way.
  EXPECT_LE(std::fabs(out_leaked - ledger_leaked), std::max(1.0, 0.05 * ledger_leaked))
      << "sluice leaked " << out_leaked << ", the ledger " << ledger_leaked;
  const double abandoned = s.sum("sluice_leaked_spend_usd_total",
                                 {{"model", label}, {"cancel_reason", "client_abandoned"}});
  EXPECT_TRUE(nearUsd(abandoned, s.usd(label, "leaked"))) << abandoned;
  expectPricedConsistently(s, price);
}

}  // namespace
}  // namespace sluice::test
