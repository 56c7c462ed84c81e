#include "common/json_fields.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <utility>
#include <vector>

namespace sluice {
namespace {

constexpr size_t npos = std::string_view::npos;

// Byte classes, one table look-up per byte instead of several comparisons
// (the scans below run over every streamed chunk: PROFILE.md).
enum ByteClass : uint8_t {
  kPlainInString = 1,  // printable ASCII other than '"' and '\\': nothing to check
  kEndsScalar = 2,     // ',' '}' ']' or whitespace: ends a number or literal
  kEndsKey = 4,        // '"' or '\\': ends a key the member scan takes as it is
  kPlainChar = 8,      // a character plainString() takes: 0x20-0x7e but '"' and '\\'
  kStructural = 16,    // '"' '{' '}' '[' ']': what endOfValue() stops at in a container
};

constexpr std::array<uint8_t, 256> kByteClass = [] {
  std::array<uint8_t, 256> classes{};
  for (int c = 0x20; c < 0x80; ++c) {
    if (c != '"' && c != '\\') classes[c] |= kPlainInString;
    if (c != '"' && c != '\\' && c != 0x7f) classes[c] |= kPlainChar;
  }
  for (const char c : {',', '}', ']', ' ', '\n', '\r', '\t'}) {
    classes[static_cast<unsigned char>(c)] |= kEndsScalar;
  }
  for (const char c : {'"', '{', '}', '[', ']'})
    classes[static_cast<unsigned char>(c)] |= kStructural;
  classes['"'] |= kEndsKey;
  classes['\\'] |= kEndsKey;
  return classes;
}();

bool isByteClass(char c, ByteClass byte_class) {
  return (kByteClass[static_cast<unsigned char>(c)] & byte_class) != 0;
}

size_t skipWhitespace(std::string_view s, size_t i) {
  // Every whitespace byte is at most ' ': most bytes leave at the first test.
  while (i < s.size() && static_cast<unsigned char>(s[i]) <= ' ' &&
         (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) {
    ++i;
  }
  return i;
}

// Eight bytes at a time (SWAR): PlainObjectReader's strings.
constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighs = 0x8080808080808080ULL;
constexpr bool kLittleEndian = std::endian::native == std::endian::little;

uint64_t load8(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// The high bit of each byte of `w` that is zero; exact for the lowest such
// byte (a borrow only runs upward, past a zero byte), so with the bytes
// little-endian the lowest set bit marks the first match.
uint64_t zeroBytes(uint64_t w) { return (w - kOnes) & ~w & kHighs; }

// The byte index of the lowest mark (the first match, little-endian).
size_t firstMarked(uint64_t marks) { return static_cast<size_t>(__builtin_ctzll(marks)) / 8; }

// s[i] is the opening quote; returns the index after the closing one.
size_t endOfString(std::string_view s, size_t i) {
  size_t j = i + 1;
  while (j < s.size()) {
    const void* q = std::memchr(s.data() + j, '"', s.size() - j);
    if (q == nullptr) return npos;
    const size_t p = static_cast<size_t>(static_cast<const char*>(q) - s.data());
    size_t backslashes = 0;
    while (p - backslashes > i + 1 && s[p - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return p + 1;
    j = p + 1;
  }
  return npos;
}

// The index after the value that starts at s[i].
size_t endOfValue(std::string_view s, size_t i) {
  if (i >= s.size()) return npos;
  const char c = s[i];
  if (c == '"') return endOfString(s, i);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    const char* const text = s.data();
    for (size_t j = i; j < s.size();) {
      // Bytes that neither nest nor open a string, in a tight loop.
      if (!isByteClass(text[j], kStructural)) {
        ++j;
        continue;
      }
      const char d = text[j];
      if (d == '"') {
        j = endOfString(s, j);
        if (j == npos) return npos;
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return j + 1;
      }
      ++j;
    }
    return npos;
  }
  size_t j = i;
  while (j < s.size() && !isByteClass(s[j], kEndsScalar)) ++j;
  return j == i ? npos : j;
}

// Validates one JSON value at a time (see isVerifiedJson); any doubt is false.
class Verifier {
 public:
  explicit Verifier(std::string_view s) : s_(s) {}

  bool document(int max_depth) {
    i_ = skipWhitespace(s_, 0);
    if (!value(max_depth)) return false;
    return skipWhitespace(s_, i_) == s_.size();
  }

  // chatChoicesWithOutput(): verifies the array at s_[begin] and reads it in
  // one pass; end() is then the index past it.
  std::optional<uint64_t> chatChoices(size_t begin, int max_depth) {
    i_ = begin;
    if (i_ >= s_.size() || s_[i_] != '[' || max_depth <= 0) return std::nullopt;
    uint64_t with_output = 0;
    i_ = skipWhitespace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
    } else {
      for (;;) {
        if (i_ < s_.size() && s_[i_] == '{') {
          const std::optional<bool> output = chatObject(max_depth - 1, /*choice=*/true);
          if (!output) return std::nullopt;
          if (*output) ++with_output;
        } else if (!value(max_depth - 1)) {
          return std::nullopt;  // not an object: no delta, but still verified
        }
        if (!next(']')) return std::nullopt;
        if (done_) break;
      }
    }
    return with_output;
  }

  size_t end() const { return i_; }

  // Where the last `content` string of a delta this walk read lies
  // ([content_begin(), content_end()): the token with its quotes); npos
  // when there was none.
  size_t content_begin() const { return content_begin_; }
  size_t content_end() const { return content_end_; }

 private:
  // A choice (`choice`) or a delta object at s_[i_], verified; whether it
  // carries output. Duplicate keys: the last wins, as in nlohmann's DOM. A key
  // written with an escape declines (only the library decodes it).
  std::optional<bool> chatObject(int depth, bool choice) {
    if (depth <= 0) return std::nullopt;
    bool delta_output = false;
    // content, refusal, reasoning_content, reasoning, tool_calls, function_call
    bool output[6] = {};
    i_ = skipWhitespace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return false;
    }
    for (;;) {
      if (i_ >= s_.size() || s_[i_] != '"') return std::nullopt;
      const size_t key_begin = i_;
      if (!string() || escaped_) return std::nullopt;
      const std::string_view key = s_.substr(key_begin + 1, i_ - key_begin - 2);
      i_ = skipWhitespace(s_, i_);
      if (i_ >= s_.size() || s_[i_] != ':') return std::nullopt;
      i_ = skipWhitespace(s_, i_ + 1);
      const size_t value_begin = i_;
      if (choice && key == "delta" && i_ < s_.size() && s_[i_] == '{') {
        const std::optional<bool> output_here = chatObject(depth - 1, false);
        if (!output_here) return std::nullopt;
        delta_output = *output_here;
      } else {
        if (!value(depth - 1)) return std::nullopt;
        if (choice) {
          if (key == "delta") delta_output = false;  // not an object
        } else {
          const std::string_view v = s_.substr(value_begin, i_ - value_begin);
          // A string token longer than its quotes decodes to a non-empty string.
          const bool text = v.front() == '"' && v.size() > 2;
          if (key == "content") {
            output[0] = text;
            if (v.front() == '"') {
              content_begin_ = value_begin;
              content_end_ = i_;
            }
          }
          if (key == "refusal") output[1] = text;
          if (key == "reasoning_content") output[2] = text;
          if (key == "reasoning") output[3] = text;
          if (key == "tool_calls") {
            output[4] = v.front() == '[' && skipWhitespace(v, 1) != v.size() - 1;
          }
          if (key == "function_call") output[5] = v.front() == '{';
        }
      }
      if (!next('}')) return std::nullopt;
      if (done_) break;
    }
    if (choice) return delta_output;
    for (const bool o : output) {
      if (o) return true;
    }
    return false;
  }

  bool value(int depth) {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '"':
        return string();
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return integer();
    }
  }

  bool object(int depth) {
    if (depth <= 0) return false;
    i_ = skipWhitespace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      if (i_ >= s_.size() || s_[i_] != '"' || !string()) return false;
      i_ = skipWhitespace(s_, i_);
      if (i_ >= s_.size() || s_[i_] != ':') return false;
      i_ = skipWhitespace(s_, i_ + 1);
      if (!value(depth - 1)) return false;
      if (!next('}')) return false;
      if (done_) return true;
    }
  }

