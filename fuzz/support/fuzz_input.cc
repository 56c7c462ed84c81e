#include "fuzz/support/fuzz_input.h"

namespace sluice::fuzz {

std::string_view parseHeaderBlock(std::string_view text, HeaderMap& headers) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    headers.add(line.substr(0, colon), trimOws(line.substr(colon + 1)));
  }
  return text;
}

SplitInput splitControl(std::string_view data) {
  if (data.empty()) return {};
  const auto last = static_cast<unsigned char>(data.back());
  if ((last & 0x80) == 0) return {data, 0};
  return {data.substr(0, data.size() - 1), static_cast<size_t>(last & 0x7f) + 1};
}

}  // namespace sluice::fuzz
