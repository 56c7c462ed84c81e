// The generic YAML readers of common/yaml/field_reader.h: mappings, lists
// and typed scalars, with errors that name file:line:col and the key path.

#include "common/yaml/field_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/http_headers.h"

namespace sluice::config {

std::string ConfigError::toString() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  if (!key_path.empty()) out += key_path + ": ";
  out += message;
  return out;
}

}  // namespace sluice::config

namespace sluice::config::detail {

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

void FieldReader::fail(const YAML::Mark& mark, const std::string& path,
                       const std::string& message) const {
  throw DecodeFailure{
      errorAt(mark, path, redactExpansions(message, nullptr, nullptr, expansions_))};
}

void FieldReader::fail(const Field& field, const std::string& message) const {
  std::string expanded, why;
  std::vector<Expansion> unused;
  const bool scalar = field.node.IsScalar();
  const bool expands =
      scalar && expandEnv(field.node.Scalar(), env_, expanded, why, &unused) && !unused.empty();
  throw DecodeFailure{errorAt(field.mark, field.path,
                              redactExpansions(message, expands ? &field.node.Scalar() : nullptr,
                                               expands ? &expanded : nullptr, expansions_))};
}

ConfigError FieldReader::errorAt(const YAML::Mark& mark, const std::string& path,
                                 std::string message) const {
  ConfigError error;
  error.file = file_;
  error.line = mark.is_null() ? 1 : mark.line + 1;
  error.column = mark.is_null() ? 1 : mark.column + 1;
  error.key_path = path;
  error.message = std::move(message);
  return error;
}

Field FieldReader::child(const YAML::Node& value, std::string path, const YAML::Mark& fallback) {
  const YAML::Mark mark = (value.IsNull() || value.Mark().is_null()) ? fallback : value.Mark();
  return Field{value, std::move(path), mark};
}

void FieldReader::decodeMap(const Field& map, const std::vector<Key>& keys,
                            std::initializer_list<std::string_view> required) {
  std::set<std::string, std::less<>> seen;
  forEachEntry(map, [&](const YAML::Mark& key_mark, const std::string& key, const Field& value) {
    const auto it =
        std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == key; });
    if (it == keys.end()) fail(key_mark, value.path, unknownKeyMessage(key, keys));
    seen.insert(key);
    it->decode(value);
  });
  for (std::string_view name : required) {
    if (seen.count(name) == 0) fail(map.mark, childPath(map.path, name), "required key is missing");
  }
}

std::string FieldReader::unknownKeyMessage(const std::string& key, const std::vector<Key>& keys) {
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

std::vector<Field> FieldReader::items(const Field& seq) {
  if (!seq.node.IsSequence()) fail(seq, "expected a list, got " + describe(seq.node));
  std::vector<Field> out;
  size_t i = 0;
  for (const auto& item : seq.node) {
    out.push_back(child(item, seq.path + "[" + std::to_string(i++) + "]", seq.mark));
  }
  return out;
}

std::string FieldReader::scalar(const Field& f, std::string_view what) {
  if (!f.node.IsScalar()) fail(f, "expected " + std::string(what) + ", got " + describe(f.node));
  std::string out, why;
  if (!expandEnv(f.node.Scalar(), env_, out, why, &expansions_)) fail(f, why);
  return out;
}

std::string FieldReader::labelName(const Field& f) {
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

std::string FieldReader::nonEmptyString(const Field& f) {
  std::string s = scalar(f, "a string");
  if (s.empty()) fail(f, "must not be empty");
  return s;
}

bool FieldReader::boolean(const Field& f) {
  const std::string s = scalar(f, "true or false");
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  fail(f, "expected true or false, got " + inQuotes(s));
}

int64_t FieldReader::integer(const Field& f, int64_t min, int64_t max) {
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

double FieldReader::number(const Field& f, double min, double max) {
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

Duration FieldReader::duration(const Field& f, bool allow_zero) {
  const std::string s = scalar(f, "a duration such as \"30s\"");
  std::string why;
  const std::optional<Duration> d = parseDuration(s, &why);
  if (!d) fail(f, why);
  if (!allow_zero && d->count() == 0) fail(f, "must be greater than 0s");
  return *d;
}

uint64_t FieldReader::size(const Field& f) {
  const std::string s = scalar(f, "a size such as \"8MiB\"");
  std::string why;
  const std::optional<uint64_t> bytes = parseSize(s, &why);
  if (!bytes) fail(f, why);
  return *bytes;
}

std::string FieldReader::headerName(const Field& f) {
  const std::string s = scalar(f, "a header name");
  if (!isToken(s)) fail(f, "invalid header name " + inQuotes(s));
  return toLower(s);
}

void FieldReader::requireOrdered(Duration first, Duration second,
                                 const std::optional<Field>& first_field,
                                 const std::optional<Field>& second_field,
                                 const std::string& first_name, const std::string& second_name) {
  if (first <= second) return;
  if (first_field) {
    fail(*first_field, "must not exceed " + second_name + " (" + formatDuration(second) + ")");
  }
  fail(*second_field, "must not be less than " + first_name + " (" + formatDuration(first) + ")");
}

}  // namespace sluice::config::detail