  bool array(int depth) {
    if (depth <= 0) return false;
    i_ = skipWhitespace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      if (!value(depth - 1)) return false;
      if (!next(']')) return false;
      if (done_) return true;
    }
  }

  // After a member or element: a ',' (more follow) or `close` (done_).
  bool next(char close) {
    i_ = skipWhitespace(s_, i_);
    done_ = false;
    if (i_ >= s_.size()) return false;
    if (s_[i_] == ',') {
      i_ = skipWhitespace(s_, i_ + 1);
      return true;
    }
    if (s_[i_] != close) return false;
    ++i_;
    done_ = true;
    return true;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  // -?(0|[1-9][0-9]*), at most 18 digits; a fraction or exponent declines.
  bool integer() {
    size_t j = i_;
    if (j < s_.size() && s_[j] == '-') ++j;
    const size_t digits = j;
    if (j < s_.size() && s_[j] == '0') {
      ++j;
    } else {
      while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') ++j;
    }
    if (j == digits || j - digits > 18) return false;
    if (j < s_.size() &&
        (s_[j] == '.' || s_[j] == 'e' || s_[j] == 'E' || (s_[j] >= '0' && s_[j] <= '9'))) {
      return false;
    }
    i_ = j;
    return true;
  }

  int hex4(size_t at) const {
    if (at + 4 > s_.size()) return -1;
    int v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = s_[k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return -1;
      }
      v = v * 16 + d;
    }
    return v;
  }

