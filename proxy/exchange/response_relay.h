#pragma once

// The response on its way out, as one part of its Exchange: a head held
// back (a filter's StopIteration, or an answer a fallback may replace) and
// its release, the response's head, body and trailers handed to the client
// connection, the SSE tail (is the stream at an event boundary?) and the one
// final error event a cut may append, downstream backpressure (when to stop
// and resume reading the upstream) and the body bytes that reached the
// client. It writes to the DownstreamStream it is handed and decides the
// rest; the Exchange acts (pauses the upstream stream, arms its timers).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/cancel_reason.h"
#include "common/http_message.h"
#include "common/problem.h"
#include "proxy/downstream/downstream_stream.h"

namespace sluice {

/**
 * Whether a client whose response is cut for `reason` is still there to read
 * a final error event: not after client_disconnect (it left) nor
 * client_stalled (it stopped reading).
 */
bool clientStillListening(CancelReason reason);

/**
 * The dialect of the final error event a response may end with: the
 * provider's SSE for an LLM API's event stream; on an MCP route, a JSON-RPC
 * error event when the stream answers a request with an id, else none.
 */
SseDialect responseDialect(std::string_view request_path, std::string_view content_type,
                           bool mcp_route, bool has_jsonrpc_id);

class ResponseRelay {
 public:
  /** A response held back: its head and at most kMaxHeldBody of its body. */
  struct Held {
    ResponseHead head;
    std::string body;
  };

  /** A new attempt: nothing held, forwarded, kept or paused for it yet. */
  void resetAttempt();

  // --- a held response ---------------------------------------------------------
  /** Holds `head` back until the attempt ends. */
  void hold(ResponseHead&& head);
  bool holding() const { return held_ != nullptr; }
  /** The held head (null while none). */
  ResponseHead* heldHead() { return held_ ? &held_->head : nullptr; }
  const ResponseHead* heldHead() const { return held_ ? &held_->head : nullptr; }
  std::string_view heldBody() const { return held_ ? std::string_view(held_->body) : ""; }
  /**
   * Adds body bytes to the held response. False when they would pass
   * kMaxHeldBody (nothing added): the response is too big to be an error
   * worth retrying, the caller releases it and streams the rest.
   */
  bool holdData(const char* data, size_t len);
  /** Takes the held response out for release. */
  std::unique_ptr<Held> takeHeld() { return std::move(held_); }
  /** The answer a retry replaces is never sent. */
  void dropHeld() { held_.reset(); }

  // --- to the client ---------------------------------------------------------------
  /** Something went to the client: no retry, fallback or problem of sluice's own can replace it. */
  bool started() const { return started_; }
  /** Sends the response's head (the caller decorated it); the body that follows is in `dialect`. */
  void sendHead(DownstreamStream& client, ResponseHead&& head, SseDialect dialect);
  /** Sends a whole reply of sluice's own (not counted as forwarded body). */
  void sendReply(DownstreamStream& client, ResponseHead&& head, std::string_view body);
  /**
   * Forwards body bytes. With `end_stream` the response ends there: after
   * the kept trailers, when there are.
   */
  void sendBody(DownstreamStream& client, const char* data, size_t len, bool end_stream);
  /**
   * Forwards body bytes of the response under way and says whether the
   * caller must stop reading the upstream until resume(): the client is
   * slower than the upstream (pauseIfClientSlow). Handing bytes over may
   * lose the client — its connection reports the disconnect from inside
   * the write (clientLeft()) —: then nothing more is asked of it, and the
   * answer is no.
   */
  bool forward(DownstreamStream& client, const char* data, size_t len);
  /** The upstream's trailers, kept for the response's end (the client takes them). */
  void keepTrailers(HeaderMap&& trailers);
  /** Ends the response: with the kept trailers when there are. */
  void end(DownstreamStream& client);

  // --- backpressure ----------------------------------------------------------------
  /**
   * The client is slower than the upstream (its connection buffers more
   * than its high watermark): true once, when the caller must stop reading
   * the upstream until resume().
   */
  bool pauseIfClientSlow(const DownstreamStream& client);
  /** The client drained: true when the upstream was paused (the caller resumes reading). */
  bool resume();
  bool paused() const { return paused_; }
  /** The attempt ended: its stream is gone with its pause. */
  void clearPaused() { paused_ = false; }

  // --- cuts and delivered bytes ------------------------------------------------------
  /**
   * The one SSE error event that may precede a cut of the response under way
   * (docs/design.md §8), or "" when none can be written: not an event stream
   * of a known dialect, the forwarded bytes end inside an event, or the
   * client cannot take it without waiting. When there is one the cut
   * delivers what is buffered first (deliveredBodyBytes counts it).
   * `jsonrpc_id`: the MCP request's id, for the Mcp dialect.
   */
  std::string finalEventFor(const DownstreamStream& client, const Problem& problem,
                            std::optional<std::string_view> jsonrpc_id);
  /** Ends the response under way truncated, after `final_event` if there is one. */
  static void cut(DownstreamStream& client, const std::string& final_event);
  /** The attempt ended without its response's end (cancel, reset, stall), or with it. */
  void markCut(bool cut) { cut_ = cut; }
  /** The client left with `still_buffered` bytes in sluice: they never reached it. */
  void clientLeft(size_t still_buffered) {
    undelivered_at_disconnect_ = still_buffered;
    client_gone_ = true;
  }
  /**
   * Response body bytes of the attempt that reached the client: what was
   * handed to the client connection, minus what was still buffered in
   * sluice when the client left (`client` null), or what a cut drops.
   */
  uint64_t deliveredBodyBytes(const DownstreamStream* client) const;
  /** Body bytes of the attempt handed to the client connection. */
  uint64_t forwardedBytes() const { return forwarded_bytes_; }

 private:
  std::unique_ptr<Held> held_;  // allocated only while holding: most attempts hold nothing
  std::unique_ptr<HeaderMap> trailers_;
  uint64_t forwarded_bytes_ = 0;
  uint64_t undelivered_at_disconnect_ = 0;
  uint32_t tail_ = 0;  // the last four forwarded body bytes: at an SSE event boundary?
  SseDialect dialect_ = SseDialect::None;
  bool started_ = false;
  bool paused_ = false;
  bool cut_ = false;
  bool cut_flushes_ = false;
  bool client_gone_ = false;  // clientLeft(): for good, whatever attempt follows
};

}  // namespace sluice
