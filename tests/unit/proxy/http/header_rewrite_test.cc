// Tests for the upstream/downstream header rewrite (proxy/http/header_rewrite.h,
// RFC 9110 §7.6.1). Upstreams come from inline YAML through the real loader,
// so the URL parsing (default ports, IPv6, base paths) and `${VAR}` expansion
// the rewrite relies on are exercised too.

#include "proxy/http/header_rewrite.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config/loader.h"

namespace sluice {
namespace {

using Entries = std::vector<HeaderMap::Entry>;

// A fake environment: only the variables given exist.
config::EnvLookup fakeEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (name == "UPSTREAM_KEY") return std::string("sk-upstream-secret");
    return std::nullopt;
  };
}

// Loads a config whose only upstream has `url` and the given extra YAML lines
// (indented under the upstream entry). Fails the test on a config error.
config::ConfigPtr loadUpstream(const std::string& url, const std::string& extra = "") {
  const std::string yaml =
      "listen: 127.0.0.1:0\n"
      "upstreams:\n"
      "  - name: up\n"
      "    url: " +
      url + "\n" + extra;
  auto r = config::loadConfigString(yaml, "rewrite_test.yaml", fakeEnv());
  EXPECT_TRUE(r.ok()) << (r.error ? r.error->toString() : "no error") << "\n" << yaml;
  return r.config;
}

RequestHead request(std::string method, std::string path, Entries headers) {
  RequestHead h;
  h.method = std::move(method);
  h.path = std::move(path);
  for (const auto& [n, v] : headers) h.headers.add(n, v);
  return h;
}

std::vector<std::string_view> values(const HeaderMap& h, std::string_view name) {
  return h.getAll(name);
}

// Every hop-by-hop field of RFC 9110 §7.6.1 (Connection, Proxy-Connection,
// Keep-Alive, TE, Transfer-Encoding, Upgrade) plus the RFC 2616 §13.5.1 ones
// the implementation also treats as hop-by-hop, in mixed case.
const std::vector<std::pair<std::string, std::string>> kHopByHop = {
    {"Connection", "keep-alive"},
    {"Keep-Alive", "timeout=5, max=100"},
    {"Proxy-Connection", "keep-alive"},
    {"TE", "trailers"},
    {"Transfer-Encoding", "chunked"},
    {"Upgrade", "h2c"},
    {"Trailer", "x-checksum"},
    {"Proxy-Authenticate", "Basic realm=\"proxy\""},
    {"Proxy-Authorization", "Basic Zm9vOmJhcg=="},
};

// ---------------------------------------------------------------------------
// stripHopByHop

TEST(StripHopByHopTest, RemovesEachHopByHopFieldAlone) {
  for (const auto& [name, value] : kHopByHop) {
    HeaderMap h;
    h.add("accept", "*/*");
    h.add(name, value);
    h.add("content-type", "application/json");
    stripHopByHop(h);
    EXPECT_FALSE(h.has(name)) << name;
    EXPECT_EQ(h.entries(), (Entries{{"accept", "*/*"}, {"content-type", "application/json"}}))
        << name;
  }
}

TEST(StripHopByHopTest, RemovesAllOfThemTogetherAndEveryCopy) {
  HeaderMap h;
  h.add("x-keep", "1");
  for (const auto& [name, value] : kHopByHop) {
    h.add(name, value);
    h.add(toLower(name), value);  // a second copy, different case
  }
  h.add("x-keep", "2");
  stripHopByHop(h);
  EXPECT_EQ(h.entries(), (Entries{{"x-keep", "1"}, {"x-keep", "2"}}));
}