  bool escape() {  // s_[i_] is the backslash
    if (i_ + 1 >= s_.size()) return false;
    switch (s_[i_ + 1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        i_ += 2;
        return true;
      case 'u':
        break;
      default:
        return false;
    }
    const int unit = hex4(i_ + 2);
    if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return false;  // a lone low surrogate
    i_ += 6;
    if (unit < 0xD800 || unit > 0xDBFF) return true;
    // A high surrogate must be followed by an escaped low one.
    if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return false;
    const int low = hex4(i_ + 2);
    if (low < 0xDC00 || low > 0xDFFF) return false;
    i_ += 6;
    return true;
  }

  bool continuation(size_t at, unsigned char lo = 0x80, unsigned char hi = 0xBF) const {
    if (at >= s_.size()) return false;
    const auto c = static_cast<unsigned char>(s_[at]);
    return c >= lo && c <= hi;
  }

  bool utf8() {  // s_[i_] >= 0x80: one well-formed sequence (RFC 3629)
    const auto c = static_cast<unsigned char>(s_[i_]);
    size_t len;
    bool ok;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      ok = continuation(i_ + 1);
    } else if (c == 0xE0) {
      len = 3;
      ok = continuation(i_ + 1, 0xA0, 0xBF) && continuation(i_ + 2);
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      len = 3;
      ok = continuation(i_ + 1) && continuation(i_ + 2);
    } else if (c == 0xED) {
      len = 3;
      ok = continuation(i_ + 1, 0x80, 0x9F) && continuation(i_ + 2);
    } else if (c == 0xF0) {
      len = 4;
      ok = continuation(i_ + 1, 0x90, 0xBF) && continuation(i_ + 2) && continuation(i_ + 3);
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = 4;
      ok = continuation(i_ + 1) && continuation(i_ + 2) && continuation(i_ + 3);
    } else if (c == 0xF4) {
      len = 4;
      ok = continuation(i_ + 1, 0x80, 0x8F) && continuation(i_ + 2) && continuation(i_ + 3);
    } else {
      return false;
    }
    i_ += len;
    return ok;
  }

