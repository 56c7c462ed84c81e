// Tests for HeaderMap (common/http_headers.h): names are stored lower-case,
// lookups ignore case, values are verbatim, order and duplicates survive.

#include "common/http_headers.h"

#include <gtest/gtest.h>

#include <iterator>
#include <random>
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
  EXPECT_EQ(h.count("A"), 3u);
  EXPECT_EQ(h.count("b"), 1u);
  EXPECT_EQ(h.count("d"), 0u);

  // Iteration yields the same order as entries().
  Entries seen;
  for (const auto& [name, value] : h) seen.emplace_back(name, value);
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

// The storage (one byte string, fields as offsets into it): what a caller may
// rely on, per the header's comment.

TEST(HeaderMapStorageTest, ViewsStayValidAcrossRemove) {
  HeaderMap h;
  h.add("keep", "a-value-long-enough-not-to-fit-in-a-small-string");
  h.add("drop", "x");
  const auto kept = h.get("keep");
  EXPECT_EQ(h.remove("drop"), 1u);
  EXPECT_EQ(*kept, "a-value-long-enough-not-to-fit-in-a-small-string");
}

TEST(HeaderMapStorageTest, AViewOfTheMapMayBeAddedBackEvenWhenItGrows) {
  HeaderMap h;
  const std::string big(600, 'v');  // past the first reservation: the next add must grow
  h.add("Source", big);
  for (int i = 0; i < 40; ++i) {
    h.add("copy", *h.get("source"));    // a value of the map, added while it grows
    h.set("source", *h.get("source"));  // a field set to its own (removed) value
  }
  EXPECT_EQ(h.getAll("copy").size(), 40u);
  for (auto v : h.getAll("copy")) EXPECT_EQ(v, big);
  EXPECT_EQ(h.getAll("source"), (std::vector<std::string_view>{big}));
}

TEST(HeaderMapStorageTest, ANameTakenFromTheMapIsLowerCasedOnlyInTheCopy) {
  HeaderMap h;
  h.add("x", "Mixed-Case");
  h.add(*h.get("x"), "v");  // a value of the map used as a name
  EXPECT_EQ(h.entries(), (Entries{{"x", "Mixed-Case"}, {"mixed-case", "v"}}));
}

TEST(HeaderMapStorageTest, CopiesCarryOnlyLiveFieldsAndAreIndependent) {
  HeaderMap h;
  for (int i = 0; i < 20; ++i) h.add("f" + std::to_string(i % 4), std::string(30, 'a' + i % 26));
  h.remove("f1");
  h.set("f2", "replaced");
  HeaderMap copy = h;
  EXPECT_EQ(copy.entries(), h.entries());
  h.add("only-in-original", "1");
  copy.set("f0", "only-in-copy");
  EXPECT_FALSE(copy.has("only-in-original"));
  EXPECT_EQ(h.getAll("f0").size(), 5u);
  EXPECT_EQ(*copy.get("f0"), "only-in-copy");

  HeaderMap assigned;
  assigned.add("stale", "x");
  assigned = copy;
  EXPECT_EQ(assigned.entries(), copy.entries());
  HeaderMap& alias = assigned;
  assigned = alias;  // self-assignment keeps it
  EXPECT_EQ(assigned.entries(), copy.entries());

  HeaderMap moved = std::move(assigned);
  EXPECT_EQ(moved.entries(), copy.entries());
}

TEST(HeaderMapStorageTest, ManyFieldsAndLargeValuesKeepOrder) {
  HeaderMap h;
  Entries expected;
  for (int i = 0; i < 300; ++i) {
    const std::string name = "Name-" + std::to_string(i);
    const std::string value(static_cast<size_t>(i * 7 % 1000), static_cast<char>('A' + i % 26));
    h.add(name, value);
    expected.emplace_back(toLower(name), value);
  }
  EXPECT_EQ(h.entries(), expected);
  EXPECT_EQ(h.size(), 300u);
  h.clear();
  EXPECT_TRUE(h.empty());
  h.add("after-clear", "1");
  EXPECT_EQ(h.entries(), (Entries{{"after-clear", "1"}}));
}

