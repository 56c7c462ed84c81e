#pragma once

// Finding a few top-level members of a JSON object without lexing all of it.
//
// The spend meter and the throttle need two or three top-level fields of
// request and response bodies (`model`, `usage`, `max_tokens`), and bodies
// are mostly long strings (conversation history, generated text). A full
// nlohmann parse costs ~90-100 instructions per byte, which made JSON the
// largest per-request cost of the proxy (bench/results/PROFILE.md). This
// scan only locates members: strings are skipped with memchr (honouring
// backslash escapes) and nesting is counted. It decodes nothing — callers
// hand the value's bytes to nlohmann::json, so values are still decoded by
// the library. It validates only the top-level shape; anything it cannot
// vouch for (not an object, a key written with an escape, broken framing)
// makes it return false, and callers fall back to a full parse.

#include <functional>
#include <string_view>

namespace sluice {

/**
 * Calls `on_member(key, value_text)` for each top-level member of the JSON
 * object `text`, in document order; `value_text` is the raw JSON of the value
 * (a string value includes its quotes). `on_member` returns false to stop
 * early. Returns false — and the caller should parse `text` fully — when
 * `text` is not an object, a top-level key contains a backslash escape, or
 * the framing is broken before the scan stopped.
 */
bool scanTopLevelMembers(
    std::string_view text,
    const std::function<bool(std::string_view key, std::string_view value)>& on_member);

}  // namespace sluice