  // Sets escaped_ when the string has an escape.
  bool string() {  // s_[i_] is the opening quote
    ++i_;
    escaped_ = false;
    for (;;) {
      // Printable ASCII needs no check: skip it in a tight loop.
      const char* const data = s_.data();
      const size_t size = s_.size();
      size_t i = i_;
      while (i < size && isByteClass(data[i], kPlainInString)) ++i;
      i_ = i;
      if (i_ >= size) return false;
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c == '\\') {
        escaped_ = true;
        if (!escape()) return false;
      } else if (c < 0x20 || !utf8()) {  // a control character, or not UTF-8
        return false;
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  bool done_ = false;
  bool escaped_ = false;  // the last string() had an escape
  size_t content_begin_ = npos;
  size_t content_end_ = npos;
};

}  // namespace

bool isVerifiedJson(std::string_view text, int max_depth) {
  return Verifier(text).document(max_depth);
}

std::optional<uint64_t> chatChoicesWithOutput(std::string_view choices_text) {
  Verifier verifier(choices_text);
  const std::optional<uint64_t> with_output =
      verifier.chatChoices(skipWhitespace(choices_text, 0), 32);
  if (!with_output || skipWhitespace(choices_text, verifier.end()) != choices_text.size()) {
    return std::nullopt;
  }
  return with_output;
}

namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits at s[at]; -1 when they are not.
int32_t hex4(std::string_view s, size_t at) {
  if (at + 4 > s.size()) return -1;
  int32_t v = 0;
  for (size_t k = at; k < at + 4; ++k) {
    const int d = hexValue(s[k]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// A key written with escapes, from its opening quote at s[begin]: decodes it
// into `out` as a JSON parser does (`{"mod\u0065l": ...}` is `model` to the
// upstream, so it is `model` here too) and sets `end` to its closing quote.
// False for what a parser refuses: an unknown escape, a bad or lone
// surrogate, a control character, no closing quote.
bool decodeKey(std::string_view s, size_t begin, size_t& end, std::string& out) {
  out.clear();
  size_t i = begin + 1;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      end = i;
      return true;
    }
    if (static_cast<unsigned char>(c) < 0x20) return false;
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) return false;
    const char e = s[i + 1];
    i += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        const int32_t high = hex4(s, i);
        if (high < 0) return false;
        i += 4;
        uint32_t cp = static_cast<uint32_t>(high);
        if (cp >= 0xdc00 && cp <= 0xdfff) return false;  // a low surrogate first
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (i + 1 >= s.size() || s[i] != '\\' || s[i + 1] != 'u') return false;
          const int32_t low = hex4(s, i + 2);
          if (low < 0xdc00 || low > 0xdfff) return false;
          i += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (static_cast<uint32_t>(low) - 0xdc00);
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return false;
    }
  }
  return false;
}

// The key at s[i] and the colon after it: sets `key` and moves `i` to the
// first byte of the value. False when the framing is broken. A key written
// with an escape is decoded into `scratch` (and `key` views it).
bool memberKey(std::string_view s, size_t& i, std::string_view& key, std::string& scratch) {
  if (i >= s.size() || s[i] != '"') return false;
  // Keys are short: a byte loop finds the closing quote, and a backslash on
  // the way, cheaper than two memchr calls.
  const char* const text = s.data();
  const size_t size = s.size();
  size_t key_end = i + 1;
  while (key_end < size && !isByteClass(text[key_end], kEndsKey)) ++key_end;
  if (key_end >= size) return false;
  if (text[key_end] == '\\') {
    if (!decodeKey(s, i, key_end, scratch)) return false;
    key = scratch;
  } else {
    key = s.substr(i + 1, key_end - i - 1);
  }
  i = skipWhitespace(s, key_end + 1);
  if (i >= size || s[i] != ':') return false;
  i = skipWhitespace(s, i + 1);
  return true;
}

// The member scan from the value of `key`, which starts at s[i]: the rest
// of scanMembers(). `on_member(key, begin, end)` is given a member whose
// value starts at s[begin]; it sets `end` to the index past the value (npos:
// broken framing) and returns false to stop the scan there.
template <typename OnMember>
bool scanMembersFrom(std::string_view s, std::string_view key, size_t i, OnMember&& on_member) {
  std::string scratch;  // an escaped key, decoded
  for (;;) {
    size_t value_end = npos;
    const bool go_on = on_member(key, i, value_end);
    if (value_end == npos) return false;
    if (!go_on) return true;
    i = skipWhitespace(s, value_end);
    if (i >= s.size()) return false;
    if (s[i] == '}') return skipWhitespace(s, i + 1) == s.size();
    if (s[i] != ',') return false;
    i = skipWhitespace(s, i + 1);
    if (!memberKey(s, i, key, scratch)) return false;
  }
}

