#include "filters/spend/sse_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/unit/filters/spend/provider_streams.h"

namespace sluice {
namespace {

struct Seen {
  std::string type;
  std::string data;
  std::string id;
  uint64_t end_offset = 0;
  bool oversized = false;

  bool operator==(const Seen&) const = default;
};

void PrintTo(const Seen& s, std::ostream* os) {
  *os << "{type=" << ::testing::PrintToString(s.type)
      << " data=" << ::testing::PrintToString(s.data) << " id=" << ::testing::PrintToString(s.id)
      << " end=" << s.end_offset << (s.oversized ? " oversized" : "") << "}";
}

/** A parser that records every event it dispatches. */
struct Recorder {
  explicit Recorder(size_t max_event_bytes = SseParser::kDefaultMaxEventBytes)
      : parser(
            [this](const SseEvent& e) {
              events.push_back(Seen{std::string(e.type), std::string(e.data), std::string(e.id),
                                    e.end_offset, e.oversized});
            },
            max_event_bytes) {}

  std::vector<Seen> events;
  SseParser parser;
};

std::vector<Seen> parseWhole(const std::string& stream,
                             size_t max = SseParser::kDefaultMaxEventBytes) {
  Recorder r(max);
  r.parser.feed(stream);
  return r.events;
}

// Types and data only (offsets are checked separately).
std::vector<std::pair<std::string, std::string>> typesAndData(const std::vector<Seen>& events) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Seen& e : events) out.emplace_back(e.type, e.data);
  return out;
}

struct FieldCase {
  const char* name;
  std::string stream;
  std::vector<std::pair<std::string, std::string>> expected;  // {type, data}
};

class SseParserFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(SseParserFieldTest, ParsesPerWhatwg) {
  const FieldCase& c = GetParam();
  EXPECT_EQ(typesAndData(parseWhole(c.stream)), c.expected);
  // The same stream fed one byte at a time gives the same events.
  Recorder r;
  for (char ch : c.stream) r.parser.feed(&ch, 1);
  EXPECT_EQ(r.events, parseWhole(c.stream));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, SseParserFieldTest,
    ::testing::Values(
        FieldCase{"simple", "data: hello\n\n", {{"message", "hello"}}},
        FieldCase{"no_space_after_colon", "data:hello\n\n", {{"message", "hello"}}},
        FieldCase{"only_one_space_stripped", "data:  two\n\n", {{"message", " two"}}},
        FieldCase{"multi_line_data", "data: a\ndata: b\ndata:\n\n", {{"message", "a\nb\n"}}},
        FieldCase{"event_field", "event: delta\ndata: x\n\n", {{"delta", "x"}}},
        FieldCase{"event_type_resets",
                  "event: a\ndata: 1\n\ndata: 2\n\n",
                  {{"a", "1"}, {"message", "2"}}},
        FieldCase{"comments_ignored", ": keep-alive\ndata: x\n: another\n\n", {{"message", "x"}}},
        FieldCase{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", {{"message", "x"}, {"message", "y"}}},
        FieldCase{"cr_only", "data: x\r\rdata: y\r\r", {{"message", "x"}, {"message", "y"}}},
        FieldCase{"mixed_endings", "data: a\r\ndata: b\rdata: c\n\n", {{"message", "a\nb\nc"}}},
        FieldCase{"no_data_no_event", "event: ping\n\ndata: z\n\n", {{"message", "z"}}},
        FieldCase{"bare_data_field", "data\n\n", {{"message", ""}}},
        FieldCase{"empty_data_value", "data:\n\n", {{"message", ""}}},
        FieldCase{"colon_in_value", "data: {\"a\":\"b:c\"}\n\n", {{"message", "{\"a\":\"b:c\"}"}}},
        FieldCase{"unknown_and_spaced_fields",
                  "foo: bar\ndata : no\ndata: yes\n\n",
                  {{"message", "yes"}}},
        FieldCase{"leading_blank_lines", "\n\n\r\ndata: x\n\n", {{"message", "x"}}},
        // Empty lines in each style (found without a search) and fields that
        // start like `data:` (whose first colon is taken as known).
        FieldCase{"empty_lines_each_style",
                  "data: a\n\r\n\rdata: b\r\n\n\r\rdata: c\r\r",
                  {{"message", "a"}, {"message", "b"}, {"message", "c"}}},
        FieldCase{"data_like_field_names",
                  "datax: 1\ndata:x:y\ndat: 2\ndata\n\n",
                  {{"message", "x:y\n"}}},
        FieldCase{"colon_right_after_data", "data:: z\n\n", {{"message", ": z"}}},
        FieldCase{"bom_skipped",
                  "\xEF\xBB\xBF"
                  "data: x\n\n",
                  {{"message", "x"}}},
        FieldCase{"unterminated_event_discarded", "data: x\n\ndata: y\n", {{"message", "x"}}},
        FieldCase{"no_trailing_newline", "data: x", {}}),
    [](const ::testing::TestParamInfo<FieldCase>& info) { return std::string(info.param.name); });

TEST(SseParserTest, IdAndRetry) {
  Recorder r;
  r.parser.feed("id: 7\ndata: a\n\ndata: b\n\nretry: 1500\nretry: 1.5\ndata: c\n\nid\ndata: d\n\n");
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0].id, "7");
  EXPECT_EQ(r.events[1].id, "7");  // the last event ID persists across events
  EXPECT_EQ(r.events[2].id, "7");
  EXPECT_EQ(r.events[3].id, "");  // a bare `id` resets it
  ASSERT_TRUE(r.parser.retryMs().has_value());
  EXPECT_EQ(*r.parser.retryMs(), 1500u);  // "1.5" is not an integer: ignored
}

