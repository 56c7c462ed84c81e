#include "config/loader.h"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/http_headers.h"
#include "config/render.h"

namespace sluice::config {

std::string ConfigError::toString() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  if (!key_path.empty()) out += key_path + ": ";
  out += message;
  return out;
}

EnvLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

constexpr int64_t kMaxDurationMs = 10LL * 365 * 24 * 3600 * 1000;  // 10 years
constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// RFC 9110 §5.6.2 tchar: what header names and methods are made of.
bool isTchar(char c) {
  return isDigit(c) || isAlpha(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool isToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c != 0 && isTchar(c); });
}

std::string inQuotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string toUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return out;
}

std::nullopt_t fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

// An unsigned decimal "12" or "1.5" split into exact integer parts.
struct Decimal {
  uint64_t whole = 0;
  uint64_t fraction = 0;  // the digits after the point, as an integer
  int fraction_digits = 0;
};

// Reads digits[.digits] starting at `pos`; false if there is no number or it is too long.
bool readDecimal(std::string_view text, size_t& pos, Decimal& out) {
  const size_t start = pos;
  while (pos < text.size() && isDigit(text[pos])) {
    if (out.whole > 1'000'000'000'000'000ULL) return false;
    out.whole = out.whole * 10 + static_cast<uint64_t>(text[pos] - '0');
    ++pos;
  }
  const bool had_whole = pos > start;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t frac_start = pos;
    while (pos < text.size() && isDigit(text[pos])) {
      if (out.fraction_digits == 9) return false;
      out.fraction = out.fraction * 10 + static_cast<uint64_t>(text[pos] - '0');
      ++out.fraction_digits;
      ++pos;
    }
    if (pos == frac_start) return false;  // "1." is not a number
  }
  return had_whole;
}

// value × unit, exactly; nullopt when it is not a whole number of units or overflows.
std::optional<uint64_t> scale(const Decimal& d, uint64_t unit, bool* inexact) {
  uint64_t whole = 0;
  if (__builtin_mul_overflow(d.whole, unit, &whole)) return std::nullopt;
  uint64_t pow10 = 1;
  for (int i = 0; i < d.fraction_digits; ++i) pow10 *= 10;
  // fraction < 10^9 and unit <= 2^40, so this cannot overflow.
  const unsigned __int128 frac = static_cast<unsigned __int128>(d.fraction) * unit;
  if (frac % pow10 != 0) {
    *inexact = true;
    return std::nullopt;
  }
  uint64_t total = 0;
  if (__builtin_add_overflow(whole, static_cast<uint64_t>(frac / pow10), &total)) {
    return std::nullopt;
  }
  return total;
}

// Parses a decimal integer with an optional leading '-'; nullopt if malformed or out of int64.
std::optional<int64_t> parseInt64(std::string_view s) {
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : s) {
    if (!isDigit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

std::optional<uint16_t> parsePort(std::string_view s, bool allow_zero, std::string& why) {
  if (s.empty()) {
    why = "missing port";
    return std::nullopt;
  }
  const auto value = s.size() <= 5 ? parseInt64(s) : std::nullopt;
  if (!value || s[0] == '-' || *value > 65535 || (!allow_zero && *value == 0)) {
    why = allow_zero ? "port must be 0..65535" : "port must be 1..65535";
    return std::nullopt;
  }
  return static_cast<uint16_t>(*value);
}

bool isHostname(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return isDigit(c) || isAlpha(c) || c == '-' || c == '.' || c == '_';
  });
}

bool isIpv6Literal(std::string_view s) {
  const size_t zone = s.find('%');  // fe80::1%eth0
  const std::string_view addr = s.substr(0, zone);
  if (addr.find(':') == std::string_view::npos) return false;
  if (zone != std::string_view::npos && zone + 1 == s.size()) return false;
  return std::all_of(addr.begin(), addr.end(), [](char c) {
    return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
  });
}

// Splits "host:port" / "[v6]:port" / "host" into host and (possibly empty) port text.
bool splitHostPort(std::string_view text, std::string& host, std::optional<std::string_view>& port,
                   std::string& why) {
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      why = "missing \"]\" after an IPv6 address";
      return false;
    }
    host = std::string(text.substr(1, close - 1));
    if (!isIpv6Literal(host)) {
      why = "invalid IPv6 address " + inQuotes(host);
      return false;
    }
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        why = "expected \":\" and a port after \"]\"";
        return false;
      }
      port = rest.substr(1);
    }
    return true;
  }
  const size_t colon = text.rfind(':');
  host = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) port = text.substr(colon + 1);
  if (host.find(':') != std::string::npos) {
    why = "IPv6 addresses must be in brackets, e.g. [::1]:8080";
    return false;
  }
  if (host.empty()) {
    why = "missing host";
    return false;
  }
  if (!isHostname(host)) {
    why = "invalid host " + inQuotes(host);
    return false;
  }
  return true;
}

// A `${NAME}` expansion: the variable and the value it had.
using Expansion = std::pair<std::string, std::string>;

// Expands ${VAR} and $$ in `in`. A '$' followed by anything else is kept as is.
// Every variable expanded is appended to `used` (when given).
bool expandEnv(std::string_view in, const EnvLookup& env, std::string& out, std::string& why,
               std::vector<Expansion>* used = nullptr) {
  out.clear();
  for (size_t i = 0; i < in.size();) {
    if (in[i] != '$' || i + 1 == in.size()) {
      out += in[i++];
      continue;
    }
    if (in[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (in[i + 1] != '{') {
      out += in[i++];
      continue;
    }
    const size_t close = in.find('}', i + 2);
    if (close == std::string_view::npos) {
      why = "unterminated \"${\" (write \"$$\" for a literal \"$\")";
      return false;
    }
    const std::string name(in.substr(i + 2, close - i - 2));
    const bool valid_name =
        !name.empty() && !isDigit(name[0]) && std::all_of(name.begin(), name.end(), [](char c) {
          return isDigit(c) || isAlpha(c) || c == '_';
        });
    if (!valid_name) {
      why = "invalid environment variable name " + inQuotes(name);
      return false;
    }
    const std::optional<std::string> value = env ? env(name) : std::nullopt;
    if (!value) {
      why = "environment variable " + name + " is not set";
      return false;
    }
    out += *value;
    if (used != nullptr) used->emplace_back(name, *value);
    i = close + 1;
  }
  return true;
}

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The length of the longest run of characters `a` and `b` have in common.
size_t longestCommonRun(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1, 0);
  size_t best = 0;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = 0;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = a[i - 1] == b[j - 1] ? diagonal + 1 : 0;
      best = std::max(best, row[j]);
      diagonal = above;
    }
  }
  return best;
}

