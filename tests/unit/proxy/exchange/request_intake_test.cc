// RequestIntake: a request body's plan (buffer whole or stream), its bytes
// against limits.max_body and the process-wide cap, and the client's upload
// paused and resumed around the streamed body's watermarks.

#include "proxy/exchange/request_intake.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

RequestHead post(std::optional<uint64_t> content_length) {
  RequestHead head;
  head.method = "POST";
  head.path = "/v1/chat/completions";
  if (content_length) head.headers.add("content-length", std::to_string(*content_length));
  return head;
}

constexpr uint64_t kMaxBody = 1 << 20;
constexpr uint64_t kCap = 1ull << 30;

TEST(RequestIntakeTest, StreamAboveIsRetryMaxBodyForRetrySafeRequestsElseAtMostTheAlwaysBuffered) {
  config::RetryConfig retry;
  retry.max_body = 8ull << 20;
  retry.idempotent = config::IdempotencyMode::Always;
  EXPECT_EQ(RequestIntake::streamAbove(retry, post(1)), 8ull << 20);
  retry.idempotent = config::IdempotencyMode::Never;
  EXPECT_EQ(RequestIntake::streamAbove(retry, post(1)), RequestIntake::kAlwaysBufferedBytes);
  retry.max_body = 1000;
  EXPECT_EQ(RequestIntake::streamAbove(retry, post(1)), 1000u);
}

TEST(RequestIntakeTest, ADeclaredBodyAboveMaxBodyIsTooLargeBeforeAnyByte) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  EXPECT_EQ(intake.plan(post(kMaxBody + 1), kMaxBody, 4096), RequestIntake::Plan::TooLarge);
  EXPECT_EQ(memory.used(), 0u);
}

TEST(RequestIntakeTest, ADeclaredBodyThatFitsIsReservedWholeAndHeld) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(10), kMaxBody, 4096), RequestIntake::Plan::Ok);
  EXPECT_EQ(memory.used(), 10u);
  EXPECT_EQ(intake.append("0123456789", 10, kMaxBody), RequestIntake::Intake::Held);
  EXPECT_FALSE(intake.complete());
  EXPECT_TRUE(intake.requestComplete());
  EXPECT_EQ(intake.body().prefix(), "0123456789");
  EXPECT_TRUE(intake.body().replayable());
  EXPECT_EQ(intake.bytesIn(), 10u);
}

TEST(RequestIntakeTest, TheProcessCapRefusesADeclaredBody) {
  BodyMemory memory;
  RequestIntake intake(&memory, /*cap=*/5);
  EXPECT_EQ(intake.plan(post(10), kMaxBody, 4096), RequestIntake::Plan::Refused);
}

TEST(RequestIntakeTest, ADeclaredBodyAboveTheReplayThresholdStreamsFromTheStart) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(100), kMaxBody, /*stream_above=*/50), RequestIntake::Plan::Ok);
  EXPECT_TRUE(intake.body().streaming());
  EXPECT_EQ(intake.append("x", 1, kMaxBody), RequestIntake::Intake::Streamed);
}

TEST(RequestIntakeTest, AChunkedBodyTurnsToStreamingWhenItPassesTheThreshold) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), kMaxBody, /*stream_above=*/8), RequestIntake::Plan::Ok);
  EXPECT_EQ(intake.append("1234", 4, kMaxBody), RequestIntake::Intake::Held);
  EXPECT_EQ(intake.append("5678", 4, kMaxBody), RequestIntake::Intake::Held);
  EXPECT_EQ(intake.append("9", 1, kMaxBody), RequestIntake::Intake::StartStreaming);
  EXPECT_EQ(intake.append("0", 1, kMaxBody), RequestIntake::Intake::Streamed);
}

TEST(RequestIntakeTest, AChunkedBodyPassingMaxBodyIsTooLarge) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), /*max_body=*/6, 4096), RequestIntake::Plan::Ok);
  EXPECT_EQ(intake.append("1234", 4, 6), RequestIntake::Intake::Held);
  EXPECT_EQ(intake.append("567", 3, 6), RequestIntake::Intake::TooLarge);
  EXPECT_EQ(intake.bytesIn(), 4u);
}

TEST(RequestIntakeTest, AStreamedUploadPausesAboveTheHighWatermarkAndResumesBelowTheLow) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), 1ull << 30, /*stream_above=*/0),
            RequestIntake::Plan::Ok);
  const std::string block(64 * 1024, 'b');
  EXPECT_EQ(intake.append(block.data(), block.size(), 1ull << 30),
            RequestIntake::Intake::StartStreaming);
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Keep);
  for (int i = 0; i < 4; ++i) intake.append(block.data(), block.size(), 1ull << 30);
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Pause);   // 320 KiB held > 256 KiB
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Keep);    // already paused
  intake.body().discardBefore(intake.body().size());      // the upstream took it all
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Resume);  // below 64 KiB
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Keep);
}

TEST(RequestIntakeTest, CompletingAPausedUploadSaysTheClientMustBeResumed) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), 1ull << 30, 0), RequestIntake::Plan::Ok);
  const std::string block(300 * 1024, 'b');
  intake.append(block.data(), block.size(), 1ull << 30);
  ASSERT_EQ(intake.flow(), RequestIntake::Flow::Pause);
  EXPECT_TRUE(intake.complete());
  EXPECT_FALSE(intake.takeClientPaused());
  EXPECT_EQ(intake.flow(), RequestIntake::Flow::Keep);  // complete: nothing to pause
}

TEST(RequestIntakeTest, TheModelIsReadOnceTheBodyIsInAndTheLastOneWins) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), kMaxBody, 4096), RequestIntake::Plan::Ok);
  intake.awaitModel();
  const std::string body = R"({"model":"a","n":{"model":"inner"},"model":"b\u0021"})";
  EXPECT_EQ(intake.append(body.data(), body.size(), kMaxBody), RequestIntake::Intake::Held);
  EXPECT_FALSE(intake.modelReady());  // a buffered body: not before its end
  intake.complete();
  EXPECT_TRUE(intake.modelReady());
  EXPECT_EQ(intake.takeModel(), "b!");
  EXPECT_FALSE(intake.modelReady());  // once
}

TEST(RequestIntakeTest, AStreamedBodysFirstBlockIsEnoughForTheModel) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), kMaxBody, 8), RequestIntake::Plan::Ok);
  intake.awaitModel();
  const std::string body = R"({"model":"m","messages":[]})";
  EXPECT_EQ(intake.append(body.data(), body.size(), kMaxBody),
            RequestIntake::Intake::StartStreaming);
  EXPECT_TRUE(intake.modelReady());
  EXPECT_EQ(intake.takeModel(), "m");
}

TEST(RequestIntakeTest, ABodyWithoutAModelStringNamesNone) {
  BodyMemory memory;
  RequestIntake intake(&memory, kCap);
  ASSERT_EQ(intake.plan(post(std::nullopt), kMaxBody, 4096), RequestIntake::Plan::Ok);
  intake.awaitModel();
  const std::string body = R"({"model":42})";
  intake.append(body.data(), body.size(), kMaxBody);
  intake.complete();
  EXPECT_EQ(intake.takeModel(), "");
}

}  // namespace
}  // namespace sluice