// The scan behind scanTopLevelMembers() and scanChatChunk().
template <typename OnMember>
bool scanMembers(std::string_view s, OnMember&& on_member) {
  size_t i = skipWhitespace(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skipWhitespace(s, i + 1);
  if (i < s.size() && s[i] == '}') return skipWhitespace(s, i + 1) == s.size();
  std::string_view key;
  std::string first_key;  // the first key, when escaped: it lives through the first member
  if (!memberKey(s, i, key, first_key)) return false;
  return scanMembersFrom(s, key, i, on_member);
}

// scanChatChunk()'s visitor: collects ChatChunkMembers, reading `choices` as
// the scan passes it, and notes where the first `choices` value starts and
// what the members before it held (ChatChunkScanner's resume point).
struct ChatChunkVisitor {
  explicit ChatChunkVisitor(std::string_view text) : s(text) {}

  std::string_view s;
  ChatChunkMembers members;
  size_t first_choices = npos;
  ChatChunkMembers before_first_choices;
  // The last `content` string of a delta in a `choices` array the Verifier
  // vouched for (ChatChunkScanner's shape): the token, quotes included.
  size_t content_begin = npos;
  size_t content_end = npos;

  bool operator()(std::string_view key, size_t begin, size_t& end) {
    if (key == "choices") {
      if (first_choices == npos) {
        first_choices = begin;
        before_first_choices = members;
      }
      // A verified array ends where endOfValue() would put its end: its
      // brackets balance outside strings, which end at their unescaped quote.
      Verifier verifier(s);
      members.choices_with_output = verifier.chatChoices(begin, 32);
      if (members.choices_with_output && verifier.content_begin() != npos) {
        content_begin = verifier.content_begin();
        content_end = verifier.content_end();
      }
      end = members.choices_with_output ? verifier.end() : endOfValue(s, begin);
      if (end != npos) members.choices = s.substr(begin, end - begin);
      return true;
    }
    end = endOfValue(s, begin);
    if (end == npos) return true;
    if (key == "model") members.model = s.substr(begin, end - begin);
    if (key == "usage") members.usage = s.substr(begin, end - begin);
    return true;
  }
};

}  // namespace

bool scanTopLevelMembers(std::string_view s, MemberVisitor on_member) {
  return scanMembers(s, [&](std::string_view key, size_t begin, size_t& end) {
    end = endOfValue(s, begin);
    return end == npos || on_member(key, s.substr(begin, end - begin));
  });
}

std::optional<ChatChunkMembers> scanChatChunk(std::string_view s) {
  ChatChunkVisitor visit(s);
  if (!scanMembers(s, visit)) return std::nullopt;
  return visit.members;
}

std::optional<ChatChunkMembers> ChatChunkScanner::scan(std::string_view s) {
  if (head_size_ > 0) {
    const size_t tail_size = known_.size() - head_size_;
    if (s.size() > head_size_ + tail_size &&
        std::memcmp(s.data(), known_.data(), head_size_) == 0 &&
        std::memcmp(s.data() + s.size() - tail_size, known_.data() + head_size_, tail_size) == 0) {
      const char* const text = s.data();
      const size_t run_end = s.size() - tail_size;
      size_t i = head_size_;
      while (i < run_end && isByteClass(text[i], kPlainInString)) ++i;
      if (i == run_end) {
        const auto view = [&](const ShapeSpan& span) {
          if (!span.present) return std::string_view();
          const size_t begin = span.begin_from_end ? s.size() - span.begin : span.begin;
          const size_t end = span.end_from_end ? s.size() - span.end : span.end;
          return s.substr(begin, end - begin);
        };
        ChatChunkMembers members;
        members.model = view(shape_model_);
        members.usage = view(shape_usage_);
        members.choices = view(shape_choices_);
        members.choices_with_output = shape_with_output_;
        return members;
      }
    }
  }
  return scanInFull(s);
}

