// ClientResponse: the client's side of an Exchange. What reaches the client
// (and is counted in the record), what a client that left or a finish-mode
// drain gets (nothing), trailers only for a client that carries and asked
// for them, and the spend held until the client's reading is known. Driven
// without sockets: the client is a recording DownstreamStream.

#include "proxy/exchange/client_response.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "tests/unit/proxy/exchange/recording_client.h"

namespace sluice {
namespace {

/** A receipt that writes what it was settled with where the test reads it (it dies settled). */
class CountingReceipt final : public ReadReceipt {
 public:
  explicit CountingReceipt(std::optional<CancelReason> reason = std::nullopt,
                           std::optional<uint64_t>* settled = nullptr)
      : reason_(reason), settled_(settled) {}
  AttemptUsage settle(uint64_t unread, std::optional<CancelReason>) override {
    if (settled_ != nullptr) *settled_ = unread;
    return {};
  }
  std::optional<CancelReason> reason() const override { return reason_; }

 private:
  std::optional<CancelReason> reason_;
  std::optional<uint64_t>* settled_;
};

struct ClientResponseTest : ::testing::Test {
  ClientResponseTest() { identity.request_id = "req-1"; }
  ResponseHead upstreamHead(std::string_view content_type = "text/event-stream") {
    ResponseHead h;
    h.status = 200;
    h.headers.add("content-type", std::string(content_type));
    return h;
  }
  AccessRecord recorded() const {
    AccessRecord r;
    record.fill(r, MonotonicTime{});
    return r;
  }