void replaceAll(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// "scheme://user:secret@host" -> "scheme://<redacted>@host", wherever a URL
// with credentials appears in `text`.
std::string redactUserinfo(std::string text) {
  constexpr std::string_view kRedacted = "<redacted>";
  for (size_t scheme = text.find("://"); scheme != std::string::npos;
       scheme = text.find("://", scheme + 3)) {
    const size_t start = scheme + 3;
    const size_t end = std::min(text.find_first_of("/\"?# \t\r\n", start), text.size());
    const size_t at = end > start ? text.rfind('@', end - 1) : std::string::npos;
    if (at == std::string::npos || at < start) continue;
    text.replace(start, at - start, kRedacted);
  }
  return text;
}

// Error messages show values as written in the file. A value that came from
// ${VAR} may be a secret (an API key, a URL with credentials), so it is never
// echoed: `message` is about a scalar written as `raw` that expanded to
// `expanded`; `expansions` are every ${VAR} expanded in the file so far.
std::string redactExpansions(std::string message, const std::string* raw,
                             const std::string* expanded,
                             const std::vector<Expansion>& expansions) {
  // The whole value, quoted as the messages do, is shown as written.
  if (raw != nullptr && expanded != nullptr && *raw != *expanded && !expanded->empty()) {
    replaceAll(message, inQuotes(*expanded), inQuotes(*raw));
  }
  // A quoted piece (part of a value, e.g. the host of a URL) that shares a
  // run of characters with an expanded value came from it: redacted. Values
  // under 3 characters are no secret; 6 shared characters are enough to tell.
  for (size_t open = message.find('"'); open != std::string::npos;) {
    const size_t close = message.find('"', open + 1);
    if (close == std::string::npos) break;
    const std::string_view quoted(message.data() + open + 1, close - open - 1);
    const bool as_written = raw != nullptr && quoted == *raw;
    const bool tainted =
        !as_written && std::any_of(expansions.begin(), expansions.end(), [&](const Expansion& e) {
          const std::string& value = e.second;
          return value.size() >= 3 &&
                 longestCommonRun(quoted, value) >= std::min<size_t>(6, value.size());
        });
    if (tainted) {
      message.replace(open + 1, close - open - 1, "<redacted>");
      open = message.find('"', open + std::string_view("\"<redacted>\"").size());
    } else {
      open = message.find('"', close + 1);
    }
  }
  // Anywhere else (unquoted), a whole value is named by its variable.
  for (const auto& [name, value] : expansions) {
    if (value.size() >= 4) replaceAll(message, value, "${" + name + "}");
  }
  return redactUserinfo(std::move(message));
}

std::string childPath(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Scalar:
      return inQuotes(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string formatNumber(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// A YAML node with its key path and the position an error about it points at.
// `node` is const on purpose: assigning a YAML::Node writes through to the tree
// it aliases, so Field must never be assigned (use optional::emplace).
struct Field {
  const YAML::Node node;
  std::string path;
  YAML::Mark mark;  // the value's, or its key's when the value is empty
};

// Thrown inside the Decoder only; loadConfigString() turns it into a LoadResult.
struct DecodeFailure {
  ConfigError error;
};

// Decodes one YAML document into a Config, throwing DecodeFailure at the first problem.
class Decoder {
 public:
  Decoder(const std::string& file, const EnvLookup& env) : file_(file), env_(env) {}

  Config decode(const YAML::Node& root);

 private:
  using Handler = std::function<void(const Field&)>;
  struct Key {
    std::string_view name;
    Handler decode;
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& path,
                         const std::string& message) const {
    throw DecodeFailure{
        errorAt(mark, path, redactExpansions(message, nullptr, nullptr, expansions_))};
  }
  // An error about `field`'s value: the value is shown as written (${VAR}, not its value).
  [[noreturn]] void fail(const Field& field, const std::string& message) const {
    std::string expanded, why;
    std::vector<Expansion> unused;
    const bool scalar = field.node.IsScalar();
    const bool expands =
        scalar && expandEnv(field.node.Scalar(), env_, expanded, why, &unused) && !unused.empty();
    throw DecodeFailure{errorAt(field.mark, field.path,
                                redactExpansions(message, expands ? &field.node.Scalar() : nullptr,
                                                 expands ? &expanded : nullptr, expansions_))};
  }
  ConfigError errorAt(const YAML::Mark& mark, const std::string& path, std::string message) const {
    ConfigError error;
    error.file = file_;
    error.line = mark.is_null() ? 1 : mark.line + 1;
    error.column = mark.is_null() ? 1 : mark.column + 1;
    error.key_path = path;
    error.message = std::move(message);
    return error;
  }

  static Field child(const YAML::Node& value, std::string path, const YAML::Mark& fallback) {
    const YAML::Mark mark = (value.IsNull() || value.Mark().is_null()) ? fallback : value.Mark();
    return Field{value, std::move(path), mark};
  }

  // Calls fn(key_mark, key, value_field) for each entry of a mapping, rejecting
  // non-scalar and duplicate keys.
  template <class Fn>
  void forEachEntry(const Field& map, Fn&& fn) {
    if (!map.node.IsMap()) fail(map, "expected a mapping, got " + describe(map.node));
    std::set<std::string> seen;
    for (const auto& entry : map.node) {
      const YAML::Node& key_node = entry.first;
      if (!key_node.IsScalar()) fail(key_node.Mark(), map.path, "keys must be plain strings");
      const std::string& key = key_node.Scalar();
      const std::string path = childPath(map.path, key);
      if (!seen.insert(key).second) fail(key_node.Mark(), path, "duplicate key");
      fn(key_node.Mark(), key, child(entry.second, path, key_node.Mark()));
    }
  }

  // Decodes a mapping with a fixed set of keys: unknown keys and missing required keys fail.
  void decodeMap(const Field& map, const std::vector<Key>& keys,
                 std::initializer_list<std::string_view> required = {}) {
    std::set<std::string, std::less<>> seen;
    forEachEntry(map, [&](const YAML::Mark& key_mark, const std::string& key, const Field& value) {
      const auto it =
          std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == key; });
      if (it == keys.end()) fail(key_mark, value.path, unknownKeyMessage(key, keys));
      seen.insert(key);
      it->decode(value);
    });
    for (std::string_view name : required) {
      if (seen.count(name) == 0)
        fail(map.mark, childPath(map.path, name), "required key is missing");
    }
  }

  static std::string unknownKeyMessage(const std::string& key, const std::vector<Key>& keys) {
    std::string_view best;
    size_t best_distance = 3;  // suggest only close matches
    for (const Key& k : keys) {
      const size_t d = editDistance(key, k.name);
      if (d < best_distance) {
        best = k.name;
        best_distance = d;
      }
    }
    if (!best.empty()) return "unknown key (did you mean " + inQuotes(best) + "?)";
    std::string known;
    for (const Key& k : keys) known += (known.empty() ? "" : ", ") + std::string(k.name);
    return "unknown key (expected one of: " + known + ")";
  }

  std::vector<Field> items(const Field& seq) {
    if (!seq.node.IsSequence()) fail(seq, "expected a list, got " + describe(seq.node));
    std::vector<Field> out;
    size_t i = 0;
    for (const auto& item : seq.node) {
      out.push_back(child(item, seq.path + "[" + std::to_string(i++) + "]", seq.mark));
    }
    return out;
  }

  // The scalar's text with ${VAR} expanded; `what` names the expected value in type errors.
  std::string scalar(const Field& f, std::string_view what) {
    if (!f.node.IsScalar()) fail(f, "expected " + std::string(what) + ", got " + describe(f.node));
    std::string out, why;
    if (!expandEnv(f.node.Scalar(), env_, out, why, &expansions_)) fail(f, why);
    return out;
  }

  // A route, upstream or pricing name: it becomes a metric label value.
  std::string labelName(const Field& f) {
    std::string s = nonEmptyString(f);
    if (std::any_of(s.begin(), s.end(), [](char c) { return c >= 0 && (c < 0x20 || c == 0x7f); })) {
      fail(f, "must not contain control characters (NUL, tab, newline, ...)");
    }
    if (s == "none" || s == "other") {
      fail(f, inQuotes(s) +
                  " is reserved: sluice's metrics use it as a label value (\"none\": no route "
                  "or upstream; \"other\": usage no pricing entry matches); choose another name");
    }
    return s;
  }

  std::string nonEmptyString(const Field& f) {
    std::string s = scalar(f, "a string");
    if (s.empty()) fail(f, "must not be empty");
    return s;
  }

  bool boolean(const Field& f) {
    const std::string s = scalar(f, "true or false");
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    fail(f, "expected true or false, got " + inQuotes(s));
  }

  int64_t integer(const Field& f, int64_t min, int64_t max) {
    const std::string s = scalar(f, "an integer");
    std::optional<int64_t> value = parseInt64(s);
    if (!value) {
      // Too many digits for int64: clamp, so the range check below words the message.
      const bool negative = !s.empty() && s[0] == '-';
      const bool digits = s.size() > 18 && std::all_of(s.begin() + negative, s.end(), isDigit);
      if (!digits) fail(f, "expected an integer, got " + inQuotes(s));
      if (!negative) fail(f, "must be at most " + std::to_string(max));
      value = std::numeric_limits<int64_t>::min();
    }
    if (*value < min) {
      fail(f, min == 0 ? "must not be negative" : "must be at least " + std::to_string(min));
    }
    if (*value > max) fail(f, "must be at most " + std::to_string(max));
    return *value;
  }

  uint32_t u32(const Field& f, int64_t min) {
    return static_cast<uint32_t>(integer(f, min, kU32Max));
  }

  uint32_t u32Max(const Field& f, int64_t min, int64_t max) {
    return static_cast<uint32_t>(integer(f, min, max));
  }

  double number(const Field& f, double min, double max) {
    const std::string s = scalar(f, "a number");
    // Plain decimal notation only: no hex, inf or nan, which strtod would accept.
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return isDigit(c) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E';
    });
    char* end = nullptr;
    const double value = plain ? std::strtod(s.c_str(), &end) : 0;
    if (!plain || end != s.c_str() + s.size() || !std::isfinite(value)) {
      fail(f, "expected a number, got " + inQuotes(s));
    }
    if (value < min) {
      fail(f, min == 0 ? "must not be negative" : "must be at least " + formatNumber(min));
    }
    if (value > max) fail(f, "must be at most " + formatNumber(max));
    return value;
  }

  Duration duration(const Field& f, bool allow_zero) {
    const std::string s = scalar(f, "a duration such as \"30s\"");
    std::string why;
    const std::optional<Duration> d = parseDuration(s, &why);
    if (!d) fail(f, why);
    if (!allow_zero && d->count() == 0) fail(f, "must be greater than 0s");
    return *d;
  }

  uint64_t size(const Field& f) {
    const std::string s = scalar(f, "a size such as \"8MiB\"");
    std::string why;
    const std::optional<uint64_t> bytes = parseSize(s, &why);
    if (!bytes) fail(f, why);
    return *bytes;
  }

  SocketAddress address(const Field& f) {
    const std::string s = scalar(f, "an address (host:port)");
    std::string why;
    const std::optional<SocketAddress> a = parseSocketAddress(s, &why);
    if (!a) fail(f, why);
    return *a;
  }

  std::string headerName(const Field& f) {
    const std::string s = scalar(f, "a header name");
    if (!isToken(s)) fail(f, "invalid header name " + inQuotes(s));
    return toLower(s);
  }

  template <class E>
  E oneOf(const Field& f, std::initializer_list<std::pair<std::string_view, E>> choices) {
    std::string names;
    for (const auto& [name, value] : choices)
      names += (names.empty() ? "" : ", ") + std::string(name);
    const std::string s = scalar(f, "one of " + names);
    for (const auto& [name, value] : choices) {
      if (s == name) return value;
    }
    fail(f, "must be one of " + names + " (got " + inQuotes(s) + ")");
  }

  OutcomeSet outcomes(const Field& f);
  std::vector<ListenerConfig> listeners(const Field& f);
  ListenerConfig listener(const Field& f);
  UpstreamConfig upstream(const Field& f);
  void headers(const Field& f, UpstreamConfig& u);
  RateLimitConfig rateLimit(const Field& f);
  CircuitBreakerConfig circuitBreaker(const Field& f);
  RouteConfig route(const Field& f);
  RouteMatch routeMatch(const Field& f, std::optional<Field>& prefix_field);
  BudgetConfig budget(const Field& f);
  RetryConfig retry(const Field& f);
  PriceConfig price(const Field& f);
  LimitsConfig limits(const Field& f);
  AccessLogConfig accessLog(const Field& f);
  SharedStateConfig sharedState(const Field& f);
  std::vector<std::string> hostNames(const Field& f);
  void warnIfPathDoubles(const Config& c, size_t route_index);

  // Fails at whichever of two related fields was written when `first` > `second`.
  void requireOrdered(Duration first, Duration second, const std::optional<Field>& first_field,
                      const std::optional<Field>& second_field, const std::string& first_name,
                      const std::string& second_name) {
    if (first <= second) return;
    if (first_field) {
      fail(*first_field, "must not exceed " + second_name + " (" + formatDuration(second) + ")");
    }
    fail(*second_field, "must not be less than " + first_name + " (" + formatDuration(first) + ")");
  }

  const std::string& file_;
  const EnvLookup& env_;
  std::vector<Expansion> expansions_;  // every ${VAR} expanded so far, for redacting errors
  std::vector<std::pair<SocketAddress, Field>> listener_fields_;
  std::map<std::string, int> upstream_lines_;  // name -> 1-based line of its definition
  std::map<std::string, int> route_lines_;
  std::vector<Field> route_upstream_fields_;  // routes[i].upstream, resolved at the end
  std::vector<std::optional<Field>>
      route_prefix_fields_;  // routes[i].match.path_prefix, if written
  std::vector<std::string> warnings_;
};

