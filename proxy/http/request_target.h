#pragma once

// The request target of an HTTP/1.1 request head, as sluice routes it.

#include <string>
#include <string_view>

#include "common/http_message.h"

namespace sluice {

/**
 * RFC 9112 §3.2.2: a server accepts the absolute-form ("http://host/p?q")
 * too. Routes match on the path, so the target becomes origin-form
 * ("/p?q"; "/" without a path; a fragment is dropped) and Host becomes the
 * target's authority (the received Host is ignored). Origin-form and "*"
 * are left alone. False when the target is not an http(s) URI sluice can
 * use: another scheme, userinfo, an empty or malformed host or port (the
 * rules http-parser's URL parser applied before llhttp, which has none).
 */
bool toOriginForm(RequestHead& head);

/** What normalizePath() did to a request target. */
enum class PathNormalization {
  Unchanged,   // no dot segment: the target is as it came (the usual case)
  Normalized,  // dot segments were removed
  AboveRoot,   // a ".." would climb above "/": the request is refused (400)
};

/**
 * RFC 3986 §5.2.4 remove_dot_segments on the path of an origin-form
 * `target` ("/p?q"), in place, before routes match it: "." and ".."
 * segments, also written with `%2e` / `%2E` for a dot (".%2e", "%2E%2e"),
 * are resolved, so a route's path_prefix sees the path the upstream will
 * resolve, and the upstream gets the resolved one (Envoy's normalize_path).
 * Only a dot segment's escapes are decoded: "%2e" inside a name, "%2f" and
 * every other escape are left as they came. The query (from the first '?')
 * is untouched, and so is a target that is not a path ("*"). A path with no
 * '.' and no '%' is not looked at further.
 */
PathNormalization normalizePath(std::string& target);

/** The 400's detail for PathNormalization::AboveRoot. */
inline constexpr std::string_view kPathAboveRoot =
    "the request path climbs above \"/\" with \"..\" segments (RFC 3986 §5.2.4)";

}  // namespace sluice
