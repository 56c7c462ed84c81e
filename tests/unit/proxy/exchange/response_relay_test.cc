// ResponseRelay: a held response and its release, the response handed to
// the client (head, body, trailers), the SSE tail and the final error event
// of a cut, downstream backpressure and the body bytes that reached the
// client. Driven without sockets: the client is a recording DownstreamStream.

#include "proxy/exchange/response_relay.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "filters/filter.h"
#include "tests/unit/proxy/exchange/recording_client.h"

namespace sluice {
namespace {

ResponseHead head(int status, std::string_view content_type = "application/json") {
  ResponseHead h;
  h.status = status;
  h.headers.add("content-type", std::string(content_type));
  return h;
}

Problem timeoutProblem() { return makeProblem(problems::kUpstreamTimeout, "no byte for 30s"); }

void send(ResponseRelay& relay, RecordingClient& client, std::string_view bytes,
          bool end_stream = false) {
  relay.sendBody(client, bytes.data(), bytes.size(), end_stream);
}

TEST(ResponseRelayTest, AHeldResponseKeepsItsHeadAndBodyUpToTheCapAndSendsNothing) {
  ResponseRelay relay;
  RecordingClient client;
  EXPECT_FALSE(relay.holding());
  EXPECT_EQ(relay.heldHead(), nullptr);
  relay.hold(head(503));
  ASSERT_TRUE(relay.holding());
  EXPECT_EQ(relay.heldHead()->status, 503);
  const std::string chunk(kMaxHeldBody - 10, 'x');
  EXPECT_TRUE(relay.holdData(chunk.data(), chunk.size()));
  EXPECT_TRUE(relay.holdData("0123456789", 10));  // exactly the cap
  EXPECT_FALSE(relay.holdData("!", 1));           // past it: the caller streams
  EXPECT_EQ(relay.heldBody().size(), kMaxHeldBody);
  EXPECT_FALSE(relay.started());
  EXPECT_TRUE(client.heads.empty());

  const auto held = relay.takeHeld();
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->head.status, 503);
  EXPECT_FALSE(relay.holding());
}

TEST(ResponseRelayTest, ADroppedHeldResponseIsGoneAndANewAttemptHoldsNothing) {
  ResponseRelay relay;
  relay.hold(head(429));
  relay.dropHeld();
  EXPECT_FALSE(relay.holding());
  relay.hold(head(503));
  relay.resetAttempt();
  EXPECT_FALSE(relay.holding());
  EXPECT_EQ(relay.heldBody(), "");
}

TEST(ResponseRelayTest, HeadAndBodyGoToTheClientAndCountAsForwarded) {
  ResponseRelay relay;
  RecordingClient client;
  relay.sendHead(client, head(200), SseDialect::None);
  EXPECT_TRUE(relay.started());
  send(relay, client, "hello ");
  send(relay, client, "world");
  relay.end(client);
  ASSERT_EQ(client.heads.size(), 1u);
  EXPECT_EQ(client.heads[0].status, 200);
  EXPECT_EQ(client.body, "hello world");
  EXPECT_TRUE(client.ended);
  EXPECT_EQ(relay.forwardedBytes(), 11u);
  EXPECT_EQ(relay.deliveredBodyBytes(&client), 11u);
}

TEST(ResponseRelayTest, KeptTrailersEndTheResponseInsteadOfAnEmptyEnd) {
  ResponseRelay relay;
  RecordingClient client;
  relay.sendHead(client, head(200), SseDialect::None);
  HeaderMap trailers;
  trailers.add("x-usage", "42");
  relay.keepTrailers(std::move(trailers));
  send(relay, client, "body", /*end_stream=*/true);
  EXPECT_EQ(client.body, "body");
  EXPECT_EQ(client.trailers.get("x-usage").value_or(""), "42");
  EXPECT_TRUE(client.ended);

  // end() with trailers sends them alone, with none an empty end of stream.
  ResponseRelay plain;
  RecordingClient other;
  plain.sendHead(other, head(200), SseDialect::None);
  plain.end(other);
  EXPECT_EQ(other.data_calls, 1);
  EXPECT_TRUE(other.ended);
  EXPECT_TRUE(other.trailers.empty());
}

TEST(ResponseRelayTest, AReplyOfSluicesOwnStartsTheResponseWithoutForwardedBytes) {
  ResponseRelay relay;
  RecordingClient client;
  relay.sendReply(client, head(504), R"({"error":{}})");
  EXPECT_TRUE(relay.started());
  EXPECT_TRUE(client.ended);
  EXPECT_EQ(client.body, R"({"error":{}})");
  EXPECT_EQ(relay.forwardedBytes(), 0u);
}

TEST(ResponseRelayTest, AFinalEventGoesOutOnlyAtAnEventBoundary) {
  ResponseRelay relay;
  RecordingClient client;
  relay.sendHead(client, head(200, "text/event-stream"), SseDialect::OpenAI);
  send(relay, client, "data: {\"a\":1}\n\ndata: {\"b\"");  // inside the second event
  EXPECT_EQ(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "");
  send(relay, client, ":2}\n\n");
  const std::string event = relay.finalEventFor(client, timeoutProblem(), std::nullopt);
  EXPECT_EQ(event.rfind("data: {\"error\"", 0), 0u) << event;
  ResponseRelay::cut(client, event);
  EXPECT_TRUE(client.reset);
  EXPECT_EQ(client.final_event, event);
}

TEST(ResponseRelayTest, EveryLineEndMakesABoundaryAndNothingForwardedIsOne) {
  for (const std::string ending : {"\n\n", "\r\r", "\r\n\r\n"}) {
    ResponseRelay relay;
    RecordingClient client;
    relay.sendHead(client, head(200, "text/event-stream"), SseDialect::Anthropic);
    EXPECT_NE(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "");
    send(relay, client, "event: ping" + ending);
    EXPECT_NE(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "") << ending.size();
    send(relay, client, "event: ping\r\n");
    EXPECT_EQ(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "");
  }
}

TEST(ResponseRelayTest, NoFinalEventWithoutADialectAnIdOrRoomAtTheClient) {
  RecordingClient client;
  ResponseRelay none;
  none.sendHead(client, head(200), SseDialect::None);
  EXPECT_EQ(none.finalEventFor(client, timeoutProblem(), std::nullopt), "");

  ResponseRelay mcp;
  mcp.sendHead(client, head(200, "text/event-stream"), SseDialect::Mcp);
  EXPECT_EQ(mcp.finalEventFor(client, timeoutProblem(), std::nullopt), "");
  const std::string event = mcp.finalEventFor(client, timeoutProblem(), "7");
  EXPECT_NE(event.find("\"id\":7"), std::string::npos) << event;

  ResponseRelay full;
  full.sendHead(client, head(200, "text/event-stream"), SseDialect::OpenAI);
  client.writable = false;
  EXPECT_EQ(full.finalEventFor(client, timeoutProblem(), std::nullopt), "");
}

TEST(ResponseRelayTest, ACutDropsWhatIsBufferedUnlessAFinalEventFlushesIt) {
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200, "text/event-stream"), SseDialect::OpenAI);
  send(relay, client, std::string(1000, 'x') + "\n\n");
  client.buffered = 400;
  EXPECT_EQ(relay.deliveredBodyBytes(&client), 1002u);  // not cut: it will be written
  relay.markCut(true);
  EXPECT_EQ(relay.deliveredBodyBytes(&client), 602u);  // cut: the buffer is dropped
  EXPECT_NE(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "");
  EXPECT_EQ(relay.deliveredBodyBytes(&client), 1002u);  // flushed before the final event
}