Config Decoder::decode(const YAML::Node& root) {
  if (!root.IsMap()) {
    const std::string got = root.IsNull() ? "an empty document" : describe(root);
    fail(root.Mark(), "", "expected a mapping at the top level, got " + got);
  }
  Config c;
  std::optional<Field> admin_field;
  decodeMap(Field{root, "", root.Mark()},
            {
                {"version",
                 [&](const Field& f) {
                   c.version = static_cast<int>(integer(f, 0, 1'000'000));
                   if (c.version != 1) fail(f, "unsupported version (this sluice reads version 1)");
                 }},
                {"listen", [&](const Field& f) { c.listeners = listeners(f); }},
                {"admin",
                 [&](const Field& f) {
                   if (!f.node.IsMap()) {
                     c.admin = address(f);
                     admin_field.emplace(f);
                     return;
                   }
                   decodeMap(f,
                             {
                                 {"address",
                                  [&](const Field& a) {
                                    c.admin = address(a);
                                    admin_field.emplace(a);
                                  }},
                                 {"allowed_hosts",
                                  [&](const Field& a) { c.admin_allowed_hosts = hostNames(a); }},
                             },
                             {"address"});
                 }},
                {"workers",
                 [&](const Field& f) {
                   const std::string s = scalar(f, "\"auto\" or a positive integer");
                   const std::optional<int64_t> n = s == "auto" ? 0 : parseInt64(s);
                   if (!n || (s != "auto" && (*n < 1 || *n > kU32Max))) {
                     fail(f, "must be \"auto\" or a positive integer (got " + inQuotes(s) + ")");
                   }
                   c.workers = static_cast<uint32_t>(*n);
                 }},
                {"drain_timeout", [&](const Field& f) { c.drain_timeout = duration(f, true); }},
                {"upstreams",
                 [&](const Field& f) {
                   for (const Field& item : items(f)) c.upstreams.push_back(upstream(item));
                 }},
                {"routes",
                 [&](const Field& f) {
                   for (const Field& item : items(f)) c.routes.push_back(route(item));
                 }},
                {"pricing",
                 [&](const Field& f) {
                   for (const Field& item : items(f)) c.pricing.push_back(price(item));
                 }},
                {"limits", [&](const Field& f) { c.limits = limits(f); }},
                {"access_log", [&](const Field& f) { c.access_log = accessLog(f); }},
                {"shared_state", [&](const Field& f) { c.shared_state = sharedState(f); }},
            },
            {"listen"});

  // The admin port must not collide with a proxy listener (port 0 = ephemeral, never collides).
  for (size_t i = 0; i < listener_fields_.size(); ++i) {
    const auto& [listener_address, field] = listener_fields_[i];
    if (listener_address.port == 0 || listener_address.toString() != c.admin.toString()) continue;
    if (admin_field) {
      fail(*admin_field, "same address as listen[" + std::to_string(i) + "]");
    }
    fail(field, "conflicts with the default admin address " + c.admin.toString() +
                    "; set admin to another address");
  }

  // Resolve route -> upstream now that every upstream is known, wherever it was written.
  for (size_t i = 0; i < c.routes.size(); ++i) {
    RouteConfig& r = c.routes[i];
    const auto it = std::find_if(c.upstreams.begin(), c.upstreams.end(),
                                 [&](const UpstreamConfig& u) { return u.name == r.upstream; });
    if (it == c.upstreams.end()) {
      std::string defined;
      for (const UpstreamConfig& u : c.upstreams) defined += (defined.empty() ? "" : ", ") + u.name;
      fail(route_upstream_fields_[i],
           "unknown upstream " + inQuotes(r.upstream) +
               (defined.empty() ? " (no upstreams are defined)" : " (defined: " + defined + ")"));
    }
    r.upstream_index = static_cast<size_t>(it - c.upstreams.begin());
    warnIfPathDoubles(c, i);
  }
  c.warnings = std::move(warnings_);
  return c;
}

