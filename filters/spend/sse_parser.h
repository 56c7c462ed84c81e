#pragma once

// An incremental `text/event-stream` parser (WHATWG HTML §9.2.6 "Interpreting
// an event stream"), for metering streamed LLM responses as they pass through.
//
// Bytes are fed in whatever slices the socket delivers: an event, a line or a
// CRLF pair may be split anywhere. Lines end in "\n", "\r\n" or "\r"; a line
// starting with ":" is a comment; `data:` lines accumulate (joined by "\n");
// `event:` sets the type, `id:` the last event ID, `retry:` the reconnection
// time; a blank line dispatches. A leading UTF-8 BOM is skipped. As the spec
// says, an event with no `data` field is not dispatched, and an event left
// unterminated when the stream ends is discarded.
//
// Memory is bounded: the parser holds at most one partial line and one event's
// fields, and never more than `max_event_bytes` of them. An event that grows
// past the cap is skipped — its fields are dropped and it is reported once,
// at its blank line, with `oversized` set — so a hostile or broken upstream
// cannot make sluice buffer a whole stream.
//
// No allocation per byte and no copies of complete lines that arrive inside
// one slice; only a line split across slices is copied, and a data line only
// when another joins it or its event is not complete when the slice ends.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

/**
 * One dispatched event. The views point into the parser's buffers and are
 * valid only during the callback; copy what must outlive it.
 */
struct SseEvent {
  /** The `event` field; "message" when the event had none (the spec's default). */
  std::string_view type;
  /** The `data` lines joined by "\n" (no trailing newline). Empty when oversized. */
  std::string_view data;
  /** The last event ID in effect when the event was dispatched ("" if none). */
  std::string_view id;
  /**
   * Stream offset just past the line break that dispatched the event: the
   * number of stream bytes (BOM included) a client must have received to have
   * this whole event. Used to map "bytes delivered" to "events delivered".
   */
  uint64_t end_offset = 0;
  /**
   * The event exceeded the size cap and was skipped: `data` is empty and
   * `type` is the `event` field if it was seen before the overflow, else "".
   */
  bool oversized = false;
};

class SseParser {
 public:
  /** One event's fields are capped at this many bytes unless told otherwise. */
  static constexpr size_t kDefaultMaxEventBytes = 1024 * 1024;

  /** Receives each dispatched event. Must not call back into the parser. */
  using EventCallback = std::function<void(const SseEvent&)>;

  /**
   * `on_event` is invoked synchronously from feed() for every dispatched event,
   * in stream order. `max_event_bytes` bounds one event's buffered fields.
   */
  explicit SseParser(EventCallback on_event, size_t max_event_bytes = kDefaultMaxEventBytes);

  SseParser(const SseParser&) = delete;
  SseParser& operator=(const SseParser&) = delete;

  /** Feeds the next slice of the stream; any size, including 0. */
  void feed(const char* data, size_t len);
  void feed(std::string_view data) { feed(data.data(), data.size()); }

  /**
   * End of stream. Per the spec a pending event without its terminating blank
   * line is discarded (a truncated event is not trustworthy). Returns true if
   * such a partial event was discarded. Further feed() calls start afresh.
   */
  bool finish();

  /** Total stream bytes fed so far (the offset of the next byte). */
  uint64_t bytesConsumed() const { return offset_; }
  /** Events delivered to the callback with `oversized == false`. */
  uint64_t eventsDispatched() const { return dispatched_; }
  /** Events skipped for exceeding the size cap (each reported once, oversized). */
  uint64_t eventsSkipped() const { return skipped_; }
  /** The last event ID buffer (persists across events, as in the spec). */
  const std::string& lastEventId() const { return last_event_id_; }
  /** The most recent valid `retry:` value in milliseconds, if any was sent. */
  std::optional<uint64_t> retryMs() const { return retry_ms_; }

 private:
  void process(const char* data, size_t len);
  void processSlice(const char* data, size_t len);
  void appendPartialLine(const char* data, size_t len);
  void processLine(std::string_view line, size_t line_len);
  void processField(std::string_view field, std::string_view value);
  void dispatch();
  /** Copies a data line still in the caller's slice into data_. */
  void spillDataLine();
  /** Bytes of the event's data buffer, with its newlines (data_line_ counted). */
  size_t dataBytes() const { return data_line_in_slice_ ? data_line_.size() + 1 : data_.size(); }
  void enterOversized();
  void resetEvent();

  EventCallback on_event_;
  const size_t max_event_bytes_;

  uint64_t offset_ = 0;
  size_t bom_matched_ = 0;  // bytes of the UTF-8 BOM seen at the stream start
  bool bom_done_ = false;
  bool after_cr_ = false;  // the previous byte was a CR: a following LF belongs to it

  std::string line_;              // a line split across slices (only while incomplete)
  size_t line_len_ = 0;           // length of the current line, even when not stored
  bool line_is_comment_ = false;  // the current line starts with ':' (never stored)
  std::string data_;              // the data buffer, each line followed by "\n"
  // The event's only data line so far while it is in the slice being fed
  // (data_ empty): not copied unless the slice ends or another line joins it.
  std::string_view data_line_;
  bool data_line_in_slice_ = false;
  bool line_in_slice_ = false;  // processLine's line points into the slice being fed
  std::string event_type_;      // the event type buffer
  bool oversized_ = false;      // skipping the rest of an oversized event

  std::string last_event_id_;
  std::optional<uint64_t> retry_ms_;
  uint64_t dispatched_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace sluice
