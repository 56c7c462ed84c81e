#pragma once

// The header half of an HTTP/1.1 message: llhttp and http-parser hand a header's
// name and value over in fragments (on_header_field / on_header_value, as
// many calls as the bytes arrived in), so a pair is only known complete when
// the next name starts or the head ends (on_headers_complete). Every
// HTTP/1.1 codec that sluice (llhttp), mock-llm and the tests (http-parser) build
// accumulates the same way; this is that accumulation, once.
//
// Header-only and standard-library-only on purpose: mock-llm (tools/) does not
// link sluice_core. Each user commits into its own header type: anything with
// `add(name, value)` (HeaderMap) or a callable sink (mock-llm's HeaderList).
// Limits on header count and size stay with the callers: they differ, and so
// does what a caller does when one is hit.

#include <string>
#include <string_view>
#include <type_traits>

namespace sluice {

/** One message's header name/value fragments, committed a whole pair at a time. */
class Http1HeaderAccumulator {
 public:
  /**
   * Commits the pending pair, if a value has started since the name did, to
   * `sink`: `sink(std::string& name, std::string& value)` (which may move
   * from both) or else `sink.add(name, value)`; then forgets it. True if a
   * pair was committed: the caller checks its header-count cap then.
   */
  template <typename Sink>
  bool flush(Sink&& sink) {
    if (!in_value_) return false;
    if constexpr (std::is_invocable_v<Sink&, std::string&, std::string&>) {
      sink(field_, value_);
    } else {
      sink.add(field_, value_);
    }
    field_.clear();
    value_.clear();
    in_value_ = false;
    return true;
  }

  /** on_header_field: a fragment of a name (a new name once a value has started). */
  void appendField(std::string_view fragment) { field_.append(fragment); }

  /** on_header_value: a fragment of the current name's value. */
  void appendValue(std::string_view fragment) {
    in_value_ = true;
    value_.append(fragment);
  }

  /** on_header_field without a cap to check in between: flush, then the new fragment. */
  template <typename Sink>
  void onField(std::string_view fragment, Sink&& sink) {
    flush(sink);
    appendField(fragment);
  }

  /** Forgets a half-received pair (a new message starts). */
  void reset() {
    field_.clear();
    value_.clear();
    in_value_ = false;
  }

 private:
  std::string field_;
  std::string value_;
  bool in_value_ = false;  // a value fragment arrived since the name's: the pair is pending
};

}  // namespace sluice