// The upstream url's path is prepended to every request path, so a route
// matching /v1/... in front of `url: http://host/v1` sends /v1/v1/...: valid,
// but almost never what was meant.
void Decoder::warnIfPathDoubles(const Config& c, size_t route_index) {
  const RouteConfig& r = c.routes[route_index];
  const UpstreamConfig& u = c.upstreams[r.upstream_index];
  const auto firstSegment = [](std::string_view path) {
    const size_t end = path.find('/', 1);
    return path.substr(0, end == std::string_view::npos ? path.size() : end);
  };
  const std::string_view segment = firstSegment(u.url.path_prefix);
  const std::optional<Field>& prefix_field = route_prefix_fields_[route_index];
  if (segment.size() < 2 || !prefix_field || firstSegment(r.match.path_prefix) != segment) return;
  const std::string& example = r.match.path_prefix;
  warnings_.push_back(errorAt(prefix_field->mark, prefix_field->path,
                              "upstream " + inQuotes(u.name) + "'s url path " +
                                  inQuotes(u.url.path_prefix) +
                                  " is prepended to every request path, so a request for " +
                                  example + " goes upstream as " + u.url.path_prefix + example +
                                  " (drop the path from the url, or leave it out of the route)")
                          .toString());
}

std::vector<std::string> Decoder::hostNames(const Field& f) {
  std::vector<std::string> out;
  for (const Field& item : items(f)) {
    std::string host = toLower(scalar(item, "a host name"));
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    if (bracketed) host = host.substr(1, host.size() - 2);
    if (!(bracketed ? isIpv6Literal(host) : isHostname(host))) {
      fail(item, "expected a host name or IP address without a port (got " + inQuotes(host) + ")");
    }
    if (std::find(out.begin(), out.end(), host) != out.end()) {
      fail(item, "duplicate host " + inQuotes(host));
    }
    out.push_back(std::move(host));
  }
  return out;
}

std::vector<ListenerConfig> Decoder::listeners(const Field& f) {
  std::vector<ListenerConfig> out;
  if (f.node.IsScalar()) {
    out.push_back(ListenerConfig{address(f), std::nullopt});
    listener_fields_.emplace_back(out.back().address, f);
    return out;
  }
  if (!f.node.IsSequence()) {
    fail(f, "expected an address (host:port) or a list of listeners, got " + describe(f.node));
  }
  for (const Field& item : items(f)) out.push_back(listener(item));
  if (out.empty()) fail(f, "at least one listener is required");
  return out;
}

