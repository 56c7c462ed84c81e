#pragma once

// Small helpers shared by the fuzz targets: turning fuzz bytes into the
// shapes sluice's functions take. Nothing here parses HTTP for sluice — the
// targets hand these shapes to the real code.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/http_headers.h"

namespace sluice::fuzz {

/**
 * A header block as text: one `name: value` per line (LF or CRLF), up to the
 * first empty line. Lines without a colon are skipped. Returns the rest of
 * the input after the empty line (a body, for targets that want one).
 */
std::string_view parseHeaderBlock(std::string_view text, HeaderMap& headers);

/**
 * How a downstream target feeds its input: a last byte with the high bit set
 * is not part of the stream but says "deliver it in slices of
 * (byte & 0x7f) + 1 bytes"; any other last byte means "all at once". Seeds
 * are therefore plain text, and mutating the last byte explores splits.
 */
struct SplitInput {
  std::string_view stream;
  size_t slice = 0;  // 0 = all at once
};
SplitInput splitControl(std::string_view data);

}  // namespace sluice::fuzz
