#pragma once

// Header conversion between sluice's protocol-neutral heads and HTTP/2 name/
// value lists (RFC 9113 §8.2–8.3), for the downstream HTTP/2 server:
//   request:  `:method`, `:path`, `:authority` (→ host), `:scheme` plus
//             regular fields, cookie crumbs re-joined with "; " (§8.2.3);
//   response: `:status` plus lower-case fields, never the connection-specific
//             ones HTTP/2 forbids (§8.2.2: connection, keep-alive,
//             proxy-connection, transfer-encoding, upgrade; and te).
// nghttp2 validates what it receives; these functions only translate.

#include <nghttp2/nghttp2.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "common/http_message.h"

namespace sluice {

/** True for fields HTTP/2 forbids (RFC 9113 §8.2.2); `name` is lower-case. */
bool isHttp2ConnectionSpecificHeader(std::string_view name);

/**
 * Collects one HTTP/2 request (pseudo-headers and fields, in arrival order)
 * into a RequestHead. Feed it every field nghttp2 hands over, then finish().
 */
class Http2RequestHeadBuilder {
 public:
  /** One field as received; pseudo-headers start with ':'. */
  void add(std::string_view name, std::string_view value);
  /**
   * add() for a field nghttp2 validated (its HTTP messaging checks, which
   * Http2ServerConnection keeps on): the name has no upper-case letter, so
   * it is stored as it is, not lower-cased again. Same head as add().
   */
  void addValidated(std::string_view name, std::string_view value);
  /**
   * The request head: method, path, `host` from `:authority` (which wins over
   * a `host` field), cookies joined, version 2.0.
   */
  RequestHead finish();

  const std::string& method() const { return head_.method; }
  const std::string& scheme() const { return scheme_; }

 private:
  /** add() and addValidated(); `lower_case`: the name has no upper-case letter. */
  void addField(std::string_view name, std::string_view value, bool lower_case);

  RequestHead head_;
  std::string authority_;
  std::string scheme_;
  std::string cookie_;
  bool host_field_ = false;  // a `host` field was added (finish replaces it)
};

/**
 * True for response fields whose value is new on (nearly) every response:
 * request ids (`x-request-id`, `x-sluice-upstream-request-id`, Anthropic's
 * `request-id`: any name ending in `request-id`) and the remaining / reset
 * fields of the rate-limit families sluice reads (`x-ratelimit-remaining*`,
 * `x-ratelimit-reset*`, `anthropic-ratelimit-*-remaining` and
 * `anthropic-ratelimit-*-reset`).
 * Indexing them in HPACK's dynamic table would buy no later hit and would
 * evict the fields that do repeat; `name` is lower-case.
 */
bool isHttp2PerResponseValue(std::string_view name);

/**
 * The name/value list for `head`: `:status` first, then every field except
 * the connection-specific ones. The nv entries point into `head` and
 * `status_storage`, which must outlive the list. nghttp2 copies them (no
 * flags but NO_INDEX, see isHttp2PerResponseValue). Kept as the reference
 * for Http2ResponseNv (tests).
 */
std::vector<nghttp2_nv> toHttp2ResponseNv(const ResponseHead& head, std::string& status_storage);

/**
 * The same list as toHttp2ResponseNv, for a response whose fields and
 * status text the caller keeps until its HEADERS frame was sent (or the
 * stream closed): the entries carry NGHTTP2_NV_FLAG_NO_COPY_NAME and
 * NO_COPY_VALUE, so nghttp2 neither copies nor lower-cases each field
 * again (HeaderMap names are lower-case already). The list itself lives
 * here (on the stack for up to kInline fields): nghttp2_submit_response
 * copies the entries, not the bytes.
 *
 * Per-response values (isHttp2PerResponseValue) carry NO_INDEX unless
 * `index_per_response_values`. HPACK can only index a name together with a
 * value, and nghttp2's encoder refers to a never-indexed field's name by
 * its index when the table holds that name (else it sends the name as a
 * Huffman-coded literal). So a connection lets them be indexed now and then
 * (Http2ServerConnection: its first response and every kPerResponseReindex-th),
 * which keeps their names in the table at the cost of one entry each per
 * that many responses, instead of one per response evicting the rest.
 */
class Http2ResponseNv {
 public:
  /** Room for any int as text: where the `:status` value is written. */
  using StatusText = std::array<char, 12>;

  /** `fields` and `status_text` must stay unchanged until the frame is out. */
  Http2ResponseNv(const HeaderMap& fields, int status, StatusText& status_text,
                  bool index_per_response_values = false);

  const nghttp2_nv* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInline = 24;
  void push(const nghttp2_nv& nv) {
    if (size_ < kInline) {
      inline_[size_++] = nv;
    } else {
      spill(nv);
    }
  }
  /** The entry past kInline: the list moves to (or grows on) the heap. */
  void spill(const nghttp2_nv& nv);

  nghttp2_nv inline_[kInline];
  std::vector<nghttp2_nv> heap_;  // past kInline entries: all of them, moved here
  size_t size_ = 0;
};

}  // namespace sluice