TEST(ResponseRelayTest, WhatWasBufferedWhenTheClientLeftWasNotDelivered) {
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200), SseDialect::None);
  send(relay, client, std::string(500, 'x'));
  relay.clientLeft(200);
  EXPECT_EQ(relay.deliveredBodyBytes(nullptr), 300u);
  relay.clientLeft(900);  // more than forwarded (an earlier attempt's bytes): none
  EXPECT_EQ(relay.deliveredBodyBytes(nullptr), 0u);
}

TEST(ResponseRelayTest, ForwardingToASlowClientAsksToPauseTheUpstream) {
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200), SseDialect::None);
  EXPECT_FALSE(relay.forward(client, "ab", 2));
  client.buffered = 64 * 1024 + 1;
  EXPECT_TRUE(relay.forward(client, "cd", 2));
  EXPECT_TRUE(relay.paused());
  EXPECT_EQ(client.body, "abcd");
}

TEST(ResponseRelayTest, AClientLostInsideTheWriteIsNotAskedAnythingMore) {
  // The codec reports the disconnect from inside encodeData (a write error):
  // the Exchange tells the relay (clientLeft) and drops the client. Its
  // buffer looked full: without the check the relay would read the client
  // that left and ask to pause an upstream nobody reads for.
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200), SseDialect::None);
  client.buffered = 64 * 1024 + 1;
  client.on_data = [&] { relay.clientLeft(client.buffered); };
  EXPECT_FALSE(relay.forward(client, "ab", 2));
  EXPECT_FALSE(relay.paused());
  relay.resetAttempt();  // the client is gone for good, whatever attempt follows
  client.on_data = nullptr;
  EXPECT_FALSE(relay.forward(client, "cd", 2));
  EXPECT_FALSE(relay.paused());
}

