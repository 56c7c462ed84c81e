// Http1HeadWriter: heads are written on the stack up to kStackBytes and on
// the heap past it; either way the bytes must be what appending to a
// std::string gives (the codecs' earlier way).

#include "proxy/http/http1_head_writer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace sluice {
namespace {

TEST(Http1HeadWriterTest, WritesWhatAStringWouldAcrossTheStackBound) {
  std::mt19937 rng(1126);
  for (int round = 0; round < 500; ++round) {
    Http1HeadWriter writer;
    std::string want;
    const size_t steps = rng() % 120;
    for (size_t i = 0; i < steps; ++i) {
      const std::string a(rng() % (rng() % 8 == 0 ? 900 : 40), static_cast<char>('a' + rng() % 26));
      const std::string b(rng() % 60, static_cast<char>('A' + rng() % 26));
      if (rng() % 3 == 0) {
        writer.add(a);
        want += a;
      } else {
        writer.addField(a, b);
        want += a + ": " + b + "\r\n";
      }
      ASSERT_EQ(writer.view(), want) << "round " << round << " step " << i;
    }
  }
}

TEST(Http1HeadWriterTest, FillsTheStackExactlyThenSpills) {
  Http1HeadWriter writer;
  const std::string full(Http1HeadWriter::kStackBytes - 4, 'n');
  writer.addField("", full.substr(2));  // ": " + value + CRLF
  writer.add("ab");                     // exactly kStackBytes
  EXPECT_EQ(writer.size(), Http1HeadWriter::kStackBytes);
  writer.addField("x", "");  // past it
  EXPECT_EQ(writer.view(), ": " + full.substr(2) + "\r\nab" + "x: \r\n");
}

}  // namespace
}  // namespace sluice