ListenerConfig Decoder::listener(const Field& f) {
  ListenerConfig l;
  std::optional<Field> address_field(f);
  if (f.node.IsScalar()) {
    l.address = address(f);  // a bare address in the list: plain HTTP
  } else {
    decodeMap(f,
              {
                  {"address",
                   [&](const Field& a) {
                     l.address = address(a);
                     address_field.emplace(a);
                   }},
                  {"tls",
                   [&](const Field& t) {
                     ListenerTlsConfig tls;
                     decodeMap(
                         t,
                         {
                             {"cert", [&](const Field& v) { tls.cert_file = nonEmptyString(v); }},
                             {"key", [&](const Field& v) { tls.key_file = nonEmptyString(v); }},
                         },
                         {"cert", "key"});
                     l.tls = tls;
                   }},
              },
              {"address"});
  }
  for (const auto& [other, other_field] : listener_fields_) {
    if (l.address.port != 0 && other.toString() == l.address.toString()) {
      fail(*address_field, "duplicate listener address " + l.address.toString());
    }
  }
  listener_fields_.emplace_back(l.address, *address_field);
  return l;
}

UpstreamConfig Decoder::upstream(const Field& f) {
  UpstreamConfig u;
  std::optional<Field> name_field;
  decodeMap(
      f,
      {
          {"name",
           [&](const Field& v) {
             u.name = labelName(v);
             name_field.emplace(v);
           }},
          {"url",
           [&](const Field& v) {
             u.raw_url = scalar(v, "a URL");
             std::string why;
             const std::optional<UpstreamUrl> url = parseUpstreamUrl(u.raw_url, &why);
             if (!url) fail(v, why);
             u.url = *url;
           }},
          {"connect_timeout", [&](const Field& v) { u.connect_timeout = duration(v, false); }},
          {"http2",
           [&](const Field& v) {
             u.http2 = oneOf<Http2Mode>(
                 v, {{"auto", Http2Mode::Auto}, {"on", Http2Mode::On}, {"off", Http2Mode::Off}});
           }},
          {"tls",
           [&](const Field& v) {
             decodeMap(
                 v, {
                        {"verify", [&](const Field& x) { u.tls.verify = boolean(x); }},
                        // "" = the default (system CA store / the URL's host), as rendered.
                        {"ca_file", [&](const Field& x) { u.tls.ca_file = scalar(x, "a path"); }},
                        {"sni", [&](const Field& x) { u.tls.sni = scalar(x, "a host name"); }},
                    });
           }},
          {"headers", [&](const Field& v) { headers(v, u); }},
          {"rate_limit", [&](const Field& v) { u.rate_limit = rateLimit(v); }},
          {"circuit_breaker", [&](const Field& v) { u.circuit_breaker = circuitBreaker(v); }},
      },
      {"name", "url"});
  const int line = name_field->mark.line + 1;
  const auto [it, inserted] = upstream_lines_.emplace(u.name, line);
  if (!inserted) {
    fail(*name_field, "duplicate upstream name " + inQuotes(u.name) + " (first defined at line " +
                          std::to_string(it->second) + ")");
  }
  return u;
}

void Decoder::headers(const Field& f, UpstreamConfig& u) {
  // sluice owns message framing and connection management; a static value would break them.
  static const std::set<std::string, std::less<>> kManaged = {
      "connection", "content-length",    "keep-alive", "proxy-connection",
      "te",         "transfer-encoding", "upgrade"};
  forEachEntry(f, [&](const YAML::Mark& key_mark, const std::string& key, const Field& value) {
    if (!isToken(key)) fail(key_mark, value.path, "invalid header name " + inQuotes(key));
    const std::string name = toLower(key);
    if (kManaged.count(name) != 0) {
      fail(key_mark, value.path,
           "header " + inQuotes(name) + " is managed by sluice and cannot be set");
    }
    for (const auto& [existing, unused] : u.headers) {
      if (existing == name) {
        fail(key_mark, value.path, "duplicate header (header names are case-insensitive)");
      }
    }
    std::string text = scalar(value, "a header value");
    if (text.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      fail(value, "header value must not contain CR, LF or NUL");
    }
    u.headers.emplace_back(name, std::move(text));
  });
}

RateLimitConfig Decoder::rateLimit(const Field& f) {
  RateLimitConfig r;
  decodeMap(f, {
                   {"key",
                    [&](const Field& v) {
                      const std::string s = scalar(v, "\"none\" or \"header:<name>\"");
                      constexpr std::string_view kHeader = "header:";
                      if (s == "none") {
                        r.key.kind = RateLimitKey::Kind::None;
                        r.key.header.clear();
                      } else if (s.compare(0, kHeader.size(), kHeader) == 0) {
                        const std::string name = s.substr(kHeader.size());
                        if (!isToken(name)) fail(v, "invalid header name " + inQuotes(name));
                        r.key.kind = RateLimitKey::Kind::Header;
                        r.key.header = toLower(name);
                      } else {
                        fail(v, "must be \"none\" or \"header:<name>\" (got " + inQuotes(s) + ")");
                      }
                    }},
                   {"reserve", [&](const Field& v) { r.reserve = integer(v, 0, kI64Max); }},
                   {"max_queue", [&](const Field& v) { r.max_queue = u32(v, 0); }},
               });
  return r;
}

CircuitBreakerConfig Decoder::circuitBreaker(const Field& f) {
  CircuitBreakerConfig cb;
  std::optional<Field> cooldown_field, max_cooldown_field;
  decodeMap(
      f, {
             {"consecutive_failures", [&](const Field& v) { cb.consecutive_failures = u32(v, 1); }},
             {"failure_rate",
              [&](const Field& v) {
                FailureRateConfig& fr = cb.failure_rate;
                decodeMap(
                    v, {
                           {"threshold", [&](const Field& x) { fr.threshold = number(x, 0, 1); }},
                           {"window", [&](const Field& x) { fr.window = duration(x, false); }},
                           {"min_requests", [&](const Field& x) { fr.min_requests = u32(x, 1); }},
                       });
              }},
             {"cooldown",
              [&](const Field& v) {
                cb.cooldown = duration(v, false);
                cooldown_field.emplace(v);
              }},
             {"max_cooldown",
              [&](const Field& v) {
                cb.max_cooldown = duration(v, false);
                max_cooldown_field.emplace(v);
              }},
             {"half_open_probes", [&](const Field& v) { cb.half_open_probes = u32(v, 1); }},
             {"failure_on", [&](const Field& v) { cb.failure_on = outcomes(v); }},
             {"max_requests", [&](const Field& v) { cb.max_requests = u32(v, 1); }},
             {"max_pending", [&](const Field& v) { cb.max_pending = u32(v, 0); }},
         });
  requireOrdered(cb.cooldown, cb.max_cooldown, cooldown_field, max_cooldown_field, "cooldown",
                 "max_cooldown");
  return cb;
}