TEST(StripHopByHopTest, RemovesFieldsNamedInConnection) {
  struct Row {
    std::string label;
    std::vector<std::string> connection_values;  // one Connection header each
    Entries before;                              // the other headers
    Entries after;
  };
  const Row kRows[] = {
      {"one token", {"X-Foo"}, {{"x-foo", "1"}, {"x-bar", "2"}}, {{"x-bar", "2"}}},
      {"list",
       {"x-foo, x-bar"},
       {{"x-foo", "1"}, {"x-bar", "2"}, {"x-baz", "3"}},
       {{"x-baz", "3"}}},
      {"multiple Connection headers",
       {"x-foo", "X-Bar"},
       {{"x-foo", "1"}, {"x-bar", "2"}, {"x-baz", "3"}},
       {{"x-baz", "3"}}},
      {"odd spacing and tabs",
       {"  x-foo ,\tx-bar\t,   x-baz  "},
       {{"x-foo", "1"}, {"x-bar", "2"}, {"x-baz", "3"}, {"x-qux", "4"}},
       {{"x-qux", "4"}}},
      {"empty list members",
       {",, x-foo ,,", ""},
       {{"x-foo", "1"}, {"x-bar", "2"}},
       {{"x-bar", "2"}}},
      {"mixed case names and tokens",
       {"X-FOO, x-Bar"},
       {{"X-Foo", "1"}, {"X-BAR", "2"}, {"x-foo", "3"}, {"Accept", "*/*"}},
       {{"accept", "*/*"}}},
      {"close and keep-alive are options, not fields",
       {"close", "Keep-Alive"},
       {{"accept", "*/*"}, {"keep-alive", "timeout=5"}},
       {{"accept", "*/*"}}},
      {"named field absent", {"x-missing"}, {{"x-foo", "1"}}, {{"x-foo", "1"}}},
      {"does not match by prefix",
       {"x-foo"},
       {{"x-foo-bar", "1"}, {"x-fo", "2"}},
       {{"x-foo-bar", "1"}, {"x-fo", "2"}}},
  };
  for (const auto& row : kRows) {
    HeaderMap h;
    for (const auto& [n, v] : row.before) h.add(n, v);
    for (const auto& c : row.connection_values) h.add("Connection", c);
    stripHopByHop(h);
    EXPECT_EQ(h.entries(), row.after) << row.label;
  }
}

TEST(StripHopByHopTest, ConnectionAfterTheNamedFieldStillCounts) {
  HeaderMap h;
  h.add("x-secret", "1");
  h.add("x-other", "2");
  h.add("connection", "x-secret");
  h.add("x-secret", "3");
  stripHopByHop(h);
  EXPECT_EQ(h.entries(), (Entries{{"x-other", "2"}}));
}

TEST(StripHopByHopTest, EmptyMapStaysEmpty) {
  HeaderMap h;
  stripHopByHop(h);
  EXPECT_TRUE(h.empty());
}

// ---------------------------------------------------------------------------
// rewriteRequestForUpstream

class RewriteRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = loadUpstream("http://api.example.com");
    ASSERT_NE(config_, nullptr);
  }
  const config::UpstreamConfig& up() const { return config_->upstreams.at(0); }

  config::ConfigPtr config_;
};

TEST_F(RewriteRequestTest, RemovesHopByHopAndConnectionNamedFields) {
  Entries in{{"Accept", "*/*"}};
  for (const auto& [n, v] : kHopByHop) in.emplace_back(n, v);
  in.emplace_back("Connection", "X-Internal-Trace");
  in.emplace_back("X-Internal-Trace", "abc");
  auto head = request("POST", "/v1/chat/completions", in);
  rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{"10.0.0.1", false});
  for (const auto& [n, v] : kHopByHop) EXPECT_FALSE(head.headers.has(n)) << n;
  EXPECT_FALSE(head.headers.has("x-internal-trace"));
  EXPECT_EQ(values(head.headers, "accept"), std::vector<std::string_view>{"*/*"});
}

TEST_F(RewriteRequestTest, RemovesContentLengthForReframing) {
  auto head = request("POST", "/v1/chat/completions",
                      {{"Content-Length", "42"},
                       {"content-length", "42"},
                       {"Transfer-Encoding", "chunked"},
                       {"content-type", "application/json"}});
  rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{"10.0.0.1", false});
  EXPECT_FALSE(head.headers.has("content-length"));
  EXPECT_FALSE(head.headers.has("transfer-encoding"));
  EXPECT_EQ(values(head.headers, "content-type"),
            std::vector<std::string_view>{"application/json"});
}

