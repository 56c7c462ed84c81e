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
      keepBorrowed();
      sink(field_, value_);
    } else {
      sink.add(name(), value());
    }
    field_.clear();
    value_.clear();
    field_borrowed_ = value_borrowed_ = false;
    in_value_ = false;
    return true;
  }

  /** on_header_field: a fragment of a name (a new name once a value has started). */
  void appendField(std::string_view fragment) {
    keepField();
    field_.append(fragment);
  }

  /** on_header_value: a fragment of the current name's value. */
  void appendValue(std::string_view fragment) {
    in_value_ = true;
    keepValue();
    value_.append(fragment);
  }

  /**
   * appendField() without a copy while the name is one fragment: the
   * fragment is only referred to, so it must stay valid until the pair is
   * flushed or keepBorrowed() is called (sluice's codecs call it after every
   * llhttp_execute, before the parsed bytes are drained). A name and value
   * that arrive whole in one read are then copied once, into the sink,
   * instead of twice (PROFILE.md, sixth round).
   */
  void borrowField(std::string_view fragment) {
    if (!field_borrowed_ && field_.empty()) {
      field_view_ = fragment;
      field_borrowed_ = true;
      return;
    }
    appendField(fragment);
  }

  /** appendValue() as borrowField() is appendField(). */
  void borrowValue(std::string_view fragment) {
    in_value_ = true;
    if (!value_borrowed_ && value_.empty()) {
      value_view_ = fragment;
      value_borrowed_ = true;
      return;
    }
    appendValue(fragment);
  }

  /** Copies borrowed fragments in: the bytes they point at may go now. */
  void keepBorrowed() {
    keepField();
    keepValue();
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
    field_borrowed_ = value_borrowed_ = false;
    in_value_ = false;
  }

 private:
  std::string_view name() const { return field_borrowed_ ? field_view_ : field_; }
  std::string_view value() const { return value_borrowed_ ? value_view_ : value_; }
  void keepField() {
    if (!field_borrowed_) return;
    field_.assign(field_view_);
    field_borrowed_ = false;
  }
  void keepValue() {
    if (!value_borrowed_) return;
    value_.assign(value_view_);
    value_borrowed_ = false;
  }

  std::string field_;
  std::string value_;
  std::string_view field_view_;  // the name while borrowed (field_ is empty then)
  std::string_view value_view_;  // the value while borrowed (value_ is empty then)
  bool field_borrowed_ = false;
  bool value_borrowed_ = false;
  bool in_value_ = false;  // a value fragment arrived since the name's: the pair is pending
};

}  // namespace sluice
