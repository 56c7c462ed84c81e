#include "filters/spend/sse_parser.h"

#include <cstring>
#include <limits>
#include <utility>

namespace sluice {

namespace {

constexpr unsigned char kUtf8Bom[3] = {0xEF, 0xBB, 0xBF};
// After a large event, give the buffer back rather than keep the peak per stream.
constexpr size_t kRetainedCapacity = 64 * 1024;

}  // namespace

SseParser::SseParser(EventCallback on_event, size_t max_event_bytes)
    : on_event_(std::move(on_event)), max_event_bytes_(max_event_bytes) {}

void SseParser::feed(const char* data, size_t len) {
  if (!bom_done_) {
    // The BOM may itself be split across slices: hold its prefix until decided.
    size_t i = 0;
    while (i < len && bom_matched_ < 3 &&
           static_cast<unsigned char>(data[i]) == kUtf8Bom[bom_matched_]) {
      ++bom_matched_;
      ++i;
    }
    if (bom_matched_ == 3) {
      bom_done_ = true;
      offset_ += 3;
    } else if (i < len) {
      // Not a BOM: the held prefix bytes were stream content after all.
      bom_done_ = true;
      const size_t held = bom_matched_;
      bom_matched_ = 0;
      process(reinterpret_cast<const char*>(kUtf8Bom), held);
    } else {
      return;  // still undecided
    }
    data += i;
    len -= i;
  }
  process(data, len);
}

void SseParser::process(const char* data, size_t len) {
  line_in_slice_ = true;
  processSlice(data, len);
  // The slice goes back to the caller: keep what the event still needs.
  spillDataLine();
}

void SseParser::processSlice(const char* data, size_t len) {
  size_t i = 0;
  while (i < len) {
    if (after_cr_) {
      after_cr_ = false;
      if (data[i] == '\n') {  // the LF of a CRLF split from its CR
        ++i;
        ++offset_;
        continue;
      }
    }
    // The line's end: the first LF or CR (memchr: this scan is most of the
    // parser's cost per streamed chunk otherwise; PROFILE.md). An empty
    // line (every event's last) needs no search.
    size_t j = i;
    if (data[i] != '\n' && data[i] != '\r') {
      const void* lf = std::memchr(data + i, '\n', len - i);
      j = lf != nullptr ? static_cast<size_t>(static_cast<const char*>(lf) - data) : len;
      if (const void* cr = std::memchr(data + i, '\r', j - i); cr != nullptr) {
        j = static_cast<size_t>(static_cast<const char*>(cr) - data);
      }
    }
    if (j == len) {
      appendPartialLine(data + i, len - i);
      offset_ += len - i;
      return;
    }
    offset_ += j - i + 1;
    after_cr_ = data[j] == '\r';
    if (line_len_ == 0) {
      processLine(std::string_view(data + i, j - i), j - i);
    } else {
      appendPartialLine(data + i, j - i);
      line_in_slice_ = false;
      if (!line_is_comment_) processLine(line_, line_len_);
      line_in_slice_ = true;
    }
    line_.clear();
    line_len_ = 0;
    line_is_comment_ = false;
    i = j + 1;
  }
}

void SseParser::appendPartialLine(const char* data, size_t len) {
  if (line_len_ == 0 && len > 0 && data[0] == ':') line_is_comment_ = true;
  line_len_ += len;
  if (oversized_ || line_is_comment_) return;  // never stored
  if (line_.size() + len + dataBytes() + event_type_.size() > max_event_bytes_) {
    enterOversized();
    return;
  }
  line_.append(data, len);
}

void SseParser::processLine(std::string_view line, size_t line_len) {
  if (line_len == 0) {
    dispatch();
    return;
  }
  if (oversized_ || line.empty() || line[0] == ':') return;
  // Most lines are `data:` ones: their first colon is known.
  const size_t colon = line.starts_with("data:") ? 4 : line.find(':');
  if (colon == std::string_view::npos) {
    processField(line, std::string_view());
    return;
  }
  std::string_view value = line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  processField(line.substr(0, colon), value);
}

void SseParser::processField(std::string_view field, std::string_view value) {
  if (field == "data") {
    spillDataLine();
    if (data_.size() + value.size() + 1 + event_type_.size() > max_event_bytes_) {
      enterOversized();
      return;
    }
    if (data_.empty() && line_in_slice_) {
      // The event's first data line, still in the caller's slice: most
      // events have one, and it is dispatched before the slice goes back.
      data_line_ = value;
      data_line_in_slice_ = true;
      return;
    }
    data_.append(value);
    data_.push_back('\n');
  } else if (field == "event") {
    if (dataBytes() + value.size() > max_event_bytes_) {
      enterOversized();
      return;
    }
    event_type_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos && value.size() <= max_event_bytes_) {
      last_event_id_.assign(value);
    }
  } else if (field == "retry") {
    if (value.empty()) return;
    uint64_t ms = 0;
    for (char c : value) {
      if (c < '0' || c > '9') return;  // the spec ignores a non-integer retry
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      ms = ms > (std::numeric_limits<uint64_t>::max() - digit) / 10
               ? std::numeric_limits<uint64_t>::max()
               : ms * 10 + digit;
    }
    retry_ms_ = ms;
  }
  // Any other field is ignored, as the spec says.
}

void SseParser::dispatch() {
  if (oversized_) {
    SseEvent event;
    event.type = event_type_;
    event.id = last_event_id_;
    event.end_offset = offset_;
    event.oversized = true;
    ++skipped_;
    on_event_(event);
    oversized_ = false;
    resetEvent();
    return;
  }
  if (dataBytes() == 0) {  // no data field: nothing to dispatch
    event_type_.clear();
    return;
  }
  SseEvent event;
  if (data_line_in_slice_) {
    event.data = data_line_;
  } else {
    data_.pop_back();  // the newline after the last data line
    event.data = data_;
  }
  event.type = event_type_.empty() ? std::string_view("message") : std::string_view(event_type_);
  event.id = last_event_id_;
  event.end_offset = offset_;
  ++dispatched_;
  on_event_(event);
  resetEvent();
}

void SseParser::spillDataLine() {
  if (!data_line_in_slice_) return;
  data_line_in_slice_ = false;
  data_.append(data_line_);
  data_.push_back('\n');
}

void SseParser::enterOversized() {
  oversized_ = true;
  data_line_in_slice_ = false;
  std::string().swap(data_);
  std::string().swap(line_);
}

void SseParser::resetEvent() {
  data_line_in_slice_ = false;
  if (data_.capacity() > kRetainedCapacity) {
    std::string().swap(data_);
  } else {
    data_.clear();
  }
  event_type_.clear();
}

bool SseParser::finish() {
  const bool partial = line_len_ > 0 || !data_.empty() || !event_type_.empty() || oversized_;
  std::string().swap(line_);
  line_len_ = 0;
  line_is_comment_ = false;
  oversized_ = false;
  after_cr_ = false;
  resetEvent();
  return partial;
}

}  // namespace sluice