TEST_F(RewriteRequestTest, RemovesClientSuppliedSluiceHeaders) {
  auto head = request("POST", "/v1/chat/completions",
                      {{"X-Sluice-Attempts", "7"},
                       {"x-sluice-route", "admin"},
                       {"X-SLUICE-ANYTHING", "forged"},
                       {"x-sluice-", "empty suffix"},
                       {"x-sluice", "no dash: not ours"},
                       {"x-sluicer", "not ours"},
                       {"x-my-x-sluice-thing", "not ours"},
                       {"x-budget-ms", "1000"}});
  rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{"10.0.0.1", false});
  for (const auto& [name, value] : head.headers) {
    EXPECT_NE(name.rfind("x-sluice-", 0), 0u) << name << " leaked upstream";
  }
  EXPECT_TRUE(head.headers.has("x-sluice"));
  EXPECT_TRUE(head.headers.has("x-sluicer"));
  EXPECT_TRUE(head.headers.has("x-my-x-sluice-thing"));
  EXPECT_EQ(*head.headers.get("x-budget-ms"), "1000");  // the budget filter owns this one
}

TEST_F(RewriteRequestTest, RemovesSluiceHeadersSpelledWithUnderscores) {
  // nginx and others map `_` in field names to `-`: both spellings are ours.
  auto head = request("POST", "/v1/chat/completions",
                      {{"x_sluice_attempts", "7"},
                       {"X_Sluice_Route", "admin"},
                       {"x-sluice_mixed", "forged"},
                       {"x_sluice-mixed", "forged"},
                       {"x_sluicer", "not ours"},
                       {"x_my_sluice_thing", "not ours"}});
  rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{"10.0.0.1", false});
  for (const auto& [name, value] : head.headers) {
    EXPECT_FALSE(isSluiceHeader(name)) << name << " leaked upstream";
  }
  EXPECT_EQ(head.headers.getAll("x_sluice_attempts").size(), 0u);
  EXPECT_TRUE(head.headers.has("x_sluicer"));
  EXPECT_TRUE(head.headers.has("x_my_sluice_thing"));
}

TEST(RewriteRequestHostTest, HostIsTheUpstreamAuthority) {
  struct Row {
    std::string url;
    std::string host;
  };
  const Row kRows[] = {
      {"http://api.example.com", "api.example.com"},
      {"http://api.example.com:80", "api.example.com"},  // default port omitted
      {"https://api.example.com", "api.example.com"},
      {"https://api.example.com:443", "api.example.com"},  // default port omitted
      {"http://api.example.com:8080", "api.example.com:8080"},
      {"https://api.example.com:8443", "api.example.com:8443"},
      {"http://api.example.com:443", "api.example.com:443"},  // 443 is not http's default
      {"https://api.example.com:80", "api.example.com:80"},   // 80 is not https' default
      {"HTTP://API.Example.COM:9000/v1", "api.example.com:9000"},
      {"http://127.0.0.1:11434", "127.0.0.1:11434"},
      {"http://[::1]:8080", "[::1]:8080"},  // IPv6 bracketed
      {"http://[::1]", "[::1]"},
      {"https://[2001:db8::1]:443", "[2001:db8::1]"},
      {"https://[2001:db8::1]:8443/base", "[2001:db8::1]:8443"},
  };
  for (const auto& row : kRows) {
    const auto cfg = loadUpstream(row.url);
    ASSERT_NE(cfg, nullptr) << row.url;
    auto head =
        request("GET", "/v1/models", {{"Host", "localhost:8080"}, {"host", "second.example"}});
    rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                              ClientInfo{"10.0.0.1", false});
    EXPECT_EQ(values(head.headers, "host"), std::vector<std::string_view>{row.host}) << row.url;
  }
}

