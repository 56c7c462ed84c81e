#pragma once

// The YAML toolkit: reads typed values out of YAML nodes for the config
// decoders — each filter's section (filters/*/…_config.cc) and config/'s own
// (config/sections.h). Each reader expands `${VAR}`, converts and
// range-checks, and at the first problem throws DecodeFailure: file, line,
// column, key path and a message that never shows an expanded value
// (config/loader.h lists the rules). It knows no section of sluice's schema.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/yaml/value_parsers.h"

namespace sluice::config {

/** Why a config was rejected, with the position of the offending YAML node. */
struct ConfigError {
  std::string file;      // the path or source name given to the loader
  int line = 0;          // 1-based; 0 when the error has no position (unreadable file)
  int column = 0;        // 1-based
  std::string key_path;  // e.g. "routes[1].match.path_prefix"; empty for file-level errors
  std::string message;

  /**
   * "FILE:LINE:COL: KEY.PATH: message". Parts that are unknown are left out:
   * no position gives "FILE: KEY.PATH: message", no key path "FILE:LINE:COL: message".
   */
  std::string toString() const;
};

}  // namespace sluice::config

namespace sluice::config::detail {

/** "parent.key", or "key" when `parent` is the top level. */
std::string childPath(const std::string& parent, std::string_view key);

/** How a node reads in a message: its text in quotes, "a list", "an empty value", ... */
std::string describe(const YAML::Node& node);

/**
 * A YAML node with its key path and the position an error about it points at.
 * `node` is const on purpose: assigning a YAML::Node writes through to the tree
 * it aliases, so Field must never be assigned (use optional::emplace).
 */
struct Field {
  const YAML::Node node;
  std::string path;
  YAML::Mark mark;  // the value's, or its key's when the value is empty
};

/** Thrown inside the decoders only; loadConfigString() turns it into a LoadResult. */
struct DecodeFailure {
  ConfigError error;
};

/**
 * The generic readers the section decoders are built from: mappings with a
 * fixed set of keys, lists, scalars of each type, and the errors about them.
 * Keeps every `${VAR}` expanded so far, to redact their values from errors,
 * so one reader serves a whole document: config/'s Decoder is one, and hands
 * itself to each filter's decoder.
 */
class FieldReader {
 public:
  FieldReader(const std::string& file, const EnvLookup& env) : file_(file), env_(env) {}
  FieldReader(const FieldReader&) = delete;  // a copy would lose the expansions to redact
  FieldReader& operator=(const FieldReader&) = delete;

  using Handler = std::function<void(const Field&)>;
  /** One key a mapping may hold and how its value is decoded. */
  struct Key {
    std::string_view name;
    Handler decode;
  };

  /** An error at `mark` about `path`; values from ${VAR} are redacted. */
  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& path,
                         const std::string& message) const;
  /** An error about `field`'s value: the value is shown as written (${VAR}, not its value). */
  [[noreturn]] void fail(const Field& field, const std::string& message) const;
  /** The ConfigError for `message` at `mark` (line 1, column 1 when the mark is null). */
  ConfigError errorAt(const YAML::Mark& mark, const std::string& path, std::string message) const;

  /** `value` as a Field at `path`; an empty value points at `fallback` (its key). */
  static Field child(const YAML::Node& value, std::string path, const YAML::Mark& fallback);

  /**
   * Calls fn(key_mark, key, value_field) for each entry of a mapping, rejecting
   * non-scalar and duplicate keys.
   */
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

  /** Decodes a mapping with a fixed set of keys: unknown keys and missing required keys fail. */
  void decodeMap(const Field& map, const std::vector<Key>& keys,
                 std::initializer_list<std::string_view> required = {});

  /** The items of a list, each with its `path[i]`. */
  std::vector<Field> items(const Field& seq);

  /** The scalar's text with ${VAR} expanded; `what` names the expected value in type errors. */
  std::string scalar(const Field& f, std::string_view what);

  /** A route, upstream or pricing name: it becomes a metric label value. */
  std::string labelName(const Field& f);
  std::string nonEmptyString(const Field& f);
  bool boolean(const Field& f);
  int64_t integer(const Field& f, int64_t min, int64_t max);
  uint32_t u32(const Field& f, int64_t min) {
    return static_cast<uint32_t>(integer(f, min, kU32Max));
  }
  uint32_t u32Max(const Field& f, int64_t min, int64_t max) {
    return static_cast<uint32_t>(integer(f, min, max));
  }
  double number(const Field& f, double min, double max);
  Duration duration(const Field& f, bool allow_zero);
  uint64_t size(const Field& f);
  /** A header name, lower-cased. */
  std::string headerName(const Field& f);

  /** One of `choices` by name (an enum). */
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

  /** Fails at whichever of two related fields was written when `first` > `second`. */
  void requireOrdered(Duration first, Duration second, const std::optional<Field>& first_field,
                      const std::optional<Field>& second_field, const std::string& first_name,
                      const std::string& second_name);

 private:
  static std::string unknownKeyMessage(const std::string& key, const std::vector<Key>& keys);

  const std::string& file_;
  const EnvLookup& env_;
  std::vector<Expansion> expansions_;  // every ${VAR} expanded so far, for redacting errors
};

}  // namespace sluice::config::detail