OutcomeSet Decoder::outcomes(const Field& f) {
  OutcomeSet set;
  std::set<std::string> seen;
  for (const Field& item : items(f)) {
    const std::string s = scalar(item, "a status code or outcome name");
    if (!seen.insert(s).second) fail(item, "duplicate entry " + inQuotes(s));
    if (!s.empty() && std::all_of(s.begin(), s.end(), isDigit)) {
      const std::optional<int64_t> code = parseInt64(s);
      if (!code || *code < 100 || *code > 599) fail(item, "status code must be 100..599");
      set.statuses.push_back(static_cast<int>(*code));
    } else if (s == "4xx") {
      set.any_4xx = true;
    } else if (s == "5xx") {
      set.any_5xx = true;
    } else if (s == "connect_error") {
      set.connect_error = true;
    } else if (s == "reset") {
      set.reset = true;
    } else if (s == "timeout") {
      set.timeout = true;
    } else {
      fail(item,
           "unknown outcome " + inQuotes(s) +
               " (expected a status code 100..599, 4xx, 5xx, connect_error, reset or timeout)");
    }
  }
  return set;
}

RouteConfig Decoder::route(const Field& f) {
  RouteConfig r;
  std::optional<Field> name_field, upstream_field, prefix_field;
  decodeMap(
      f,
      {
          {"name",
           [&](const Field& v) {
             r.name = labelName(v);
             name_field.emplace(v);
           }},
          {"match", [&](const Field& v) { r.match = routeMatch(v, prefix_field); }},
          {"upstream",
           [&](const Field& v) {
             r.upstream = nonEmptyString(v);
             upstream_field.emplace(v);
           }},
          {"budget", [&](const Field& v) { r.budget = budget(v); }},
          {"retry", [&](const Field& v) { r.retry = retry(v); }},
          {"first_byte_timeout", [&](const Field& v) { r.first_byte_timeout = duration(v, true); }},
          {"idle_timeout", [&](const Field& v) { r.idle_timeout = duration(v, true); }},
          {"on_client_disconnect",
           [&](const Field& v) {
             r.on_client_disconnect =
                 oneOf<ClientDisconnectMode>(v, {{"cancel", ClientDisconnectMode::Cancel},
                                                 {"finish", ClientDisconnectMode::Finish}});
           }},
          {"finish_grace", [&](const Field& v) { r.finish_grace = duration(v, true); }},
      },
      {"name", "match", "upstream"});
  const auto [it, inserted] = route_lines_.emplace(r.name, name_field->mark.line + 1);
  if (!inserted) {
    fail(*name_field, "duplicate route name " + inQuotes(r.name) + " (first defined at line " +
                          std::to_string(it->second) + ")");
  }
  route_upstream_fields_.push_back(*upstream_field);
  route_prefix_fields_.push_back(prefix_field);
  return r;
}

RouteMatch Decoder::routeMatch(const Field& f, std::optional<Field>& prefix_field) {
  RouteMatch m;
  decodeMap(f,
            {
                {"path_prefix",
                 [&](const Field& v) {
                   prefix_field.emplace(v);
                   m.path_prefix = scalar(v, "a path");
                   if (m.path_prefix.empty() || m.path_prefix[0] != '/') {
                     fail(v, "must start with \"/\" (got " + inQuotes(m.path_prefix) + ")");
                   }
                   if (m.path_prefix.find_first_of("?# \t\r\n") != std::string::npos) {
                     fail(v, "must be a plain path (no query, fragment or whitespace)");
                   }
                 }},
                {"methods",
                 [&](const Field& v) {
                   for (const Field& item : items(v)) {
                     const std::string s = scalar(item, "an HTTP method");
                     if (!isToken(s)) fail(item, "invalid HTTP method " + inQuotes(s));
                     const std::string method = toUpper(s);
                     if (std::find(m.methods.begin(), m.methods.end(), method) != m.methods.end()) {
                       fail(item, "duplicate method " + inQuotes(method));
                     }
                     m.methods.push_back(method);
                   }
                 }},
            });
  return m;
}

BudgetConfig Decoder::budget(const Field& f) {
  BudgetConfig b;
  std::optional<Field> default_field, max_field;
  decodeMap(f, {
                   {"header", [&](const Field& v) { b.header = headerName(v); }},
                   {"default",
                    [&](const Field& v) {
                      b.default_budget = duration(v, false);
                      default_field.emplace(v);
                    }},
                   {"max",
                    [&](const Field& v) {
                      b.max = duration(v, false);
                      max_field.emplace(v);
                    }},
                   {"propagate", [&](const Field& v) { b.propagate = boolean(v); }},
               });
  requireOrdered(b.default_budget, b.max, default_field, max_field, "budget.default", "budget.max");
  return b;
}

RetryConfig Decoder::retry(const Field& f) {
  RetryConfig r;
  std::optional<Field> base_field, max_field;
  decodeMap(
      f,
      {
          {"attempts", [&](const Field& v) { r.attempts = u32(v, 1); }},
          {"on", [&](const Field& v) { r.on = outcomes(v); }},
          {"backoff",
           [&](const Field& v) {
             decodeMap(v, {
                              {"base",
                               [&](const Field& x) {
                                 r.backoff.base = duration(x, true);
                                 base_field.emplace(x);
                               }},
                              {"max",
                               [&](const Field& x) {
                                 r.backoff.max = duration(x, true);
                                 max_field.emplace(x);
                               }},
                          });
           }},
          {"respect_retry_after", [&](const Field& v) { r.respect_retry_after = boolean(v); }},
          {"idempotent",
           [&](const Field& v) {
             r.idempotent = oneOf<IdempotencyMode>(v, {{"auto", IdempotencyMode::Auto},
                                                       {"always", IdempotencyMode::Always},
                                                       {"never", IdempotencyMode::Never}});
           }},
          {"budget_percent",
           [&](const Field& v) { r.budget_percent = static_cast<uint32_t>(integer(v, 0, 100)); }},
          {"max_body", [&](const Field& v) { r.max_body = size(v); }},
      });
  requireOrdered(r.backoff.base, r.backoff.max, base_field, max_field, "backoff.base",
                 "backoff.max");
  return r;
}

