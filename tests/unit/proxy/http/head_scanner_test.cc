// Http1ServerConnection::HeadScanner, the pre-scan of a request head for
// obsolete line folding and whitespace before a colon. It is
// line-driven (memchr for the request line and values, a table loop for
// names); the byte-per-step state machine it replaced is kept here as the
// reference, and both must agree on every slicing of random heads.

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "proxy/downstream/http1_server_connection.h"

namespace sluice {
namespace {

using HeadScanner = Http1ServerConnection::HeadScanner;

// The scanner it replaced: one state step per byte.
class ReferenceScanner {
 public:
  std::optional<size_t> scan(const char* data, size_t len) {
    const std::optional<size_t> head = scanLines(data, len);
    if (!head) return head;
    head_bytes_ += *head;
    if (tooLarge()) return std::nullopt;
    return head;
  }
  bool done() const { return state_ == State::Done; }
  bool tooLarge() const { return head_bytes_ > HeadScanner::kMaxHeadBytes; }

 private:
  std::optional<size_t> scanLines(const char* data, size_t len) {
    size_t i = 0;
    for (; i < len && state_ != State::Done; ++i) {
      const char c = data[i];
      switch (state_) {
        case State::RequestLine:
          if (c == '\n') {
            if (request_line_text_) state_ = State::LineStart;
          } else if (c != '\r') {
            request_line_text_ = true;
          }
          break;
        case State::LineStart:
          if (c == ' ' || c == '\t') return std::nullopt;
          state_ = c == '\r' ? State::EndCr : c == '\n' ? State::Done : State::Name;
          break;
        case State::Name:
          if (c == ' ' || c == '\t') return std::nullopt;
          if (c == ':') state_ = State::Value;
          if (c == '\n') state_ = State::LineStart;
          break;
        case State::Value: {
          const void* lf = std::memchr(data + i, '\n', len - i);
          if (lf == nullptr) return len;
          i = static_cast<size_t>(static_cast<const char*>(lf) - data);
          state_ = State::LineStart;
          break;
        }
        case State::EndCr:
          state_ = State::Done;
          break;
        case State::Done:
          break;
      }
    }
    return i;
  }

  enum class State { RequestLine, LineStart, Name, Value, EndCr, Done };
  State state_ = State::RequestLine;
  bool request_line_text_ = false;
  size_t head_bytes_ = 0;
};

// A head-like text: mostly well-formed lines, with the bytes the scanner
// decides on (SP, HTAB, ':', CR, LF) sprinkled in anywhere, empty lines
// before the request line, lines without a colon, bare LFs, a body after.
std::string randomHead(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  static const char kSpecial[] = {' ', '\t', ':', '\r', '\n', 'a', 'Z', '-', '\x80', '\0'};
  std::string out;
  for (int n = pick(3); n > 0; --n) out += pick(2) ? "\r\n" : "\n";
  out += pick(4) ? "POST /v1/chat/completions HTTP/1.1\r\n" : "GET / HTTP/1.0\n";
  for (int lines = pick(12); lines > 0; --lines) {
    std::string line = pick(2) ? "Content-Type: application/json" : "x-k:v";
    for (int k = pick(4); k > 0; --k) {
      line.insert(line.begin() + pick(static_cast<int>(line.size()) + 1),
                  kSpecial[pick(sizeof(kSpecial))]);
    }
    out += line;
    out += pick(6) ? "\r\n" : "\n";
  }
  out += pick(5) ? "\r\n" : (pick(2) ? "\n" : "");
  out += "{\"model\":\"m\"}";
  return out;
}

// Feeds `text` to both scanners in the slices `cuts` makes, as the
// connection does: stop at a refusal or at the head's end.
void expectSameOnSlices(const std::string& text, const std::vector<size_t>& cuts) {
  HeadScanner scanner;
  scanner.reset();
  ReferenceScanner reference;
  size_t at = 0;
  for (size_t slice = 0; slice <= cuts.size() && at < text.size(); ++slice) {
    const size_t end = slice < cuts.size() ? std::max(at, cuts[slice]) : text.size();
    const std::optional<size_t> got = scanner.scan(text.data() + at, end - at);
    const std::optional<size_t> want = reference.scan(text.data() + at, end - at);
    ASSERT_EQ(got, want) << "slice at " << at << " of " << testing::PrintToString(text);
    ASSERT_EQ(scanner.done(), reference.done());
    ASSERT_EQ(scanner.tooLarge(), reference.tooLarge());
    if (!got || scanner.done()) return;
    at = end;
  }
}

TEST(HeadScannerTest, LineDrivenScanMatchesTheByteStateMachineOnRandomHeads) {
  std::mt19937 rng(20261126);
  for (int round = 0; round < 20000; ++round) {
    const std::string text = randomHead(rng);
    // Whole, byte by byte, and in random slices.
    expectSameOnSlices(text, {});
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
    expectSameOnSlices(text, bytes);
    std::vector<size_t> cuts;
    for (size_t at = 0; at < text.size();) {
      at += 1 + rng() % 24;
      cuts.push_back(std::min(at, text.size()));
    }
    expectSameOnSlices(text, cuts);
  }
}

TEST(HeadScannerTest, RefusesFoldingAndWhitespaceBeforeTheColon) {
  const auto scanWhole = [](std::string_view text) {
    HeadScanner scanner;
    scanner.reset();
    return scanner.scan(text.data(), text.size());
  };
  EXPECT_EQ(scanWhole("GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n"), std::nullopt);
  EXPECT_EQ(scanWhole("GET / HTTP/1.1\r\nHost: a\r\n\tb\r\n\r\n"), std::nullopt);
  EXPECT_EQ(scanWhole("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), std::nullopt);
  EXPECT_EQ(scanWhole("GET / HTTP/1.1\r\nHo\tst: a\r\n\r\n"), std::nullopt);
  const std::string ok = "\r\nGET / HTTP/1.1\r\nHost: a b\t c\r\nX:\r\n\r\nbody";
  HeadScanner scanner;
  scanner.reset();
  EXPECT_EQ(scanner.scan(ok.data(), ok.size()), ok.size() - 4);
  EXPECT_TRUE(scanner.done());
}

TEST(HeadScannerTest, BoundsTheRawHead) {
  std::string text = "GET / HTTP/1.1\r\nx: ";
  text.append(HeadScanner::kMaxHeadBytes, 'v');
  HeadScanner scanner;
  scanner.reset();
  EXPECT_EQ(scanner.scan(text.data(), text.size()), std::nullopt);
  EXPECT_TRUE(scanner.tooLarge());
}

}  // namespace
}  // namespace sluice