std::optional<ChatChunkMembers> ChatChunkScanner::scanInFull(std::string_view s) {
  ChatChunkVisitor visit(s);
  if (prefix_size_ > 0 && s.size() >= prefix_size_ &&
      std::memcmp(s.data(), known_.data(), prefix_size_) == 0) {
    // Every step of the scan up to the first `choices` value read only bytes
    // of the prefix (the last one: the value's first byte, which ended the
    // whitespace after the colon), so it would pass them exactly as before:
    // resume it there with what the members before held.
    if (model_.size > 0) visit.members.model = s.substr(model_.at, model_.size);
    if (usage_.size > 0) visit.members.usage = s.substr(usage_.at, usage_.size);
    if (!scanMembersFrom(s, "choices", prefix_size_ - 1, visit)) return std::nullopt;
    keepShape(s, visit.members, visit.content_begin, visit.content_end);
    return visit.members;
  }
  known_.clear();
  prefix_size_ = 0;
  head_size_ = 0;
  const bool scanned = scanMembers(s, visit);
  // (Only with the value's first byte in the text: that byte ended the
  // whitespace before it, so the prefix must hold it.)
  if (visit.first_choices < s.size() && visit.first_choices < kMaxPrefixBytes) {
    known_.assign(s.substr(0, visit.first_choices + 1));
    prefix_size_ = static_cast<uint16_t>(known_.size());  // <= kMaxPrefixBytes
    const auto span = [&](std::string_view value) {
      return value.empty() ? Span{}
                           : Span{static_cast<uint16_t>(value.data() - s.data()),
                                  static_cast<uint16_t>(value.size())};
    };
    model_ = span(visit.before_first_choices.model);
    usage_ = span(visit.before_first_choices.usage);
  }
  if (!scanned) return std::nullopt;
  if (prefix_size_ > 0) keepShape(s, visit.members, visit.content_begin, visit.content_end);
  return visit.members;
}

// s was read in full into `members` (scanChatChunk()'s result), with the
// prefix in known_[0, prefix_size_) equal to s's first bytes; the last
// `content` string it read lies at [content_begin, content_end).
void ChatChunkScanner::keepShape(std::string_view s, const ChatChunkMembers& members,
                                 size_t content_begin, size_t content_end) {
  if (content_begin == npos || content_begin < prefix_size_ || content_end > s.size() ||
      content_end - content_begin <= 2 ||
      (content_begin + 1) + (s.size() - content_end + 1) > kMaxPrefixBytes) {
    return;
  }
  for (size_t i = content_begin + 1; i + 1 < content_end; ++i) {
    if (!isByteClass(s[i], kPlainInString)) return;
  }
  // Every view begins and ends outside the string (they are whole values of
  // other members, or `choices`, which holds it whole).
  bool outside = true;
  const auto shape_span = [&](std::string_view value) {
    ShapeSpan span;
    if (value.empty()) return span;
    span.present = true;
    const auto edge = [&](size_t at, uint16_t& offset, bool& from_end) {
      if (at <= content_begin) {
        offset = static_cast<uint16_t>(at);  // within the head: < kMaxPrefixBytes
        from_end = false;
      } else if (at >= content_end) {
        offset = static_cast<uint16_t>(s.size() - at);  // within the tail
        from_end = true;
      } else {
        outside = false;
      }
    };
    const auto begin = static_cast<size_t>(value.data() - s.data());
    edge(begin, span.begin, span.begin_from_end);
    edge(begin + value.size(), span.end, span.end_from_end);
    return span;
  };
  const ShapeSpan model = shape_span(members.model);
  const ShapeSpan usage = shape_span(members.usage);
  const ShapeSpan choices = shape_span(members.choices);
  if (!outside) return;
  // A string of its own, sized exactly: known_ is held for the stream's
  // life, and growing it in place would double its capacity.
  std::string known;
  known.reserve(content_begin + 1 + (s.size() - content_end + 1));
  known.append(s.substr(0, content_begin + 1));
  known.append(s.substr(content_end - 1));
  known_ = std::move(known);
  head_size_ = static_cast<uint16_t>(content_begin + 1);
  shape_model_ = model;
  shape_usage_ = usage;
  shape_choices_ = choices;
  shape_with_output_ = members.choices_with_output;
}

std::optional<std::string> withTopLevelString(std::string_view text, std::string_view key,
                                              std::string_view value) {
  std::vector<std::string_view> values;
  const bool scanned = scanTopLevelMembers(text, [&](std::string_view k, std::string_view v) {
    if (k == key) values.push_back(v);
    return true;
  });
  if (!scanned || values.empty()) return std::nullopt;
  std::string out;
  out.reserve(text.size() + value.size() + 2);
  size_t at = 0;
  for (std::string_view v : values) {
    const auto begin = static_cast<size_t>(v.data() - text.data());
    out.append(text.substr(at, begin - at));
    out.push_back('"');
    out.append(value);
    out.push_back('"');
    at = begin + v.size();
  }
  out.append(text.substr(at));
  return out;
}