TEST_F(RewriteRequestTest, HostAddedWhenClientSentNone) {
  auto head = request("GET", "/v1/models", {});  // e.g. HTTP/1.0 client
  rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{"10.0.0.1", false});
  EXPECT_EQ(values(head.headers, "host"), std::vector<std::string_view>{"api.example.com"});
}

TEST_F(RewriteRequestTest, XForwardedForAppendsTheClient) {
  struct Row {
    std::string label;
    std::vector<std::string> prior;
    std::string client;
    std::vector<std::string_view> expected;
  };
  const Row kRows[] = {
      {"no prior header", {}, "10.0.0.1", {"10.0.0.1"}},
      {"one prior header", {"203.0.113.7"}, "10.0.0.1", {"203.0.113.7, 10.0.0.1"}},
      {"one prior list",
       {"203.0.113.7, 198.51.100.2"},
       "10.0.0.1",
       {"203.0.113.7, 198.51.100.2, 10.0.0.1"}},
      {"several prior headers folded in order",
       {"203.0.113.7", "198.51.100.2, 192.0.2.9"},
       "10.0.0.1",
       {"203.0.113.7, 198.51.100.2, 192.0.2.9, 10.0.0.1"}},
      {"IPv6 client", {"203.0.113.7"}, "2001:db8::42", {"203.0.113.7, 2001:db8::42"}},
      {"unknown client address leaves the prior chain alone",
       {"203.0.113.7", "198.51.100.2"},
       "",
       {"203.0.113.7", "198.51.100.2"}},
      {"unknown client address, no prior", {}, "", {}},
  };
  for (const auto& row : kRows) {
    Entries in;
    for (const auto& p : row.prior) in.emplace_back("X-Forwarded-For", p);
    auto head = request("POST", "/v1/chat/completions", in);
    rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url, ClientInfo{row.client, false});
    EXPECT_EQ(values(head.headers, "x-forwarded-for"), row.expected) << row.label;
  }
}

TEST_F(RewriteRequestTest, XForwardedProtoIsTheListenersSchemeWhateverTheClientSaid) {
  struct Row {
    std::string label;
    std::optional<std::string> prior;
    bool tls;
    std::string expected;
  };
  const Row kRows[] = {
      {"plain, absent", std::nullopt, false, "http"},
      {"tls, absent", std::nullopt, true, "https"},
      {"plain, client said https", "https", false, "http"},
      {"tls, client said http", "http", true, "https"},
      {"plain, client said https twice", "https", false, "http"},
  };
  for (const auto& row : kRows) {
    Entries in;
    if (row.prior) in.emplace_back("X-Forwarded-Proto", *row.prior);
    if (row.label.find("twice") != std::string::npos) in.emplace_back("x-forwarded-proto", "https");
    auto head = request("POST", "/v1/chat/completions", in);
    rewriteRequestForUpstream(head, up(), up().endpoints.at(0).url,
                              ClientInfo{"10.0.0.1", row.tls});
    EXPECT_EQ(values(head.headers, "x-forwarded-proto"),
              std::vector<std::string_view>{row.expected})
        << row.label;
  }
}

TEST(RewriteRequestPathTest, UpstreamBasePathIsPrefixed) {
  struct Row {
    std::string url;
    std::string path;
    std::string expected;
  };
  const Row kRows[] = {
      {"http://h.example", "/v1/chat/completions", "/v1/chat/completions"},
      {"http://h.example/", "/v1/chat/completions", "/v1/chat/completions"},
      {"http://h.example/openai", "/v1/chat/completions", "/openai/v1/chat/completions"},
      {"http://h.example/openai/", "/v1/models", "/openai/v1/models"},  // trailing / dropped
      {"https://h.example:8443/a/b", "/v1/chat?stream=true", "/a/b/v1/chat?stream=true"},
      {"http://[::1]:9000/proxy", "/", "/proxy/"},
  };
  for (const auto& row : kRows) {
    const auto cfg = loadUpstream(row.url);
    ASSERT_NE(cfg, nullptr) << row.url;
    auto head = request("POST", row.path, {});
    rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                              ClientInfo{"10.0.0.1", false});
    EXPECT_EQ(head.path, row.expected) << row.url << " + " << row.path;
    EXPECT_EQ(head.method, "POST");
  }
}