TEST(SseParserTest, IdWithNulIsIgnored) {
  Recorder r;
  const std::string stream = std::string("id: 1\ndata: a\n\nid: x") + '\0' + "y\ndata: b\n\n";
  r.parser.feed(stream);
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].id, "1");
}

TEST(SseParserTest, EndOffsetIsPastTheDispatchingLineBreak) {
  // LF: after the blank line's \n. CRLF: after the blank line's \r (a client
  // dispatches on the CR; the LF is just skipped).
  auto lf = parseWhole("data: a\n\ndata: bc\n\n");
  ASSERT_EQ(lf.size(), 2u);
  EXPECT_EQ(lf[0].end_offset, 9u);
  EXPECT_EQ(lf[1].end_offset, 19u);

  auto crlf = parseWhole("data: a\r\n\r\n");
  ASSERT_EQ(crlf.size(), 1u);
  EXPECT_EQ(crlf[0].end_offset, 10u);

  auto bom = parseWhole(
      "\xEF\xBB\xBF"
      "data: a\n\n");
  ASSERT_EQ(bom.size(), 1u);
  EXPECT_EQ(bom[0].end_offset, 12u);  // BOM bytes are stream bytes
}

TEST(SseParserTest, BomSplitAcrossSlicesAndFalseBomPrefix) {
  Recorder r;
  r.parser.feed("\xEF");
  r.parser.feed("\xBB");
  r.parser.feed(
      "\xBF"
      "data: x\n\n");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].data, "x");
  EXPECT_EQ(r.parser.bytesConsumed(), 12u);

  // Two BOM bytes then something else: the bytes are content (an unknown field here).
  Recorder f;
  f.parser.feed("\xEF\xBB");
  f.parser.feed("Z: q\ndata: y\n\n");
  ASSERT_EQ(f.events.size(), 1u);
  EXPECT_EQ(f.events[0].data, "y");
  EXPECT_EQ(f.events[0].end_offset, 16u);

  // A BOM only counts at the very start.
  EXPECT_EQ(typesAndData(parseWhole("data: a\n\n\xEF\xBB\xBF"
                                    "data: b\n\n")),
            (std::vector<std::pair<std::string, std::string>>{{"message", "a"}}));
}

TEST(SseParserTest, FinishDiscardsPartialEvent) {
  Recorder r;
  r.parser.feed("data: a\n\ndata: half");
  EXPECT_TRUE(r.parser.finish());
  EXPECT_EQ(r.events.size(), 1u);
  EXPECT_FALSE(r.parser.finish());  // nothing pending any more
}

// A real OpenAI chat stream split into two slices at every byte position, in
// both LF and CRLF form, must yield exactly the events (and offsets) of the whole.
TEST(SseParserTest, RealChatStreamSplitAtEveryBytePosition) {
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    const std::string stream =
        spend_fixtures::openAiChatStream({"Hello", "!", " How", " can", " I", " help", "?"}, true,
                                         19, 10, eol)
            .body;
    const std::vector<Seen> whole = parseWhole(stream);
    ASSERT_EQ(whole.size(), 11u);  // role, 7 content, finish, usage, [DONE]
    EXPECT_EQ(whole.back().data, "[DONE]");
    for (size_t cut = 0; cut <= stream.size(); ++cut) {
      Recorder r;
      r.parser.feed(stream.data(), cut);
      r.parser.feed(stream.data() + cut, stream.size() - cut);
      ASSERT_EQ(r.events, whole) << "eol=" << ::testing::PrintToString(eol) << " cut=" << cut;
      ASSERT_EQ(r.parser.bytesConsumed(), stream.size());
    }
  }
}

TEST(SseParserTest, RealChatStreamRandomSlicesAndSingleBytes) {
  const std::string stream =
      spend_fixtures::openAiChatStream({"Once", " upon", " a", " time"}, true, 12, 4, "\r\n").body;
  const std::vector<Seen> whole = parseWhole(stream);
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    Recorder r;
    size_t pos = 0;
    while (pos < stream.size()) {
      const size_t n = std::min<size_t>(stream.size() - pos, rng() % 40);
      r.parser.feed(stream.data() + pos, n);
      pos += n;
    }
    ASSERT_EQ(r.events, whole) << "round " << round;
  }
  Recorder bytes;
  for (char c : stream) bytes.parser.feed(&c, 1);
  EXPECT_EQ(bytes.events, whole);
}