std::optional<std::string_view> plainString(std::string_view v) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return std::nullopt;
  const std::string_view chars = v.substr(1, v.size() - 2);
  for (const char c : chars) {
    if (!isByteClass(c, kPlainChar)) return std::nullopt;  // 0x20-0x7e but '"' and '\\'
  }
  return chars;
}

std::optional<uint64_t> plainUnsigned(std::string_view v) {
  if (v.empty() || (v.size() > 1 && v.front() == '0')) return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc() || end != v.data() + v.size() || v.front() == '-' || v.front() == '+') {
    return std::nullopt;
  }
  return value;
}

bool isPlainObject(std::string_view v, int depth) {
  if (depth <= 0 || v.empty() || v.front() != '{') return false;
  bool plain = true;
  const auto begin = reinterpret_cast<uintptr_t>(v.data());
  const auto end = begin + v.size();
  const bool scanned = scanTopLevelMembers(v, [&](std::string_view key, std::string_view value) {
    // The scan hands a key without its quotes, a view of `v` between them,
    // unless the key was written with escapes (then it is decoded elsewhere,
    // and not plain). A plain key is one whose quoted form is a plain string.
    const auto at = reinterpret_cast<uintptr_t>(key.data());
    plain = at > begin && at + key.size() < end &&
            plainString(std::string_view(key.data() - 1, key.size() + 2)).has_value() &&
            (plainString(value) || plainUnsigned(value) || value == "true" || value == "false" ||
             value == "null" || isPlainObject(value, depth - 1));
    return plain;
  });
  return scanned && plain;
}

namespace {

// readPlainObject()'s parser: one forward pass over a plain object (see
// isPlainObject()); any doubt is false, as isPlainObject() would say.
class PlainObjectReader {
 public:
  PlainObjectReader(std::string_view s, const std::string_view* keys, size_t key_count,
                    std::optional<uint64_t>* counts)
      : p_(s.data()),
        end_(s.data() + s.size()),
        keys_(keys),
        key_count_(key_count),
        counts_(counts) {
    for (size_t k = 0; k < key_count; ++k) {
      key_sizes_ |= keys[k].size() < 64 ? uint64_t{1} << keys[k].size() : kLongKeys;
    }
  }

  bool document(int depth) {
    if (!object(depth, /*top=*/true)) return false;
    skipWs();
    return p_ == end_;
  }

  // The object at the text's start, which may go on past it: the length of
  // the object when it is plain (as document() would vouch for it alone),
  // npos otherwise. Nothing past the object's closing brace is read.
  size_t leadingObject(int depth) {
    const char* const begin = p_;
    if (depth <= 0 || p_ >= end_ || *p_ != '{') return npos;
    if (!object(depth, /*top=*/true)) return npos;
    return static_cast<size_t>(p_ - begin);
  }

 private:
  static bool isWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  void skipWs() {
    while (p_ < end_ && static_cast<unsigned char>(*p_) <= ' ' && isWs(*p_)) ++p_;
  }

  // p_ at the opening quote of a string whose bytes must be plain
  // (printable ASCII, no '\\'): moves past the closing quote.
  bool plainStringToken() {
    const char* q = p_ + 1;
    // Eight bytes at a time while none is a quote, a backslash, a control
    // character or 0x7f and up; the byte loop finds which one it is. Each
    // mask is exact at its lowest byte (borrows run upward only), so with
    // little-endian bytes the lowest mark is the first such byte.
    while (end_ - q >= 8) {
      const uint64_t w = load8(q);
      const uint64_t stop = zeroBytes(w ^ (kOnes * '"')) | zeroBytes(w ^ (kOnes * '\\')) |
                            zeroBytes(w ^ (kOnes * 0x7f)) | ((w - kOnes * 0x20) & ~w & kHighs) |
                            (w & kHighs);
      if (stop != 0) {
        if constexpr (kLittleEndian) q += firstMarked(stop);
        break;
      }
      q += 8;
    }
    while (q < end_ && isByteClass(*q, kPlainChar)) ++q;
    if (q >= end_ || *q != '"') return false;
    p_ = q + 1;
    return true;
  }