LimitsConfig Decoder::limits(const Field& f) {
  LimitsConfig l;
  // A size within [min, max] bytes, worded with the units the file uses.
  const auto boundedSize = [&](const Field& v, uint64_t min, uint64_t max) {
    const uint64_t bytes = size(v);
    if (bytes < min) fail(v, "must be at least " + formatSize(min));
    if (bytes > max) fail(v, "must be at most " + formatSize(max));
    return bytes;
  };
  decodeMap(
      f,
      {
          {"max_header_bytes",
           [&](const Field& v) { l.max_header_bytes = boundedSize(v, 1024, 16ull << 20); }},
          {"max_headers", [&](const Field& v) { l.max_headers = u32Max(v, 1, 10'000); }},
          {"max_body", [&](const Field& v) { l.max_body = boundedSize(v, 1, 1ull << 30); }},
          {"max_buffered_body_bytes",
           [&](const Field& v) {
             l.max_buffered_body_bytes = boundedSize(v, 64 * 1024, 1ull << 40);
           }},
          {"max_connections_per_worker",
           [&](const Field& v) { l.max_connections_per_worker = u32Max(v, 1, 1'000'000); }},
          {"http2_max_concurrent_streams",
           [&](const Field& v) { l.http2_max_concurrent_streams = u32Max(v, 1, 100'000); }},
          {"header_read_timeout",
           [&](const Field& v) { l.header_read_timeout = duration(v, true); }},
          {"body_read_timeout", [&](const Field& v) { l.body_read_timeout = duration(v, true); }},
          {"idle_timeout", [&](const Field& v) { l.idle_timeout = duration(v, true); }},
          {"send_timeout", [&](const Field& v) { l.send_timeout = duration(v, true); }},
      });
  return l;
}

AccessLogConfig Decoder::accessLog(const Field& f) {
  AccessLogConfig a;
  decodeMap(f,
            {
                {"path",
                 [&](const Field& v) {
                   a.path = nonEmptyString(v);
                   if (a.path == "off") {
                     a.target = AccessLogConfig::Target::Off;
                     a.path.clear();
                   } else if (a.path == "stdout") {
                     a.target = AccessLogConfig::Target::Stdout;
                     a.path.clear();
                   } else {
                     a.target = AccessLogConfig::Target::File;
                   }
                 }},
                {"format",
                 [&](const Field& v) {
                   oneOf<bool>(v, {{"json", true}});
                 }},
            },
            {"path"});
  return a;
}

SharedStateConfig Decoder::sharedState(const Field& f) {
  SharedStateConfig shared;
  decodeMap(f,
            {
                {"redis",
                 [&](const Field& v) {
                   shared.raw_redis = scalar(v, "a redis:// URL");
                   std::string why;
                   const std::optional<RedisUrl> url = parseRedisUrl(shared.raw_redis, &why);
                   if (!url) fail(v, why);
                   shared.redis = *url;
                 }},
                {"prefix",
                 [&](const Field& v) {
                   shared.prefix = scalar(v, "a string");
                   if (shared.prefix.size() > 64) fail(v, "must be at most 64 characters");
                 }},
                {"timeout", [&](const Field& v) { shared.timeout = duration(v, false); }},
            },
            {"redis"});
  return shared;
}

PriceConfig Decoder::price(const Field& f) {
  PriceConfig p;
  const double kNoMax = std::numeric_limits<double>::max();
  decodeMap(f,
            {
                {"model", [&](const Field& v) { p.model_glob = labelName(v); }},
                {"input", [&](const Field& v) { p.input_usd_per_mtok = number(v, 0, kNoMax); }},
                {"output", [&](const Field& v) { p.output_usd_per_mtok = number(v, 0, kNoMax); }},
            },
            {"model", "input", "output"});
  return p;
}

ConfigError errorAt(const std::string& file, const YAML::Mark& mark, std::string message) {
  ConfigError e;
  e.file = file;
  e.line = mark.is_null() ? 0 : mark.line + 1;
  e.column = mark.is_null() ? 0 : mark.column + 1;
  e.message = std::move(message);
  return e;
}

ConfigError tooLarge(const std::string& source_name) {
  return errorAt(source_name, YAML::Mark::null_mark(),
                 "config file is larger than " + formatSize(kMaxConfigBytes) +
                     " (the limit; is this the right file?)");
}

LoadResult failed(ConfigError error) {
  LoadResult result;
  result.error = std::move(error);
  return result;
}

}  // namespace

std::optional<Duration> parseDuration(std::string_view text, std::string* error) {
  const std::string prefix = "invalid duration " + inQuotes(text) + ": ";
  if (text.empty()) return fail(error, prefix + "empty");
  if (text[0] == '-') return fail(error, prefix + "must not be negative");
  struct Unit {
    std::string_view name;
    uint64_t ms;
  };
  static constexpr Unit kUnits[] = {{"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}};
  constexpr std::string_view kHint = " (use ms, s, m or h, e.g. \"30s\" or \"250ms\")";
  uint64_t total = 0;
  int previous_unit = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    Decimal number;
    if (!readDecimal(text, pos, number)) {
      return fail(error, prefix + "expected a number and a unit" + std::string(kHint));
    }
    if (pos == text.size()) {
      return fail(error, prefix + "missing unit; a bare number is ambiguous" + std::string(kHint));
    }
    int unit = -1;
    if (text.substr(pos, 2) == "ms") {
      unit = 3;
    } else if (text[pos] == 'h' || text[pos] == 'm' || text[pos] == 's') {
      unit = text[pos] == 'h' ? 0 : text[pos] == 'm' ? 1 : 2;
    }
    if (unit < 0) return fail(error, prefix + "unknown unit" + std::string(kHint));
    if (unit <= previous_unit) {
      return fail(error, prefix + "units must appear once each, largest first (e.g. \"1m30s\")");
    }
    pos += kUnits[unit].name.size();
    previous_unit = unit;
    bool inexact = false;
    const std::optional<uint64_t> ms = scale(number, kUnits[unit].ms, &inexact);
    if (!ms) {
      return fail(error, prefix + (inexact ? "finer than a millisecond" : "too large"));
    }
    if (__builtin_add_overflow(total, *ms, &total) ||
        total > static_cast<uint64_t>(kMaxDurationMs)) {
      return fail(error, prefix + "too large (at most 87600h)");
    }
  }
  return Duration(static_cast<int64_t>(total));
}

std::optional<uint64_t> parseSize(std::string_view text, std::string* error) {
  const std::string prefix = "invalid size " + inQuotes(text) + ": ";
  if (text.empty()) return fail(error, prefix + "empty");
  if (text[0] == '-') return fail(error, prefix + "must not be negative");
  static const std::map<std::string_view, uint64_t> kUnits = {
      {"", 1},
      {"B", 1},
      {"KB", 1000ULL},
      {"MB", 1000ULL * 1000},
      {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
  };
  size_t pos = 0;
  Decimal number;
  if (!readDecimal(text, pos, number)) {
    return fail(error, prefix + "expected a number of bytes or a number and a unit, e.g. \"8MiB\"");
  }
  const auto unit = kUnits.find(text.substr(pos));
  if (unit == kUnits.end()) {
    return fail(error, prefix + "unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  }
  bool inexact = false;
  const std::optional<uint64_t> bytes = scale(number, unit->second, &inexact);
  if (!bytes) return fail(error, prefix + (inexact ? "not a whole number of bytes" : "too large"));
  return bytes;
}

std::optional<SocketAddress> parseSocketAddress(std::string_view text, std::string* error) {
  const std::string prefix = "invalid address " + inQuotes(text) + ": ";
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(text, host, port_text, why)) return fail(error, prefix + why);
  if (!port_text) return fail(error, prefix + "missing port (expected host:port)");
  const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/true, why);
  if (!port) return fail(error, prefix + why);
  return SocketAddress{host, *port};
}

std::optional<UpstreamUrl> parseUpstreamUrl(std::string_view text, std::string* error) {
  const std::string prefix = "invalid URL " + inQuotes(text) + ": ";
  UpstreamUrl url;
  const std::string lower = toLower(text);
  std::string_view rest = text;
  if (lower.rfind("http://", 0) == 0) {
    url.scheme = UpstreamUrl::Scheme::Http;
    rest.remove_prefix(7);
  } else if (lower.rfind("https://", 0) == 0) {
    url.scheme = UpstreamUrl::Scheme::Https;
    rest.remove_prefix(8);
  } else {
    return fail(error, prefix + "must start with http:// or https://");
  }
  if (std::any_of(rest.begin(), rest.end(), [](char c) { return c <= 0x20 || c == 0x7f; })) {
    return fail(error, prefix + "must not contain spaces or control characters");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return fail(error, prefix + "must not have a query or fragment");
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) {
    return fail(error, prefix + "must not contain credentials; set them in headers");
  }
  if (authority.empty()) return fail(error, prefix + "missing host");
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(authority, host, port_text, why)) return fail(error, prefix + why);
  url.host = toLower(host);
  url.port = url.isTls() ? 443 : 80;
  if (port_text) {
    const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/false, why);
    if (!port) return fail(error, prefix + why);
    url.port = *port;
  }
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.path_prefix = std::string(path);
  return url;
}

std::optional<RedisUrl> parseRedisUrl(std::string_view text, std::string* error) {
  // The text may hold a password: messages quote only the parts without it.
  const std::string prefix = "invalid Redis URL: ";
  RedisUrl url;
  const std::string lower = toLower(text);
  std::string_view rest = text;
  if (lower.rfind("rediss://", 0) == 0) {
    return fail(error, prefix +
                           "rediss:// (TLS) is not supported: the packaged hiredis 0.14 has no "
                           "TLS; reach Redis over a private network or a TLS tunnel (stunnel)");
  }
  if (lower.rfind("redis://", 0) != 0) return fail(error, prefix + "must start with redis://");
  rest.remove_prefix(8);
  if (std::any_of(rest.begin(), rest.end(), [](char c) { return c <= 0x20 || c == 0x7f; })) {
    return fail(error, prefix + "must not contain spaces or control characters");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return fail(error, prefix + "must not have a query or fragment");
  }
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      url.password = std::string(userinfo);  // redis://secret@host: the password alone
    } else {
      url.username = std::string(userinfo.substr(0, colon));
      url.password = std::string(userinfo.substr(colon + 1));
    }
    rest.remove_prefix(at + 1);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.empty()) return fail(error, prefix + "missing host");
  std::string host, why;
  std::optional<std::string_view> port_text;
  if (!splitHostPort(authority, host, port_text, why)) return fail(error, prefix + why);
  url.host = toLower(host);
  if (port_text) {
    const std::optional<uint16_t> port = parsePort(*port_text, /*allow_zero=*/false, why);
    if (!port) return fail(error, prefix + why);
    url.port = *port;
  }
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      const std::optional<int64_t> n = parseInt64(db);
      if (!n || *n < 0 || *n > 15) {
        return fail(error,
                    prefix + "the database must be a number 0..15 (got " + inQuotes(db) + ")");
      }
      url.db = static_cast<int>(*n);
    }
  }
  return url;
}

namespace {

// yaml-cpp 0.7's LoadAll() never returns on a document that consumes no input
// (a stray ',' at the top level, e.g. "!a,"): it appends empty documents until
// memory runs out (jbeder/yaml-cpp#1040, fixed upstream by #1319). This parse
// only watches where each document starts and stops at the first one that
// starts where the previous one did; LoadAll() runs only on text that passed it.
class StuckDocumentFinder final : public YAML::EventHandler {
 public:
  /** The position of a document that made no progress, if any (throws YAML errors). */
  static std::optional<YAML::Mark> find(const std::string& yaml_text) {
    std::istringstream in(yaml_text);
    YAML::Parser parser(in);
    StuckDocumentFinder finder;
    while (parser.HandleNextDocument(finder)) {
      if (finder.stuck_) return finder.last_;
    }
    return std::nullopt;
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    stuck_ = started_ && mark.pos == last_.pos;
    started_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  bool started_ = false;
  bool stuck_ = false;
  YAML::Mark last_ = YAML::Mark::null_mark();
};

}  // namespace

LoadResult loadConfigString(const std::string& yaml_text, const std::string& source_name,
                            const EnvLookup& env) {
  if (yaml_text.size() > kMaxConfigBytes) return failed(tooLarge(source_name));
  try {
    if (const auto stuck = StuckDocumentFinder::find(yaml_text)) {
      return failed(errorAt(source_name, *stuck,
                            "invalid YAML: unexpected character outside any value "
                            "(a stray ',', ']' or '}'?)"));
    }
    const std::vector<YAML::Node> documents = YAML::LoadAll(yaml_text);
    if (documents.size() > 1) {
      return failed(
          errorAt(source_name, documents[1].Mark(),
                  "expected one YAML document, found " + std::to_string(documents.size())));
    }
    const YAML::Node root = documents.empty() ? YAML::Node() : documents[0];
    Decoder decoder(source_name, env);
    auto config = std::make_shared<Config>(decoder.decode(root));
    config->source_path = source_name;
    LoadResult result;
    result.config = std::move(config);
    return result;
  } catch (const DecodeFailure& failure) {
    return failed(failure.error);
  } catch (const YAML::Exception& e) {
    return failed(errorAt(source_name, e.mark, "invalid YAML: " + e.msg));
  } catch (const std::exception& e) {
    return failed(errorAt(source_name, YAML::Mark::null_mark(), e.what()));
  }
}

LoadResult loadConfigFile(const std::string& path, const EnvLookup& env) {
  const auto fileError = [&](const std::string& message) {
    return failed(errorAt(path, YAML::Mark::null_mark(), message));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return fileError("is a directory, not a config file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return fileError(std::string("cannot read config file: ") + std::strerror(errno));
  // Read at most one byte past the cap: a huge file (or an endless pipe) is
  // rejected without being read, let alone parsed.
  std::string text;
  char chunk[64 * 1024];
  while (text.size() <= kMaxConfigBytes && in.read(chunk, sizeof(chunk)).gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return fileError("cannot read config file");
  if (text.size() > kMaxConfigBytes) return failed(tooLarge(path));
  return loadConfigString(text, path, env);
}

}  // namespace sluice::config
