// Tests for ExchangeRecord (proxy/exchange/exchange_record.h): what a request
// leaves for its access log line.

#include "proxy/exchange/exchange_record.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(ExchangeRecordTest, AnEmptyRecordFillsNullsAndZeros) {
  ExchangeRecord record;
  AccessRecord r;
  record.fill(r, MonotonicTime{});
  EXPECT_FALSE(r.ttfb_ms.has_value());
  EXPECT_TRUE(r.retry_causes.empty());
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.bytes_out, 0u);
  EXPECT_EQ(r.run_id, "");
  EXPECT_EQ(r.jsonrpc_method, "");
  EXPECT_FALSE(record.jsonRpcId().has_value());
}

TEST(ExchangeRecordTest, TheFirstByteIsTheFirstNotedAndTtfbCountsFromTheStart) {
  ExchangeRecord record;
  const MonotonicTime start{};
  EXPECT_TRUE(record.noteFirstByte(start + 250ms));
  EXPECT_FALSE(record.noteFirstByte(start + 900ms));
  AccessRecord r;
  record.fill(r, start);
  ASSERT_TRUE(r.ttfb_ms.has_value());
  EXPECT_DOUBLE_EQ(*r.ttfb_ms, 250.0);
}

TEST(ExchangeRecordTest, UsageIsSummedOverAttemptsAndTheLastNamedModelStays) {
  ExchangeRecord record;
  record.addUsage({"gpt-4o", 10, 5, 0.002, 0.0005});
  record.addUsage({"", 3, 1, 0.001, 0.0});  // an attempt that named no model
  AccessRecord r;
  record.fill(r, MonotonicTime{});
  EXPECT_EQ(r.model, "gpt-4o");
  EXPECT_EQ(r.input_tokens, 13u);
  EXPECT_EQ(r.output_tokens, 6u);
  EXPECT_DOUBLE_EQ(r.spend_usd, 0.003);
  EXPECT_DOUBLE_EQ(r.leaked_usd, 0.0005);
  record.addUsage({"gpt-4o-mini", 0, 0, 0, 0});  // a fallback's model replaces it
  record.fill(r, MonotonicTime{});
  EXPECT_EQ(r.model, "gpt-4o-mini");
}

TEST(ExchangeRecordTest, RetriesBytesRunAndJsonRpcCallReachTheLine) {
  ExchangeRecord record;
  record.noteRetry("503");
  record.noteRetry("connect_error");
  record.addBytesOut(100);
  record.addBytesOut(28);
  record.setRun("run-1", "parent-1");
  record.setJsonRpc("tools/call", std::string_view("7"), "execute_sql");
  AccessRecord r;
  record.fill(r, MonotonicTime{});
  ASSERT_EQ(r.retry_causes.size(), 2u);
  EXPECT_EQ(r.retry_causes[0], "503");
  EXPECT_EQ(r.retry_causes[1], "connect_error");
  EXPECT_EQ(r.bytes_out, 128u);
  EXPECT_EQ(r.run_id, "run-1");
  EXPECT_EQ(r.parent_run_id, "parent-1");
  EXPECT_EQ(r.jsonrpc_method, "tools/call");
  EXPECT_EQ(r.tool, "execute_sql");
  ASSERT_TRUE(record.jsonRpcId().has_value());
  EXPECT_EQ(*record.jsonRpcId(), "7");
  record.setJsonRpc("notifications/initialized", std::nullopt, "");
  EXPECT_FALSE(record.jsonRpcId().has_value());  // a notification has none
}

TEST(ExchangeRecordTest, TheFirstCancelCauseWinsAndReachesTheLine) {
  ExchangeRecord record;
  AccessRecord r;
  record.fill(r, MonotonicTime{});
  EXPECT_FALSE(r.cancel_reason.has_value());
  EXPECT_FALSE(record.cancelReason().has_value());
  record.noteCancel(CancelReason::ClientDisconnect);
  record.noteCancel(CancelReason::BudgetExhausted);
  EXPECT_EQ(record.cancelReason(), CancelReason::ClientDisconnect);
  record.fill(r, MonotonicTime{});
  EXPECT_EQ(r.cancel_reason, CancelReason::ClientDisconnect);
}

TEST(ExchangeRecordTest, FiltersWriteThroughTheirRequestRecord) {
  ExchangeRecord record;
  RequestRecord& as_filters_see_it = record;
  as_filters_see_it.addUsage(AttemptUsage{"gpt-4o", 10, 5, 0.5, 0});
  as_filters_see_it.setRun("run-1", "");
  as_filters_see_it.setJsonRpc("tools/call", std::string_view("3"), "search");
  AccessRecord r;
  record.fill(r, MonotonicTime{});
  EXPECT_EQ(r.model, "gpt-4o");
  EXPECT_EQ(r.input_tokens, 10u);
  EXPECT_EQ(r.run_id, "run-1");
  EXPECT_EQ(r.tool, "search");
  EXPECT_EQ(record.jsonRpcId(), std::optional<std::string>("3"));
}

}  // namespace
}  // namespace sluice