  bool literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0) {
      return false;
    }
    p_ += word.size();
    // The member scan takes a scalar up to a ',' '}' ']' or whitespace.
    return p_ == end_ || isByteClass(*p_, kEndsScalar);
  }

  // A plain unsigned integer (plainUnsigned()); `value` is set when it fits.
  bool number(std::optional<uint64_t>& value) {
    const char* q = p_;
    if (*q == '0') {
      ++q;
      value = 0;
    } else {
      uint64_t v = 0;
      bool fits = true;
      while (q < end_ && *q >= '0' && *q <= '9') {
        const auto digit = static_cast<uint64_t>(*q - '0');
        if (v > (UINT64_MAX - digit) / 10) fits = false;
        v = v * 10 + digit;
        ++q;
      }
      if (!fits) return false;  // not plain: from_chars refuses it
      value = v;
    }
    if (q < end_ && !isByteClass(*q, kEndsScalar)) return false;
    p_ = q;
    return true;
  }

  // p_ at '{'.
  bool object(int depth, bool top) {
    if (depth <= 0) return false;
    ++p_;
    skipWs();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      if (p_ >= end_ || *p_ != '"') return false;
      const char* const key_begin = p_ + 1;
      if (!plainStringToken()) return false;
      const std::string_view key(key_begin, static_cast<size_t>(p_ - 1 - key_begin));
      skipWs();
      if (p_ >= end_ || *p_ != ':') return false;
      ++p_;
      skipWs();
      if (p_ >= end_) return false;
      std::optional<uint64_t> count;
      switch (*p_) {
        case '"':
          if (!plainStringToken()) return false;
          break;
        case '{':
          if (!object(depth - 1, false)) return false;
          break;
        case 't':
          if (!literal("true")) return false;
          break;
        case 'f':
          if (!literal("false")) return false;
          break;
        case 'n':
          if (!literal("null")) return false;
          break;
        default:
          if (*p_ < '0' || *p_ > '9' || !number(count)) return false;
          break;
      }
      // (Only a member whose key is as long as one of keys_ can be one.)
      if (top && (key_sizes_ & (key.size() < 64 ? uint64_t{1} << key.size() : kLongKeys)) != 0) {
        for (size_t k = 0; k < key_count_; ++k) {
          if (key == keys_[k]) counts_[k] = count;  // the last occurrence wins
        }
      }
      skipWs();
      if (p_ >= end_) return false;
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
      skipWs();
    }
  }

  const char* p_;
  const char* const end_;
  const std::string_view* const keys_;
  const size_t key_count_;
  std::optional<uint64_t>* const counts_;
  // Bit n set: some key of keys_ is n bytes long (kLongKeys: 63 or more).
  static constexpr uint64_t kLongKeys = uint64_t{1} << 63;
  uint64_t key_sizes_ = 0;
};

}  // namespace

bool readPlainObject(std::string_view v, int depth, const std::string_view* keys, size_t key_count,
                     std::optional<uint64_t>* counts) {
  if (depth <= 0 || v.empty() || v.front() != '{') return false;
  return PlainObjectReader(v, keys, key_count, counts).document(depth);
}

bool scanAnswerMembers(std::string_view s, int usage_depth, const std::string_view* keys,
                       size_t key_count, std::optional<uint64_t>* counts, AnswerMembers& out) {
  out = AnswerMembers{};
  return scanMembers(s, [&](std::string_view key, size_t begin, size_t& end) {
    if (key == "usage") {
      // Read as the scan passes it. A plain object ends where endOfValue()
      // would put its end: its strings hold no quote or backslash, so its
      // braces balance at the same closing one; and the reader reads nothing
      // past that brace, so it reads the value exactly as readPlainObject()
      // reads the value's text alone.
      std::fill(counts, counts + key_count, std::nullopt);
      const size_t length = begin < s.size()
                                ? PlainObjectReader(s.substr(begin), keys, key_count, counts)
                                      .leadingObject(usage_depth)
                                : npos;
      out.usage_plain = length != npos;
      end = out.usage_plain ? begin + length : endOfValue(s, begin);
      if (end != npos) out.usage = s.substr(begin, end - begin);
      return true;
    }
    end = endOfValue(s, begin);
    if (end != npos && key == "model") out.model = s.substr(begin, end - begin);
    return true;
  });
}

}  // namespace sluice