// A map keeps its slots and bytes in one block and lower-cases names
// eight bytes at a time. A plain model (pairs, names folded a byte at a time)
// must agree with it after every step of random edits: adds of names in any
// case with non-ASCII and punctuation bytes around the letters' edges
// ('@', '[', '`', '{'), sets, removes, removeIf, copies, moves, clears, and
// values that are views of the map itself.
TEST(HeaderMapStorageTest, AddLowerCaseMatchesAddForNamesWithoutUpperCase) {
  // addLowerCase() is add() without the lower-casing, for names the caller
  // knows are lower-case (HTTP/2 fields nghttp2 validated): for such names
  // both maps must hold the same fields, whatever the lengths (the word-wise
  // lower-casing has its own short and long paths), bytes and growth, and
  // with values that are views of the map itself.
  std::mt19937 rng(18);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::string kNameBytes = "az@[`{-_09:\x80\xc3\xff";  // no 'A'..'Z'
  for (int round = 0; round < 300; ++round) {
    HeaderMap by_add;
    HeaderMap by_lower;
    for (int step = 0; step < 50; ++step) {
      std::string name;
      for (size_t len = pick(3) == 0 ? pick(40) : pick(12); len > 0; --len) {
        name += kNameBytes[pick(kNameBytes.size())];
      }
      if (pick(8) == 0 && !by_add.empty()) {
        // A value that is a view of each map itself (copied before the block grows).
        const size_t i = pick(by_add.size());
        const std::string_view own_a = (*std::next(by_add.begin(), i)).value;
        const std::string_view own_l = (*std::next(by_lower.begin(), i)).value;
        by_add.add(name, own_a);
        by_lower.addLowerCase(name, own_l);
      } else if (pick(10) == 0) {
        by_add.set(name, "s");
        by_lower.set(name, "s");
      } else {
        const std::string value(pick(60), static_cast<char>('a' + pick(26)));
        by_add.add(name, value);
        by_lower.addLowerCase(name, value);
      }
      ASSERT_EQ(by_lower.entries(), by_add.entries()) << "round " << round << " step " << step;
      ASSERT_EQ(by_lower.getAll(name), by_add.getAll(name));
    }
  }
}

TEST(HeaderMapStorageTest, RandomEditsMatchAPlainModel) {
  std::mt19937 rng(8);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::string kNameBytes = "aZzA@[`{-_09\x80\xc3\xff";
  const auto randomName = [&] {
    std::string n;
    for (size_t len = pick(3) == 0 ? pick(24) : pick(4); len > 0; --len) {
      n += kNameBytes[pick(kNameBytes.size())];
    }
    return n;
  };
  const auto lower = [](std::string n) {
    for (char& c : n) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return n;
  };
  for (int round = 0; round < 300; ++round) {
    HeaderMap map;
    Entries model;
    std::vector<std::string> names;
    for (int step = 0; step < 60; ++step) {
      const std::string name =
          names.empty() || pick(3) == 0 ? randomName() : names[pick(names.size())];
      names.push_back(name);
      std::string value(pick(40), static_cast<char>('a' + pick(26)));
      switch (pick(9)) {
        case 0:
        case 1:
        case 2:
          map.add(name, value);
          model.emplace_back(lower(name), value);
          break;
        case 3: {  // a value that is a view of the map itself
          if (map.empty()) break;
          const std::string_view own = (*std::next(map.begin(), pick(map.size()))).value;
          model.emplace_back(lower(name), std::string(own));
          map.add(name, own);
          break;
        }
        case 4: {
          std::erase_if(model, [&](const auto& e) { return e.first == lower(name); });
          model.emplace_back(lower(name), value);
          map.set(name, value);
          break;
        }
        case 5: {
          const size_t before = model.size();
          std::erase_if(model, [&](const auto& e) { return e.first == lower(name); });
          EXPECT_EQ(map.remove(name), before - model.size());
          break;
        }
        case 6: {
          const auto drop = [](std::string_view n, std::string_view v) {
            return (n.size() + v.size()) % 3 == 0;
          };
          const size_t before = model.size();
          std::erase_if(model, [&](const auto& e) { return drop(e.first, e.second); });
          EXPECT_EQ(map.removeIf(drop), before - model.size());
          break;
        }
        case 7: {
          HeaderMap copy(map);
          map = HeaderMap();
          EXPECT_TRUE(map.empty());
          map = std::move(copy);
          EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
          copy.add("x", "y");         // and usable
          EXPECT_EQ(copy.entries(), (Entries{{"x", "y"}}));
          break;
        }
        default:
          if (pick(10) == 0) {
            map.clear();
            model.clear();
          }
          break;
      }
      ASSERT_EQ(map.entries(), model) << "round " << round << " step " << step;
      std::vector<std::string_view> all;
      for (const auto& [n, v] : model) {
        if (n == lower(name)) all.push_back(v);
      }
      ASSERT_EQ(map.getAll(name), all);
      ASSERT_EQ(map.count(name), all.size());
      ASSERT_EQ(map.has(name), !all.empty());
      if (!all.empty()) {
        ASSERT_EQ(map.get(name), all.front());
      }
    }
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(HeaderMapStorageTest, ForEachOfLengthsVisitsTheFieldsOfTheGivenLengthsInOrder) {
  HeaderMap h;
  h.add("Host", "a");
  h.add("x-run-id", "r1");
  h.add("accept", "b");
  h.add("X-Run-Id", "r2");
  h.add(std::string(70, 'l'), "long");
  std::vector<std::string> seen;
  h.forEachOfLengths(uint64_t{1} << 8 | uint64_t{1} << 4, [&](const HeaderMap::Field& f) {
    seen.push_back(std::string(f.name) + "=" + std::string(f.value));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"host=a", "x-run-id=r1", "x-run-id=r2",
                                            std::string(70, 'l') + "=long"}))
      << "a name of 64 bytes or more is always visited";
  seen.clear();
  h.forEachOfLengths(0, [&](const HeaderMap::Field& f) { seen.push_back(std::string(f.name)); });
  EXPECT_EQ(seen, std::vector<std::string>{std::string(70, 'l')});
}

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
