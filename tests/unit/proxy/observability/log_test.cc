// Tests for operational log lines (proxy/observability/log.h, docs/design.md §7): one JSON object
// per line with ts, level and the human message first, then typed fields.

#include "proxy/observability/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice {
namespace {

TEST(LogLineTest, TsLevelMsgThenFields) {
  std::string out;
  const std::string reason = "test.yaml:8:5: upstreams[0].colour: unknown key";
  renderLogLine(out, SystemTime(std::chrono::seconds(1'767'225'600)), LogLevel::Warn,
                "sluice: reload rejected, keeping the running config: " + reason,
                {{"event", "reload_rejected"},
                 {"reason", reason},
                 {"workers", 4},
                 {"fraction", 0.5},
                 {"tls", false}});
  ASSERT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);
  EXPECT_EQ(out.rfind("{\"ts\":\"2026-01-01T00:00:00.000Z\",\"level\":\"warn\",\"msg\":", 0), 0u)
      << out;
  // The human message survives verbatim (tests and people grep for it).
  EXPECT_NE(out.find("sluice: reload rejected, keeping the running config: " + reason),
            std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["event"], "reload_rejected");
  EXPECT_EQ(j["reason"], reason);
  EXPECT_EQ(j["workers"], 4);
  EXPECT_EQ(j["fraction"], 0.5);
  EXPECT_EQ(j["tls"], false);
}

TEST(LogLineTest, LevelNames) {
  EXPECT_EQ(toString(LogLevel::Debug), "debug");
  EXPECT_EQ(toString(LogLevel::Info), "info");
  EXPECT_EQ(toString(LogLevel::Warn), "warn");
  EXPECT_EQ(toString(LogLevel::Error), "error");
}

TEST(LogLineTest, MessagesWithNewlinesStayOneLine) {
  std::string out;
  renderLogLine(out, SystemTime{}, LogLevel::Error, "two\nlines \"quoted\"", {});
  EXPECT_EQ(out.find('\n'), out.size() - 1);
  EXPECT_EQ(nlohmann::json::parse(out)["msg"], "two\nlines \"quoted\"");
}

}  // namespace
}  // namespace sluice
