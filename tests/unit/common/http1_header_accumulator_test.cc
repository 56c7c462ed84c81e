// Tests for Http1HeaderAccumulator (common/http1_header_accumulator.h) under
// the real http-parser: a head fed one byte at a time (every name and value in
// fragments) gives the same pairs as one fed whole; empty values, duplicates
// and order survive; a pair commits when the next name starts (flush() says
// so, for the callers' count caps); reset() forgets a half-received pair.

#include "common/http1_header_accumulator.h"

#include <gtest/gtest.h>
#include <http_parser.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/http_headers.h"

namespace sluice {
namespace {

using Entries = std::vector<HeaderMap::Entry>;

struct Parsed {
  Http1HeaderAccumulator fields;
  HeaderMap headers;
  bool complete = false;
};

/** Parses the request head `raw`, `step` bytes per http_parser_execute call. */
Parsed parse(std::string_view raw, size_t step) {
  Parsed out;
  http_parser_settings settings;
  http_parser_settings_init(&settings);
  settings.on_header_field = [](http_parser* p, const char* at, size_t len) {
    auto* o = static_cast<Parsed*>(p->data);
    o->fields.onField({at, len}, o->headers);
    return 0;
  };
  settings.on_header_value = [](http_parser* p, const char* at, size_t len) {
    static_cast<Parsed*>(p->data)->fields.appendValue({at, len});
    return 0;
  };
  settings.on_headers_complete = [](http_parser* p) {
    auto* o = static_cast<Parsed*>(p->data);
    o->fields.flush(o->headers);
    o->complete = true;
    return 0;
  };
  http_parser parser;
  http_parser_init(&parser, HTTP_REQUEST);
  parser.data = &out;
  for (size_t at = 0; at < raw.size(); at += step) {
    const size_t len = std::min(step, raw.size() - at);
    EXPECT_EQ(http_parser_execute(&parser, &settings, raw.data() + at, len), len);
  }
  return out;
}

constexpr std::string_view kHead =
    "GET / HTTP/1.1\r\n"
    "Host: example.test\r\n"
    "X-Empty:\r\n"
    "Accept: a/b\r\n"
    "accept: c/d\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "\r\n";

TEST(Http1HeaderAccumulatorTest, FragmentedHeadGivesTheSamePairsAsAWholeOne) {
  const Entries expected{{"host", "example.test"},
                         {"x-empty", ""},
                         {"accept", "a/b"},
                         {"accept", "c/d"},
                         {"content-type", "text/plain; charset=utf-8"}};
  for (size_t step : {kHead.size(), size_t{1}, size_t{3}, size_t{7}}) {
    SCOPED_TRACE(step);
    const Parsed whole = parse(kHead, step);
    EXPECT_TRUE(whole.complete);
    EXPECT_EQ(whole.headers.entries(), expected);
  }
}

TEST(Http1HeaderAccumulatorTest, FlushCommitsOnlyAfterAValueStarted) {
  Http1HeaderAccumulator fields;
  std::vector<std::pair<std::string, std::string>> sink_calls;
  const auto sink = [&](std::string& name, std::string& value) {
    sink_calls.emplace_back(std::move(name), std::move(value));
  };
  fields.appendField("Na");
  EXPECT_FALSE(fields.flush(sink));  // a name alone is not a pair yet
  fields.appendField("me");
  fields.appendValue("v");
  fields.appendValue("al");
  EXPECT_TRUE(fields.flush(sink));
  EXPECT_FALSE(fields.flush(sink));  // committed once
  fields.appendField("Next");
  fields.appendValue("x");
  EXPECT_TRUE(fields.flush(sink));
  const std::vector<std::pair<std::string, std::string>> expected{{"Name", "val"}, {"Next", "x"}};
  EXPECT_EQ(sink_calls, expected);  // the sink sees the name as received; HeaderMap lower-cases
}

TEST(Http1HeaderAccumulatorTest, ResetForgetsAHalfReceivedPair) {
  Http1HeaderAccumulator fields;
  HeaderMap headers;
  fields.appendField("stale");
  fields.appendValue("old");
  fields.reset();
  EXPECT_FALSE(fields.flush(headers));
  fields.appendField("fresh");
  fields.appendValue("new");
  EXPECT_TRUE(fields.flush(headers));
  EXPECT_EQ(headers.entries(), (Entries{{"fresh", "new"}}));
}

// Borrowed fragments (sluice's codecs): random pairs cut into
// random fragments, each from a buffer that is scribbled over once
// keepBorrowed() has been called (as the codecs drain after llhttp_execute),
// with keepBorrowed() at random points, must commit exactly the pairs that
// copying them gives — to a HeaderMap and to a callable sink.
TEST(Http1HeaderAccumulatorTest, BorrowedFragmentsCommitWhatCopiedOnesDo) {
  std::mt19937 rng(2026);
  for (int round = 0; round < 2000; ++round) {
    Http1HeaderAccumulator copied;
    Http1HeaderAccumulator borrowed;
    HeaderMap copied_map;
    HeaderMap borrowed_map;
    std::vector<std::pair<std::string, std::string>> copied_calls;
    std::vector<std::pair<std::string, std::string>> borrowed_calls;
    const bool callable = rng() % 2 == 0;
    std::string buffer;  // the "read": fragments point into it until it is scribbled over
    buffer.reserve(4096);
    const auto feed = [&](bool field, const std::string& text) {
      if (buffer.size() + text.size() > buffer.capacity() || rng() % 4 == 0) {
        borrowed.keepBorrowed();
        std::fill(buffer.begin(), buffer.end(), '#');  // the drained bytes are gone
        buffer.clear();
      }
      const size_t at = buffer.size();
      buffer += text;
      const std::string_view fragment(buffer.data() + at, text.size());
      if (field) {
        copied.appendField(text);
        borrowed.borrowField(fragment);
      } else {
        copied.appendValue(text);
        borrowed.borrowValue(fragment);
      }
    };
    const auto flush = [&] {
      if (callable) {
        const bool a =
            copied.flush([&](std::string& n, std::string& v) { copied_calls.emplace_back(n, v); });
        const bool b = borrowed.flush(
            [&](std::string& n, std::string& v) { borrowed_calls.emplace_back(n, v); });
        ASSERT_EQ(a, b);
      } else {
        ASSERT_EQ(copied.flush(copied_map), borrowed.flush(borrowed_map));
      }
    };
    for (int pair = static_cast<int>(rng() % 8); pair > 0; --pair) {
      flush();
      for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
        feed(true, std::string(rng() % 6, static_cast<char>('A' + rng() % 26)));
      }
      for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
        feed(false, std::string(rng() % 9, static_cast<char>('a' + rng() % 26)));
      }
      if (rng() % 10 == 0) {
        copied.reset();
        borrowed.reset();
      }
    }
    flush();
    ASSERT_EQ(borrowed_map.entries(), copied_map.entries());
    ASSERT_EQ(borrowed_calls, copied_calls);
  }
}

}  // namespace
}  // namespace sluice
