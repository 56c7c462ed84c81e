// Tests for request identity (proxy/http/request_id.h, docs/design.md §7): which client
// x-request-id values are kept, which traceparent values are valid (W3C Trace
// Context level 1), and what establishIdentity() does to the headers.

#include "proxy/http/request_id.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <regex>
#include <set>
#include <string>

namespace sluice {
namespace {

constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(RequestIdTest, WellFormedClientIdsAreKept) {
  for (const std::string id : {"a", "req-123", "0d8e5c2a-8f5b-4c1e-9a61-2a1a3b4c5d6e",
                               "01HZX3V0K8Q2J5W4Y6T7R9S1A0", "abc+/=", "svc:req_1.2@host"}) {
    EXPECT_TRUE(isValidRequestId(id)) << id;
  }
  EXPECT_TRUE(isValidRequestId(std::string(kMaxRequestIdLength, 'x')));
}

TEST(RequestIdTest, MalformedClientIdsAreNot) {
  for (const std::string id : {"", "has space", "quote\"", "back\\slash", "tab\t", "semi;colon",
                               "comma,", "caf\xC3\xA9", "<script>"}) {
    EXPECT_FALSE(isValidRequestId(id)) << id;
  }
  EXPECT_FALSE(isValidRequestId(std::string(kMaxRequestIdLength + 1, 'x')));
  EXPECT_FALSE(isValidRequestId(std::string("nul\0", 4)));
}

TEST(TraceparentTest, ValidValuesYieldTheirTraceId) {
  EXPECT_EQ(traceIdOf(kTraceparent), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(traceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may append fields after a dash (forward compatibility).
  EXPECT_EQ(traceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(traceIdOf("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(TraceparentTest, InvalidValuesYieldNothing) {
  const char* kInvalid[] = {
      "",
      "garbage",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff is invalid
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero parent id
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper-case hex
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    // short trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // v00 must be exactly 55
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",    // short flags
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",   // non-hex flags
      "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",   // wrong separators
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version, no dash
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // non-hex version
  };
  for (const char* tp : kInvalid) EXPECT_EQ(traceIdOf(tp), "") << tp;
}

TEST(IdGeneratorTest, UuidsAreVersion4AndDistinct) {
  IdGenerator ids(42);
  const std::regex uuid4("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = ids.uuid();
    EXPECT_TRUE(std::regex_match(id, uuid4)) << id;
    EXPECT_TRUE(isValidRequestId(id)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
  const std::string trace = ids.hex(16);
  EXPECT_EQ(trace.size(), 32u);
  EXPECT_EQ(trace.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(IdGenerator(1).uuid(), IdGenerator(2).uuid());
  EXPECT_EQ(IdGenerator(7).uuid(), IdGenerator(7).uuid());  // seeded: reproducible
}

// The hex digits are written eight at a time: the same text
// as formatting the generator's stream (splitmix64) with printf's %016llx,
// for uuid(), hex() of every length and a field order of headers unchanged.
TEST(IdGeneratorTest, DigitsAreTheStreamFormattedMostSignificantFirst) {
  const auto splitmix = [](uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const auto hex16 = [](uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return std::string(buf, 16);
  };
  for (const uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{42}, ~uint64_t{0}}) {
    IdGenerator ids(seed);
    uint64_t state = seed;
    for (int round = 0; round < 300; ++round) {
      if (round % 3 == 0) {
        uint64_t hi = splitmix(state);
        uint64_t lo = splitmix(state);
        hi = (hi & ~0xF000ULL) | 0x4000ULL;
        lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;
        const std::string h = hex16(hi) + hex16(lo);
        const std::string expected = h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) +
                                     "-" + h.substr(16, 4) + "-" + h.substr(20);
        ASSERT_EQ(ids.uuid(), expected);
      } else {
        const size_t bytes = 1 + static_cast<size_t>(round) % 20;
        std::string expected;
        for (size_t i = 0; i < bytes; i += 8) {
          expected += hex16(splitmix(state)).substr(0, 2 * std::min<size_t>(8, bytes - i));
        }
        ASSERT_EQ(ids.hex(bytes), expected) << bytes;
      }
    }
  }
}

TEST(EstablishIdentityTest, KeepsAWellFormedRequestIdAndTraceparent) {
  IdGenerator ids(1);
  HeaderMap h;
  h.add("x-request-id", "client-42");
  h.add("traceparent", kTraceparent);
  h.add("tracestate", "vendor=1");
  const RequestIdentity identity = establishIdentity(h, ids);
  EXPECT_EQ(identity.request_id, "client-42");
  EXPECT_FALSE(identity.request_id_generated);
  EXPECT_EQ(identity.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_FALSE(identity.trace_started);
  EXPECT_EQ(h.get("x-request-id"), "client-42");
  EXPECT_EQ(h.get("traceparent"), kTraceparent);
  EXPECT_EQ(h.get("tracestate"), "vendor=1");
}

TEST(EstablishIdentityTest, GeneratesWhatIsMissing) {
  IdGenerator ids(1);
  HeaderMap h;
  const RequestIdentity identity = establishIdentity(h, ids);
  EXPECT_TRUE(identity.request_id_generated);
  EXPECT_TRUE(identity.trace_started);
  EXPECT_EQ(h.get("x-request-id"), identity.request_id);
  EXPECT_TRUE(isValidRequestId(identity.request_id));
  const std::string tp(h.get("traceparent").value_or(""));
  EXPECT_EQ(traceIdOf(tp), identity.trace_id) << tp;
  EXPECT_EQ(tp.substr(0, 3), "00-");
  EXPECT_EQ(tp.substr(52), "-01");
}

TEST(EstablishIdentityTest, ReplacesMalformedOrRepeatedValues) {
  IdGenerator ids(1);
  HeaderMap h;
  h.add("x-request-id", "has space");
  h.add("traceparent", "00-zzz");
  h.add("tracestate", "belongs=to-the-broken-trace");
  RequestIdentity identity = establishIdentity(h, ids);
  EXPECT_TRUE(identity.request_id_generated);
  EXPECT_NE(identity.request_id, "has space");
  EXPECT_EQ(h.getAll("x-request-id").size(), 1u);
  EXPECT_TRUE(identity.trace_started);
  EXPECT_EQ(traceIdOf(h.get("traceparent").value_or("")), identity.trace_id);
  EXPECT_FALSE(h.has("tracestate"));

  HeaderMap twice;
  twice.add("x-request-id", "a");
  twice.add("x-request-id", "b");
  twice.add("traceparent", kTraceparent);
  twice.add("traceparent", kTraceparent);
  identity = establishIdentity(twice, ids);
  EXPECT_TRUE(identity.request_id_generated);
  EXPECT_TRUE(identity.trace_started);
  EXPECT_EQ(twice.getAll("x-request-id").size(), 1u);
  EXPECT_EQ(twice.getAll("traceparent").size(), 1u);
}

// establishIdentity as it was before it read both fields in one pass: a
// separate walk over the head for each, the second after x-request-id was
// replaced or added.
std::string_view oldSingleValue(const HeaderMap& headers, std::string_view name, bool& present) {
  std::string_view value;
  int seen = 0;
  for (const auto& [n, v] : headers) {
    if (n == name && ++seen == 1) value = v;
  }
  present = seen > 0;
  return seen == 1 ? value : std::string_view();
}

RequestIdentity oldEstablishIdentity(HeaderMap& headers, IdGenerator& ids) {
  RequestIdentity identity;
  bool present = false;
  const std::string_view client_id = oldSingleValue(headers, "x-request-id", present);
  if (isValidRequestId(client_id)) {
    identity.request_id = std::string(client_id);
  } else {
    identity.request_id = ids.uuid();
    identity.request_id_generated = true;
    headers.set("x-request-id", identity.request_id);
  }
  const std::string_view traceparent = oldSingleValue(headers, "traceparent", present);
  const std::string_view trace_id = traceIdOf(traceparent);
  if (!trace_id.empty()) {
    identity.trace_id = std::string(trace_id);
  } else {
    const std::string trace = ids.hex(16);  // drawn first, then the parent id
    const std::string parent = ids.hex(8);
    const std::string tp = "00-" + trace + "-" + parent + "-01";
    identity.trace_id = tp.substr(3, 32);
    identity.trace_started = true;
    if (present) headers.remove("tracestate");
    headers.set("traceparent", tp);
  }
  return identity;
}

TEST(TraceIdTest, HoldsItsDigitsInlineAndReadsAsText) {
  TraceId id;
  EXPECT_TRUE(id.empty());
  EXPECT_EQ(id.view(), "");
  id = std::string_view("4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(id, "4bf92f3577b34da6a3ce929d0e0e4736");
  const std::string_view text = id;  // what the access log reads
  EXPECT_EQ(text, "4bf92f3577b34da6a3ce929d0e0e4736");
  TraceId copy = id;
  EXPECT_EQ(copy, id);
  copy = std::string_view("00f067aa0ba902b7");
  EXPECT_EQ(copy.size(), 16u);
  EXPECT_FALSE(copy == id);
  id = std::string_view(std::string(40, 'a'));  // never longer than a trace id
  EXPECT_EQ(id.size(), TraceId::kSize);
  id = std::string_view();
  EXPECT_TRUE(id.empty());
}

TEST(EstablishIdentityTest, OnePassMatchesTheSeparateLookUps) {
  // Random heads: none, one or two of each field, good and bad values, and
  // enough other fields that adding one sometimes grows the map's block
  // (the one-pass read must not keep views across that).
  const std::vector<std::string> request_ids = {"client-42",           "has space",      "", "a",
                                                std::string(129, 'x'), "req_01HZX/+=@:."};
  const std::vector<std::string> traceparents = {
      kTraceparent, "00-zzz", "", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"};
  std::mt19937 rng(7);
  for (int round = 0; round < 5'000; ++round) {
    HeaderMap head;
    const int fields = static_cast<int>(rng() % 24);
    const int id_at = static_cast<int>(rng() % 25) - 1;
    const int tp_at = static_cast<int>(rng() % 25) - 1;
    for (int i = 0; i <= fields; ++i) {
      for (int k = 0; k < 2; ++k) {
        if (i == id_at && (k == 0 || rng() % 4 == 0)) {
          head.add(rng() % 8 == 0 ? "X-Request-Id" : "x-request-id",
                   request_ids[rng() % request_ids.size()]);
        }
        if (i == tp_at && (k == 0 || rng() % 4 == 0)) {
          head.add("traceparent", traceparents[rng() % traceparents.size()]);
        }
      }
      if (rng() % 6 == 0) head.add("tracestate", "vendor=" + std::to_string(i));
      if (i < fields) head.add("x-filler-" + std::to_string(i), std::string(rng() % 40, 'v'));
    }
    HeaderMap old_head = head;
    const uint64_t seed = rng();
    IdGenerator ids(seed);
    IdGenerator old_ids(seed);
    const RequestIdentity got = establishIdentity(head, ids);
    const RequestIdentity want = oldEstablishIdentity(old_head, old_ids);
    EXPECT_EQ(got.request_id, want.request_id) << round;
    EXPECT_EQ(got.trace_id, want.trace_id) << round;
    EXPECT_EQ(got.request_id_generated, want.request_id_generated) << round;
    EXPECT_EQ(got.trace_started, want.trace_started) << round;
    ASSERT_EQ(head.entries(), old_head.entries()) << round;
  }
}

}  // namespace
}  // namespace sluice