TEST(RewriteRequestUpstreamHeadersTest, ConfiguredHeadersOverrideTheClients) {
  const auto cfg = loadUpstream("https://api.openai.com",
                                "    headers:\n"
                                "      Authorization: \"Bearer ${UPSTREAM_KEY}\"\n"
                                "      OpenAI-Organization: org-sluice\n"
                                "      x-sluice-upstream: configured\n");
  ASSERT_NE(cfg, nullptr);
  auto head = request("POST", "/v1/chat/completions",
                      {{"Authorization", "Bearer sk-client-1"},
                       {"authorization", "Bearer sk-client-2"},
                       {"openai-organization", "org-client"},
                       {"content-type", "application/json"},
                       {"x-sluice-upstream", "forged"}});
  rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                            ClientInfo{"10.0.0.1", true});
  EXPECT_EQ(values(head.headers, "authorization"),
            std::vector<std::string_view>{"Bearer sk-upstream-secret"});
  EXPECT_EQ(values(head.headers, "openai-organization"),
            std::vector<std::string_view>{"org-sluice"});
  // sluice's own configuration may use its namespace even though clients may not.
  EXPECT_EQ(values(head.headers, "x-sluice-upstream"), std::vector<std::string_view>{"configured"});
  EXPECT_EQ(values(head.headers, "content-type"),
            std::vector<std::string_view>{"application/json"});
}

TEST(RewriteRequestUpstreamHeadersTest, ConfiguredHeadersAddedWhenClientSentNone) {
  const auto cfg = loadUpstream("https://api.anthropic.com",
                                "    headers: {x-api-key: \"${UPSTREAM_KEY}\", "
                                "anthropic-version: \"2023-06-01\"}\n");
  ASSERT_NE(cfg, nullptr);
  auto head = request("POST", "/v1/messages", {{"content-type", "application/json"}});
  rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                            ClientInfo{"10.0.0.1", false});
  EXPECT_EQ(values(head.headers, "x-api-key"), std::vector<std::string_view>{"sk-upstream-secret"});
  EXPECT_EQ(values(head.headers, "anthropic-version"), std::vector<std::string_view>{"2023-06-01"});
}

TEST(RewriteRequestUpstreamHeadersTest, ConnectionCannotStripAConfiguredHeader) {
  // A client naming the API-key header in Connection must not stop sluice from sending it.
  const auto cfg = loadUpstream("https://api.openai.com",
                                "    headers: {authorization: \"Bearer ${UPSTREAM_KEY}\"}\n");
  ASSERT_NE(cfg, nullptr);
  auto head = request("POST", "/v1/chat/completions",
                      {{"Connection", "Authorization"}, {"Authorization", "Bearer sk-client"}});
  rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                            ClientInfo{"10.0.0.1", false});
  EXPECT_EQ(values(head.headers, "authorization"),
            std::vector<std::string_view>{"Bearer sk-upstream-secret"});
}

TEST(RewriteRequestEndToEndTest, FullRequestExactResult) {
  const auto cfg = loadUpstream("https://gateway.example:8443/openai/",
                                "    headers: {authorization: \"Bearer ${UPSTREAM_KEY}\"}\n");
  ASSERT_NE(cfg, nullptr);
  auto head = request("POST", "/v1/chat/completions?x=1",
                      {{"Host", "localhost:8080"},
                       {"User-Agent", "OpenAI/Python 1.40.0"},
                       {"Connection", "keep-alive, X-Trace"},
                       {"X-Trace", "t1"},
                       {"Content-Length", "17"},
                       {"Content-Type", "application/json"},
                       {"Authorization", "Bearer sk-client"},
                       {"X-Forwarded-For", "203.0.113.7"},
                       {"X-Sluice-Attempts", "3"},
                       {"Keep-Alive", "timeout=5"},
                       {"X-Budget-Ms", "5000"}});
  rewriteRequestForUpstream(head, cfg->upstreams.at(0), cfg->upstreams.at(0).endpoints.at(0).url,
                            ClientInfo{"192.0.2.1", false});
  EXPECT_EQ(head.path, "/openai/v1/chat/completions?x=1");
  EXPECT_EQ(head.headers.entries(), (Entries{{"user-agent", "OpenAI/Python 1.40.0"},
                                             {"content-type", "application/json"},
                                             {"x-budget-ms", "5000"},
                                             {"host", "gateway.example:8443"},
                                             {"x-forwarded-for", "203.0.113.7, 192.0.2.1"},
                                             {"x-forwarded-proto", "http"},
                                             {"authorization", "Bearer sk-upstream-secret"}}));
}