  RecordingClient client;
  ExchangeRecord record;
  RequestIdentity identity;
  RequestHead request;
  prometheus::Registry registry;
  prometheus::Histogram& ttfb =
      prometheus::BuildHistogram().Name("ttfb").Register(registry).Add({}, std::vector<double>{1});
  const MonotonicTime start{};
  const MonotonicTime later = start + std::chrono::milliseconds(40);
};

TEST_F(ClientResponseTest, AHeadGetsTheRequestIdAndItsFirstByteIsObservedOnce) {
  ClientResponse response(&client, record, identity, request, start);
  ResponseHead head = upstreamHead();
  response.sendHead(head, SseDialect::OpenAI, ttfb, start, later);
  ASSERT_EQ(client.heads.size(), 1u);
  EXPECT_EQ(client.heads[0].headers.get("x-request-id").value_or(""), "req-1");
  EXPECT_EQ(record.firstByteAt(), later);
  EXPECT_EQ(ttfb.Collect().histogram.sample_count, 1u);
  EXPECT_TRUE(response.relay().started());
}

TEST_F(ClientResponseTest, EveryBodyByteForwardedHeldOrRepliedIsCountedOut) {
  ClientResponse response(&client, record, identity, request, start);
  ResponseHead head = upstreamHead();
  response.sendHead(head, SseDialect::OpenAI, ttfb, start, later);
  EXPECT_FALSE(response.forward("data: 1\n\n", 9));
  response.sendHeldBody("data: 2\n\n", /*end_stream=*/false);
  EXPECT_EQ(client.body, "data: 1\n\ndata: 2\n\n");
  EXPECT_EQ(recorded().bytes_out, 18u);

  RecordingClient other;
  ExchangeRecord other_record;
  ClientResponse reply_to(&other, other_record, identity, request, start);
  LocalReply reply;
  reply.head.status = 503;
  reply.body = R"({"type":"overloaded"})";
  reply_to.sendReply(reply, later);
  EXPECT_EQ(other.body, reply.body);
  EXPECT_EQ(other.heads.at(0).headers.get("x-request-id").value_or(""), "req-1");
  AccessRecord r;
  other_record.fill(r, start);
  EXPECT_EQ(r.bytes_out, reply.body.size());
}

TEST_F(ClientResponseTest, AClientThatLeftIsNeverWrittenAndWhatSluiceStillHeldIsNotDelivered) {
  ClientResponse response(&client, record, identity, request, start);
  ResponseHead head = upstreamHead();
  response.sendHead(head, SseDialect::OpenAI, ttfb, start, later);
  response.forward("data: 1\n\n", 9);
  client.buffered = 4;
  response.clientLeft();
  EXPECT_EQ(response.stream(), nullptr);
  EXPECT_FALSE(response.listening());
  EXPECT_FALSE(response.forward("data: 2\n\n", 9));
  EXPECT_EQ(response.finalEventFor(makeProblem(problems::kUpstreamTimeout, "x")), "");
  response.cut("");
  EXPECT_EQ(client.body, "data: 1\n\n");
  EXPECT_FALSE(client.reset);
  EXPECT_EQ(recorded().bytes_out, 9u);
  EXPECT_EQ(response.relay().deliveredBodyBytes(nullptr), 5u);
}

TEST_F(ClientResponseTest, AFinishModeDrainForwardsNothingButTheClientIsStillLetGo) {
  ClientResponse response(&client, record, identity, request, start);
  response.drain();
  EXPECT_TRUE(response.draining());
  EXPECT_FALSE(response.listening());
  EXPECT_FALSE(response.forward("data: 1\n\n", 9));
  EXPECT_EQ(client.body, "");
  response.done(/*resume_upload=*/true);
  EXPECT_TRUE(client.done);
  EXPECT_EQ(client.resumed, 1);
  EXPECT_EQ(response.stream(), nullptr);
}

TEST_F(ClientResponseTest, TrailersGoOnlyToAClientThatCarriesThemAndAskedForThem) {
  RequestHead asked;
  asked.headers.add("te", "trailers");
  const auto trailersReached = [&](RecordingClient& c, const RequestHead& request) {
    ExchangeRecord r;
    ClientResponse response(&c, r, identity, request, start);
    response.noteRequest(request);
    ResponseHead head = upstreamHead("application/grpc");
    response.sendHead(head, SseDialect::None, ttfb, start, later);
    HeaderMap trailers;
    trailers.add("grpc-status", "0");
    response.keepTrailers(std::move(trailers));
    response.end();
    return c.trailers.get("grpc-status").has_value();
  };
  RecordingClient h2;
  EXPECT_TRUE(trailersReached(h2, asked));
  RecordingClient h2_not_asked;
  EXPECT_FALSE(trailersReached(h2_not_asked, RequestHead{}));
  RecordingClient h1;
  h1.trailers_carried = false;
  EXPECT_FALSE(trailersReached(h1, asked));
  EXPECT_TRUE(h1.ended);
}

TEST_F(ClientResponseTest, TheSpendIsHeldOnlyWhereTheClientsReadingCanBeLearnt) {
  // A connection that cannot confirm reads books as written.
  {
    ClientResponse response(&client, record, identity, request, start);
    std::unique_ptr<ReadReceipt> receipt = std::make_unique<CountingReceipt>();
    EXPECT_FALSE(response.holdUntilRead(receipt));
    EXPECT_NE(receipt, nullptr);
  }
  client.confirms_reads = true;
  // A cut the client caused has nobody to ask.
  {
    ClientResponse response(&client, record, identity, request, start);
    std::unique_ptr<ReadReceipt> receipt =
        std::make_unique<CountingReceipt>(CancelReason::ClientStalled);
    EXPECT_FALSE(response.holdUntilRead(receipt));
  }
  // Otherwise held once, and handed to the client's connection with the request's end.
  ClientResponse response(&client, record, identity, request, start);
  std::optional<uint64_t> settled;
  std::unique_ptr<ReadReceipt> first =
      std::make_unique<CountingReceipt>(CancelReason::BudgetExhausted, &settled);
  std::unique_ptr<ReadReceipt> second = std::make_unique<CountingReceipt>();
  EXPECT_TRUE(response.holdUntilRead(first));
  EXPECT_FALSE(response.holdUntilRead(second));
  EXPECT_TRUE(response.holdsSpend());
  response.handOverSpend(nullptr, nullptr, nullptr);
  ASSERT_NE(client.held, nullptr);
  EXPECT_FALSE(settled);
  client.held->settle(7);
  EXPECT_EQ(settled, 7u);
}

TEST_F(ClientResponseTest, AHeldSpendWhoseClientLeftIsSettledAtOnce) {
  client.confirms_reads = true;
  ClientResponse response(&client, record, identity, request, start);
  std::optional<uint64_t> settled;
  std::unique_ptr<ReadReceipt> held = std::make_unique<CountingReceipt>(std::nullopt, &settled);
  ASSERT_TRUE(response.holdUntilRead(held));
  response.clientLeft();
  response.handOverSpend(nullptr, nullptr, nullptr);
  EXPECT_EQ(client.held, nullptr);
  EXPECT_EQ(settled, 0u);
}

TEST_F(ClientResponseTest, ClosingTheBooksHandsOverOnlyASpendThatIsHeld) {
  client.confirms_reads = true;
  ClientResponse response(&client, record, identity, request, start);
  response.closeBooks(nullptr, nullptr, nullptr);  // the access log is off, nothing held
  EXPECT_EQ(client.held, nullptr);
  std::unique_ptr<ReadReceipt> receipt = std::make_unique<CountingReceipt>();
  ASSERT_TRUE(response.holdUntilRead(receipt));
  response.closeBooks(nullptr, nullptr, nullptr);
  EXPECT_NE(client.held, nullptr);  // booked once the client's reading is known
}

TEST_F(ClientResponseTest, AFinalEventIsOnlyForAResponseUnderWay) {
  ClientResponse response(&client, record, identity, request, start);
  const Problem problem = makeProblem(problems::kUpstreamTimeout, "x");
  EXPECT_EQ(response.finalEventFor(problem), "");  // nothing sent: the problem is the answer
  ResponseHead head = upstreamHead();
  response.sendHead(head, SseDialect::OpenAI, ttfb, start, later);
  response.forward("data: 1\n\n", 9);
  EXPECT_NE(response.finalEventFor(problem), "");
}

}  // namespace
}  // namespace sluice
