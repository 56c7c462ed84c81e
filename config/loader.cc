// The config loader's top level: reads the file (size cap, directories),
// parses the YAML document, dispatches its top-level keys to the section
// decoders (config/sections.h) and runs the checks that span sections
// (route -> upstream, listener/admin address clashes, path warnings).
// Values are read by the YAML toolkit (common/yaml/); each filter's section
// by that filter's decoder (filters/*/…_config.cc).

#include "config/loader.h"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "config/render.h"
#include "config/sections.h"

namespace sluice::config {

EnvLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace detail {

Config Decoder::decode(const YAML::Node& root) {
  if (!root.IsMap()) {
    const std::string got = root.IsNull() ? "an empty document" : describe(root);
    fail(root.Mark(), "", "expected a mapping at the top level, got " + got);
  }
  Config c;
  decodeMap(Field{root, "", root.Mark()},
            {
                {"version",
                 [&](const Field& f) {
                   c.version = static_cast<int>(integer(f, 0, 1'000'000));
                   if (c.version != 1) fail(f, "unsupported version (this sluice reads version 1)");
                 }},
                {"listen", [&](const Field& f) { c.listeners = listeners(f); }},
                {"admin", [&](const Field& f) { admin(f, c); }},
                {"workers", [&](const Field& f) { c.workers = workers(f); }},
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
                   for (const Field& item : items(f)) c.pricing.push_back(decodePrice(*this, item));
                 }},
                {"limits", [&](const Field& f) { c.limits = limits(f); }},
                {"access_log", [&](const Field& f) { c.access_log = accessLog(f); }},
                {"shared_state", [&](const Field& f) { c.shared_state = sharedState(f); }},
                {"runs", [&](const Field& f) { c.runs = decodeRuns(*this, f); }},
            },
            {"listen"});

  // The admin port must not collide with a proxy listener (port 0 = ephemeral, never collides).
  for (size_t i = 0; i < listener_fields_.size(); ++i) {
    const auto& [listener_address, field] = listener_fields_[i];
    if (listener_address.port == 0 || listener_address.toString() != c.admin.toString()) continue;
    if (admin_field_) {
      fail(*admin_field_, "same address as listen[" + std::to_string(i) + "]");
    }
    fail(field, "conflicts with the default admin address " + c.admin.toString() +
                    "; set admin to another address");
  }

  // Resolve route -> upstream (and its fallbacks) now that every upstream is
  // known, wherever it was written.
  const auto resolve = [&](const std::string& name, const Field& field) {
    const auto it = std::find_if(c.upstreams.begin(), c.upstreams.end(),
                                 [&](const UpstreamConfig& u) { return u.name == name; });
    if (it == c.upstreams.end()) {
      std::string defined;
      for (const UpstreamConfig& u : c.upstreams) defined += (defined.empty() ? "" : ", ") + u.name;
      fail(field,
           "unknown upstream " + inQuotes(name) +
               (defined.empty() ? " (no upstreams are defined)" : " (defined: " + defined + ")"));
    }
    return static_cast<size_t>(it - c.upstreams.begin());
  };
  for (size_t i = 0; i < c.routes.size(); ++i) {
    RouteConfig& r = c.routes[i];
    r.upstream_index = resolve(r.upstream, route_upstream_fields_[i]);
    std::set<size_t> chain{r.upstream_index};
    for (size_t k = 0; k < r.fallback.size(); ++k) {
      const Field& field = route_fallback_fields_[i][k];
      r.fallback[k].upstream_index = resolve(r.fallback[k].upstream, field);
      if (!chain.insert(r.fallback[k].upstream_index).second) {
        fail(field, "upstream " + inQuotes(r.fallback[k].upstream) +
                        " is already in this route's chain (the route's upstream or an earlier "
                        "fallback)");
      }
    }
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
  const std::optional<Field>& prefix_field = route_prefix_fields_[route_index];
  if (!prefix_field) return;
  for (const EndpointConfig& e : u.endpoints) {
    const std::string_view segment = firstSegment(e.url.path_prefix);
    if (segment.size() < 2 || firstSegment(r.match.path_prefix) != segment) continue;
    const std::string& example = r.match.path_prefix;
    warnings_.push_back(errorAt(prefix_field->mark, prefix_field->path,
                                "upstream " + inQuotes(u.name) + "'s url path " +
                                    inQuotes(e.url.path_prefix) +
                                    " is prepended to every request path, so a request for " +
                                    example + " goes upstream as " + e.url.path_prefix + example +
                                    " (drop the path from the url, or leave it out of the route)")
                            .toString());
    return;  // one warning per route
  }
}

}  // namespace detail

namespace {

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
    detail::Decoder decoder(source_name, env);
    auto config = std::make_shared<Config>(decoder.decode(root));
    config->source_path = source_name;
    LoadResult result;
    result.config = std::move(config);
    return result;
  } catch (const detail::DecodeFailure& failure) {
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