// requestForUpstream builds the head in one pass. The rules were first written
// as edits of a copy (strip, remove, set, set, add, set); that version is kept
// here as the reference, and random heads must come out of both the same,
// field for field and in order.
void referenceRewrite(RequestHead& head, const config::UpstreamConfig& upstream,
                      const config::UpstreamUrl& url, const ClientInfo& client) {
  HeaderMap& h = head.headers;
  std::vector<std::string> named;
  for (auto value : h.getAll("connection")) {
    while (!value.empty()) {
      const auto comma = value.find(',');
      const auto token = trimOws(value.substr(0, comma));
      if (!token.empty()) named.push_back(toLower(token));
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  for (const auto& name : named) h.remove(name);
  for (const auto& [name, unused] : kHopByHop) h.remove(name);
  h.remove("content-length");
  std::vector<std::string> forged;
  for (const auto& [name, value] : h) {
    if (isSluiceHeader(name)) forged.emplace_back(name);
  }
  for (const auto& name : forged) h.remove(name);
  h.set("host", url.authority());
  if (!client.address.empty()) {
    std::string xff;
    for (auto v : h.getAll("x-forwarded-for")) {
      if (!xff.empty()) xff += ", ";
      xff += v;
    }
    if (!xff.empty()) xff += ", ";
    xff += client.address;
    h.set("x-forwarded-for", xff);
  }
  h.remove("x-forwarded-proto");
  h.add("x-forwarded-proto", client.tls ? "https" : "http");
  if (!url.path_prefix.empty()) head.path = url.path_prefix + head.path;
  for (const auto& [name, value] : upstream.headers) h.set(name, value);
}

TEST(RequestForUpstreamTest, OnePassMatchesTheInPlaceRulesOnRandomHeads) {
  const auto cfg = loadUpstream("https://gateway.example:8443/openai/");
  ASSERT_NE(cfg, nullptr);
  const config::UpstreamUrl& url = cfg->upstreams.at(0).endpoints.at(0).url;
  const std::vector<std::string> names = {"Host",
                                          "host",
                                          "X-Forwarded-For",
                                          "x-forwarded-proto",
                                          "Content-Length",
                                          "Connection",
                                          "Keep-Alive",
                                          "TE",
                                          "Transfer-Encoding",
                                          "x-sluice-budget",
                                          "X_Sluice_Id",
                                          "x-sluicex",
                                          "Authorization",
                                          "Accept",
                                          "X-Custom",
                                          "x-custom",
                                          "Upgrade",
                                          "Proxy-Connection",
                                          "Expect",
                                          "X-Budget-Ms"};
  const std::vector<std::string> tokens = {"keep-alive", "X-Custom",         "close",
                                           "Accept",     "authorization",    "",
                                           " host ",     "X-Forwarded-Proto"};
  const std::vector<std::string> configurable = {"Authorization",     "Host",     "X-Forwarded-For",
                                                 "X-Forwarded-Proto", "x-custom", "Content-Length"};
  std::mt19937 rng(20261126);
  auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  for (int round = 0; round < 3000; ++round) {
    config::UpstreamConfig upstream = cfg->upstreams.at(0);
    upstream.headers.clear();
    for (const auto& name : configurable) {
      if (rng() % 4 == 0) upstream.headers.emplace_back(name, "configured-" + name);
    }
    Entries in;
    const size_t fields = rng() % 12;
    for (size_t i = 0; i < fields; ++i) {
      const std::string name = pick(names);
      std::string value = "v" + std::to_string(i);
      if (equalsIgnoreCase(name, "connection")) {
        value = pick(tokens);
        for (unsigned more = rng() % 3; more > 0; --more) value += "," + pick(tokens);
      }
      in.emplace_back(name, value);
    }
    const ClientInfo client{rng() % 3 == 0 ? "" : "192.0.2.1", rng() % 2 == 0};
    const RequestHead original = request("POST", "/v1/chat/completions", in);

    RequestHead expected = original;
    referenceRewrite(expected, upstream, url, client);
    const RequestHead got = requestForUpstream(original, upstream, url, client);
    ASSERT_EQ(got.headers.entries(), expected.headers.entries()) << "round " << round;
    ASSERT_EQ(got.path, expected.path);
    ASSERT_EQ(got.method, expected.method);
  }
}

// ---------------------------------------------------------------------------
// rewriteResponseForDownstream

TEST(RewriteResponseTest, RemovesHopByHopAndConnectionNamedFields) {
  ResponseHead head;
  head.status = 200;
  head.headers.add("Content-Type", "text/event-stream");
  for (const auto& [n, v] : kHopByHop) head.headers.add(n, v);
  head.headers.add("Connection", "X-Upstream-Internal");
  head.headers.add("X-Upstream-Internal", "1");
  head.headers.add("x-request-id", "req_123");
  rewriteResponseForDownstream(head);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.entries(),
            (Entries{{"content-type", "text/event-stream"}, {"x-request-id", "req_123"}}));
}

TEST(RewriteResponseTest, RemovesAnUpstreamsAttemptsHeader) {
  // The upstream may itself be a sluice; only our own x-sluice-attempts may reach the client.
  ResponseHead head;
  head.status = 429;
  head.headers.add("X-Sluice-Attempts", "3");
  head.headers.add("retry-after", "2");
  head.headers.add("x-ratelimit-remaining-requests", "0");
  rewriteResponseForDownstream(head);
  EXPECT_FALSE(head.headers.has("x-sluice-attempts"));
  EXPECT_EQ(head.headers.entries(),
            (Entries{{"retry-after", "2"}, {"x-ratelimit-remaining-requests", "0"}}));
}

TEST(RewriteTrailersTest, KeepsOnlyWhatMayTravelAsATrailer) {
  HeaderMap trailers;
  trailers.add("Content-Length", "999");
  trailers.add("Transfer-Encoding", "chunked");
  trailers.add("connection", "close");
  trailers.add("te", "trailers");
  trailers.add("host", "elsewhere");
  trailers.add("x-sluice-attempts", "9");
  trailers.add("grpc-status", "0");
  trailers.add("set-cookie", "session=userA");
  rewriteTrailersForDownstream(trailers);
  EXPECT_EQ(trailers.entries(), (Entries{{"grpc-status", "0"}, {"set-cookie", "session=userA"}}));
}

TEST(AcceptsTrailersTest, ReadsTheTeListCaseInsensitively) {
  const auto with = [](std::vector<std::pair<std::string, std::string>> fields) {
    HeaderMap headers;
    for (const auto& [name, value] : fields) headers.add(name, value);
    return acceptsTrailers(headers);
  };
  EXPECT_TRUE(with({{"te", "trailers"}}));
  EXPECT_TRUE(with({{"TE", "gzip;q=0.5, Trailers"}}));
  EXPECT_TRUE(with({{"te", "gzip"}, {"te", " trailers "}}));
  EXPECT_FALSE(with({}));
  EXPECT_FALSE(with({{"te", "gzip, deflate"}}));
  EXPECT_FALSE(with({{"trailer", "trailers"}}));
}

}  // namespace
}  // namespace sluice
