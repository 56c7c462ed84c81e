#include "filters/runs/run_cancel_request.h"

#include <gtest/gtest.h>

#include <string>

#include "config/loader.h"

namespace sluice {
namespace {

class RunCancelRequestTest : public ::testing::Test {
 protected:
  RunCancelRequestTest() { config_.cancel_token = "0123456789abcdef"; }
  std::optional<LocalReply> answer(const std::string& method, const std::string& path,
                                   const std::string& authorization = "") {
    RequestHead head;
    head.method = method;
    head.path = path;
    if (!authorization.empty()) head.headers.add("authorization", authorization);
    return answerRunCancelRequest(head, config_, table_);
  }
  ManualClock clock_;
  RunTable table_{clock_, RunTable::Limits{}};
  config::RunsConfig config_;
};

TEST_F(RunCancelRequestTest, TheRightBearerTokenCancelsTheRun) {
  int told = 0;
  table_.join("a/b", "", std::nullopt, [&](RunTable::Ending) { ++told; });
  const auto reply = answer("DELETE", "/sluice/runs/a%2Fb?x=1", "Bearer 0123456789abcdef");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->head.status, 202);
  EXPECT_NE(reply->body.find("\"tasks_cancelled\":1"), std::string::npos) << reply->body;
  EXPECT_EQ(told, 1);
  EXPECT_EQ(table_.snapshot("a/b")->state, "cancelled");
  EXPECT_EQ(answer("DELETE", "/sluice/runs/c", "bearer   0123456789abcdef ")->head.status, 202)
      << "the scheme is case-insensitive";
}

TEST_F(RunCancelRequestTest, AMissingOrWrongTokenIs401AndCancelsNothing) {
  for (const char* auth :
       {"", "Bearer 0123456789abcdeF", "Bearer 0123456789abcde", "Bearer 0123456789abcdef0",
        "Basic 0123456789abcdef", "0123456789abcdef", "Bearer"}) {
    const auto reply = answer("DELETE", "/sluice/runs/r", auth);
    ASSERT_TRUE(reply) << auth;
    EXPECT_EQ(reply->head.status, 401) << auth;
    EXPECT_TRUE(reply->head.headers.get("www-authenticate")) << auth;
  }
  EXPECT_FALSE(table_.snapshot("r")) << "not even a tombstone";
}

TEST_F(RunCancelRequestTest, OtherMethodsAre405AndBadIds400) {
  EXPECT_EQ(answer("POST", "/sluice/runs/r", "Bearer 0123456789abcdef")->head.status, 405);
  EXPECT_EQ(answer("DELETE", "/sluice/runs/", "Bearer 0123456789abcdef")->head.status, 400);
  EXPECT_EQ(answer("DELETE", "/sluice/runs/a/b", "Bearer 0123456789abcdef")->head.status, 400);
}

TEST_F(RunCancelRequestTest, OtherPathsAndNoTokenAreNotSluices) {
  EXPECT_FALSE(answer("DELETE", "/v1/chat/completions", "Bearer 0123456789abcdef"));
  EXPECT_FALSE(answer("DELETE", "/sluice/run/r", "Bearer 0123456789abcdef"));
  config_.cancel_token.clear();
  EXPECT_FALSE(answer("DELETE", "/sluice/runs/r", "Bearer 0123456789abcdef"));
}

TEST(RunsConfigTest, MaxUsdAndACancelTokenFromTheEnvironment) {
  const std::string head =
      "listen: 127.0.0.1:0\nupstreams: [{name: u, url: \"http://127.0.0.1:9\"}]\n"
      "routes: [{name: r, match: {path_prefix: /}, upstream: u}]\n";
  const config::EnvLookup env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "RUN_CANCEL_TOKEN") return "a-long-enough-secret";
    if (name == "SHORT") return "short";
    return std::nullopt;
  };
  auto ok = config::loadConfigString(
      head + "runs: {max_usd: 2.5, cancel_token: \"${RUN_CANCEL_TOKEN}\"}\n", "t.yaml", env);
  ASSERT_TRUE(ok.ok()) << ok.error->toString();
  EXPECT_DOUBLE_EQ(ok.config->runs->max_usd, 2.5);
  EXPECT_EQ(ok.config->runs->cancel_token, "a-long-enough-secret");
  const auto short_token =
      config::loadConfigString(head + "runs: {cancel_token: \"${SHORT}\"}\n", "t.yaml", env);
  ASSERT_FALSE(short_token.ok());
  EXPECT_NE(short_token.error->toString().find("at least 16"), std::string::npos);
  EXPECT_EQ(short_token.error->toString().find("short\""), std::string::npos)
      << "the secret is not echoed";
  EXPECT_FALSE(config::loadConfigString(head + "runs: {max_usd: -1}\n", "t.yaml", env).ok());
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(constantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(constantTimeEquals("secret-tokeN", "secret-token"));
  EXPECT_FALSE(constantTimeEquals("secret", "secret-token"));
  EXPECT_FALSE(constantTimeEquals("secret-token-and-more", "secret-token"));
  EXPECT_FALSE(constantTimeEquals("", "secret-token"));
}

}  // namespace
}  // namespace sluice