TEST(SseParserTest, OversizedEventIsSkippedAndCounted) {
  // Cap of 32 bytes: the second event's data is larger and is reported once,
  // oversized, at its blank line; the stream recovers for the next event.
  const std::string big(100, 'x');
  const std::string stream =
      "data: ok1\n\nevent: delta\ndata: " + big + "\ndata: more\n\ndata: ok2\n\n";
  for (size_t slice : {size_t{1}, size_t{7}, stream.size()}) {
    Recorder r(32);
    for (size_t pos = 0; pos < stream.size(); pos += slice) {
      r.parser.feed(stream.data() + pos, std::min(slice, stream.size() - pos));
    }
    ASSERT_EQ(r.events.size(), 3u) << "slice " << slice;
    EXPECT_EQ(r.events[0].data, "ok1");
    EXPECT_TRUE(r.events[1].oversized);
    EXPECT_EQ(r.events[1].type, "delta");
    EXPECT_EQ(r.events[1].data, "");
    EXPECT_EQ(r.events[1].end_offset, stream.size() - std::string("data: ok2\n\n").size());
    EXPECT_FALSE(r.events[2].oversized);
    EXPECT_EQ(r.events[2].data, "ok2");
    EXPECT_EQ(r.parser.eventsSkipped(), 1u);
    EXPECT_EQ(r.parser.eventsDispatched(), 2u);
  }
}

TEST(SseParserTest, ManySmallDataLinesHitTheCapToo) {
  std::string stream;
  for (int i = 0; i < 20; ++i) stream += "data: 0123456789\n";
  stream += "\ndata: after\n\n";
  Recorder r(64);
  r.parser.feed(stream);
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_TRUE(r.events[0].oversized);
  EXPECT_EQ(r.events[1].data, "after");
}

TEST(SseParserTest, LongCommentLinesNeverCountAgainstTheCap) {
  const std::string padding(1000, 'p');
  const std::string stream = ":" + padding + "\ndata: x\n\n";
  for (size_t slice : {size_t{3}, stream.size()}) {
    Recorder r(32);
    for (size_t pos = 0; pos < stream.size(); pos += slice) {
      r.parser.feed(stream.data() + pos, std::min(slice, stream.size() - pos));
    }
    ASSERT_EQ(r.events.size(), 1u);
    EXPECT_FALSE(r.events[0].oversized);
    EXPECT_EQ(r.events[0].data, "x");
    EXPECT_EQ(r.parser.eventsSkipped(), 0u);
  }
}

// A data line complete in its slice is not copied until it must be
// (data_line_). Random streams of data, event, id and comment lines parse the
// same fed whole (no copies), byte by byte (every line copied) and in random
// slices from a scratch buffer scribbled over after each feed (a view kept
// past its slice would read the scribble). With a small cap, slices cut at
// line ends (the cap counts a line split across slices with its field name,
// so only those keep the same decisions) agree with the whole stream too:
// the cap counts a kept data line as it counts a copied one.
TEST(SseParserTest, DataLinesKeptInTheSliceParseAsCopiedOnes) {
  static const std::vector<std::string> kLines = {
      "event: delta", "id: 7", ": keep-alive", "data", "data:", "retry: 5", ""};
  std::mt19937 rng(11);
  for (int round = 0; round < 2000; ++round) {
    const std::string eol = round % 3 == 0 ? "\r\n" : "\n";
    std::string stream;
    std::vector<size_t> line_ends;
    const size_t lines = 1 + rng() % 14;
    for (size_t l = 0; l < lines; ++l) {
      if (rng() % 2 == 0) {
        stream += "data: " + std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
      } else {
        stream += kLines[rng() % kLines.size()];
      }
      stream += eol;
      line_ends.push_back(stream.size());
    }
    const auto feedSlices = [&](Recorder& r, const std::vector<size_t>& cuts) {
      std::string scratch;
      size_t pos = 0;
      for (const size_t cut : cuts) {
        scratch.assign(stream, pos, cut - pos);
        r.parser.feed(scratch);
        scratch.assign(scratch.size(), '#');
        pos = cut;
      }
    };
    const std::vector<Seen> whole = parseWhole(stream);
    Recorder bytes;
    for (const char c : stream) bytes.parser.feed(&c, 1);
    ASSERT_EQ(bytes.events, whole) << ::testing::PrintToString(stream);
    std::vector<size_t> cuts;
    for (size_t pos = 0; pos < stream.size();) {
      pos = std::min<size_t>(stream.size(), pos + 1 + rng() % 30);
      cuts.push_back(pos);
    }
    Recorder sliced;
    feedSlices(sliced, cuts);
    ASSERT_EQ(sliced.events, whole) << ::testing::PrintToString(stream);
    EXPECT_EQ(sliced.parser.finish(), bytes.parser.finish());

    const std::vector<Seen> capped = parseWhole(stream, 48);
    cuts.clear();
    for (const size_t end : line_ends) {
      if (rng() % 2 == 0 || end == stream.size()) cuts.push_back(end);
    }
    Recorder at_line_ends(48);
    feedSlices(at_line_ends, cuts);
    ASSERT_EQ(at_line_ends.events, capped) << ::testing::PrintToString(stream);
  }
}

}  // namespace
}  // namespace sluice
