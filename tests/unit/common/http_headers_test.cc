// Tests for HeaderMap (proxy/http_headers.h): names are stored lower-case,
// lookups ignore case, values are verbatim, order and duplicates survive.

#include "common/http_headers.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

using Entries = std::vector<HeaderMap::Entry>;

TEST(HeaderCaseTest, ToLowerOnlyTouchesAsciiLetters) {
  EXPECT_EQ(toLower("Content-Type"), "content-type");
  EXPECT_EQ(toLower("X-SLUICE-123_@"), "x-sluice-123_@");
  EXPECT_EQ(toLower(""), "");
  EXPECT_EQ(toLower("\xC3\x89T\xC3\x89"), "\xC3\x89t\xC3\x89");  // UTF-8 bytes untouched
}

TEST(HeaderCaseTest, EqualsIgnoreCaseTable) {
  struct Row {
    std::string_view a, b;
    bool equal;
  };
  const Row kRows[] = {
      {"host", "HOST", true},  {"Content-Length", "content-length", true},
      {"", "", true},          {"host", "hosts", false},
      {"host", "h0st", false}, {"a", "", false},
      {"[", "{", false},  // 0x5B vs 0x7B differ by 32 but are not letters
      {"@", "`", false},
  };
  for (const auto& r : kRows) {
    EXPECT_EQ(equalsIgnoreCase(r.a, r.b), r.equal) << r.a << " vs " << r.b;
    EXPECT_EQ(equalsIgnoreCase(r.b, r.a), r.equal) << r.b << " vs " << r.a;
  }
}

TEST(HeaderMapTest, StartsEmpty) {
  HeaderMap h;
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.size(), 0u);
  EXPECT_FALSE(h.get("host").has_value());
  EXPECT_TRUE(h.getAll("host").empty());
  EXPECT_FALSE(h.has("host"));
  EXPECT_EQ(h.remove("host"), 0u);
}

TEST(HeaderMapTest, AddLowerCasesNamesKeepsValuesVerbatim) {
  HeaderMap h;
  h.add("Content-Type", "Application/JSON; Charset=UTF-8");
  h.add("X-Request-ID", "  AbC  ");
  EXPECT_EQ(h.entries(), (Entries{{"content-type", "Application/JSON; Charset=UTF-8"},
                                  {"x-request-id", "  AbC  "}}));
}

TEST(HeaderMapTest, LookupsIgnoreCase) {
  HeaderMap h;
  h.add("X-Budget-Ms", "250");
  for (std::string_view name : {"x-budget-ms", "X-BUDGET-MS", "x-BuDgEt-mS"}) {
    ASSERT_TRUE(h.get(name).has_value()) << name;
    EXPECT_EQ(*h.get(name), "250") << name;
    EXPECT_TRUE(h.has(name)) << name;
    EXPECT_EQ(h.getAll(name), std::vector<std::string_view>{"250"}) << name;
  }
}

TEST(HeaderMapTest, OrderAndDuplicatesPreserved) {
  HeaderMap h;
  h.add("a", "1");
  h.add("B", "2");
  h.add("A", "3");
  h.add("c", "4");
  h.add("a", "5");
  EXPECT_EQ(h.size(), 5u);
  EXPECT_EQ(h.entries(), (Entries{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"c", "4"}, {"a", "5"}}));
  EXPECT_EQ(*h.get("a"), "1");  // get = the first
  EXPECT_EQ(h.getAll("A"), (std::vector<std::string_view>{"1", "3", "5"}));

  // Iteration yields the same order as entries().
  Entries seen;
  for (const auto& e : h) seen.push_back(e);
  EXPECT_EQ(seen, h.entries());
}

TEST(HeaderMapTest, EmptyValueIsPresent) {
  HeaderMap h;
  h.add("x-empty", "");
  EXPECT_TRUE(h.has("x-empty"));
  ASSERT_TRUE(h.get("x-empty").has_value());
  EXPECT_EQ(*h.get("x-empty"), "");
}

TEST(HeaderMapTest, SetReplacesAllCopiesWithOneAtTheEnd) {
  HeaderMap h;
  h.add("Accept", "a");
  h.add("x-a", "1");
  h.add("ACCEPT", "b");
  h.add("x-b", "2");
  h.set("Accept", "c");
  EXPECT_EQ(h.entries(), (Entries{{"x-a", "1"}, {"x-b", "2"}, {"accept", "c"}}));
  EXPECT_EQ(h.getAll("accept"), std::vector<std::string_view>{"c"});
}

TEST(HeaderMapTest, SetAppendsWhenAbsent) {
  HeaderMap h;
  h.add("x-a", "1");
  h.set("X-New", "v");
  EXPECT_EQ(h.entries(), (Entries{{"x-a", "1"}, {"x-new", "v"}}));
}

TEST(HeaderMapTest, RemoveIsCaseInsensitiveCountsAndKeepsOthersInOrder) {
  HeaderMap h;
  h.add("a", "1");
  h.add("Cookie", "x");
  h.add("b", "2");
  h.add("cookie", "y");
  h.add("c", "3");
  EXPECT_EQ(h.remove("COOKIE"), 2u);
  EXPECT_EQ(h.entries(), (Entries{{"a", "1"}, {"b", "2"}, {"c", "3"}}));
  EXPECT_FALSE(h.has("cookie"));
  EXPECT_EQ(h.remove("cookie"), 0u);
  EXPECT_EQ(h.size(), 3u);
}

TEST(HeaderMapTest, RemoveDoesNotMatchPrefixes) {
  HeaderMap h;
  h.add("x-sluice", "1");
  h.add("x-sluice-attempts", "2");
  EXPECT_EQ(h.remove("x-sluice"), 1u);
  EXPECT_EQ(h.entries(), (Entries{{"x-sluice-attempts", "2"}}));
  EXPECT_FALSE(h.has("x-sluice-attempt"));
}

TEST(HeaderMapTest, ClearEmpties) {
  HeaderMap h;
  h.add("a", "1");
  h.add("b", "2");
  h.clear();
  EXPECT_TRUE(h.empty());
  EXPECT_FALSE(h.has("a"));
}

TEST(HeaderMapTest, ViewsStayValidAcrossLookups) {
  HeaderMap h;
  h.add("x", "value-one");
  h.add("x", "value-two");
  const auto all = h.getAll("x");
  const auto first = h.get("X");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1], "value-two");
  EXPECT_EQ(*first, "value-one");
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(TrimOwsTest, StripsSpacesAndTabsOnlyAtTheEnds) {
  EXPECT_EQ(trimOws("  3  "), "3");
  EXPECT_EQ(trimOws("\t1.5\t "), "1.5");
  EXPECT_EQ(trimOws("a b"), "a b");
  EXPECT_EQ(trimOws(" \t "), "");
  EXPECT_EQ(trimOws(""), "");
  EXPECT_EQ(trimOws("\r\n"), "\r\n");  // CR/LF are not OWS
}

}  // namespace
}  // namespace sluice