TEST(ResponseRelayTest, ASlowClientPausesTheUpstreamOnceUntilItDrains) {
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200), SseDialect::None);
  EXPECT_FALSE(relay.pauseIfClientSlow(client));
  client.buffered = 64 * 1024 + 1;
  EXPECT_TRUE(relay.pauseIfClientSlow(client));
  EXPECT_TRUE(relay.paused());
  EXPECT_FALSE(relay.pauseIfClientSlow(client));  // already paused: not again
  EXPECT_TRUE(relay.resume());
  EXPECT_FALSE(relay.paused());
  EXPECT_FALSE(relay.resume());  // nothing to resume
  EXPECT_TRUE(relay.pauseIfClientSlow(client));
  relay.clearPaused();  // the attempt ended with its stream
  EXPECT_FALSE(relay.resume());
}

TEST(ResponseRelayTest, ANewAttemptForgetsTheLastOnesBytesButNotThatTheResponseStarted) {
  RecordingClient client;
  ResponseRelay relay;
  relay.sendHead(client, head(200, "text/event-stream"), SseDialect::OpenAI);
  send(relay, client, "data: x");
  relay.markCut(true);
  relay.resetAttempt();
  EXPECT_TRUE(relay.started());
  EXPECT_EQ(relay.forwardedBytes(), 0u);
  EXPECT_FALSE(relay.paused());
  EXPECT_EQ(relay.finalEventFor(client, timeoutProblem(), std::nullopt), "");  // no dialect now
}

TEST(ResponseRelayTest, TheDialectComesFromThePathOrTheMcpRequestsId) {
  EXPECT_EQ(responseDialect("/v1/chat/completions", "text/event-stream", false, false),
            SseDialect::OpenAI);
  EXPECT_EQ(responseDialect("/v1/messages", "text/event-stream", false, false),
            SseDialect::Anthropic);
  EXPECT_EQ(responseDialect("/v1/messages", "application/json", false, false), SseDialect::None);
  EXPECT_EQ(responseDialect("/mcp", "text/event-stream", true, true), SseDialect::Mcp);
  EXPECT_EQ(responseDialect("/mcp", "text/event-stream", true, false), SseDialect::None);
  EXPECT_EQ(responseDialect("/v1/chat/completions", "text/event-stream", true, false),
            SseDialect::None);  // an MCP route speaks JSON-RPC whatever the path
  EXPECT_EQ(responseDialect("/mcp", "application/json", true, true), SseDialect::None);
}

TEST(ResponseRelayTest, OnlyAClientThatLeftOrStalledCannotReadAFinalEvent) {
  EXPECT_FALSE(clientStillListening(CancelReason::ClientDisconnect));
  EXPECT_FALSE(clientStillListening(CancelReason::ClientStalled));
  EXPECT_TRUE(clientStillListening(CancelReason::BudgetExhausted));
  EXPECT_TRUE(clientStillListening(CancelReason::UpstreamTimeout));
  EXPECT_TRUE(clientStillListening(CancelReason::Draining));
}

}  // namespace
}  // namespace sluice
