#pragma once

// Plays one ResponsePlan out over time, the same way for every protocol:
// stall before the headers, SSE prologue, one event per token (paced by the
// token interval, paused by a mid-stream stall, cut by a scripted reset),
// epilogue — or, for a JSON answer, the head and body after the simulated
// generation time. Framing, buffering, timers and the ledger's "handed to the
// socket" bookkeeping belong to the ResponseSink: an HTTP/1.1 connection or an
// HTTP/2 stream. Keeping the script in one place is what makes an h2 stream
// behave exactly like an HTTP/1.1 request.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tools/mock-llm/ledger.h"
#include "tools/mock-llm/router.h"

namespace mockllm {

/**
 * A ledger event that is true once the output written before it has left the
 * mock (was handed to the socket, or to the TLS layer).
 */
enum class MarkKind { kHeaders, kTokens, kUsage, kEnd };

/** Records mark `kind` (with `count` tokens for kTokens) in `entry` at `now_us`. */
void applyMark(LedgerEntry& entry, MarkKind kind, int64_t count, int64_t now_us);

/** How the script ends; the sink turns it into its protocol's terms. */
enum class Ending {
  kComplete,           // the whole response was written: end it normally
  kCloseAfterHeaders,  // x-mock-close-after-headers: nothing after the head
  kReset,              // x-mock-reset-after-tokens: break the response here
  kGarbage,            // x-mock-garbage: answer with bytes that are not the protocol
};

/** Where a ResponsePlayer writes: one response's framing, buffers and timer. */
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;

  /** Writes the response head (status and headers) and marks kHeaders when it leaves. */
  virtual void sendHead() = 0;
  /** Writes body bytes (one SSE event, or the whole JSON body). */
  virtual void sendBody(std::string_view data) = 0;
  /** Records `kind` in the ledger once everything written so far has left the mock. */
  virtual void addMark(MarkKind kind, int64_t count = 0) = 0;
  /** Output written but not yet taken by the transport: the player pauses above 64 KiB. */
  virtual size_t unsentBytes() const = 0;
  /** Calls ResponsePlayer::onTimer() after `delay` (replacing any earlier arming). */
  virtual void armTimer(std::chrono::milliseconds delay) = 0;
  /**
   * The script is over. The sink finishes the response as `how` says. It must
   * not destroy the player from inside this call.
   */
  virtual void end(Ending how) = 0;
};

/** The script of one response. Owned by its sink's owner, next to the plan. */
class ResponsePlayer {
 public:
  /** Output above this many unsent bytes pauses token generation until a drain. */
  static constexpr size_t kHighWater = 64 * 1024;

  /** `plan` must outlive the player; `head_request` suppresses the JSON body (HEAD). */
  ResponsePlayer(ResponsePlan& plan, bool head_request, ResponseSink& sink);

  /** Starts the script: the stall before headers, or the answer right away. */
  void start();
  /** The sink's timer fired. */
  void onTimer();
  /** The sink's output drained after the player paused on kHighWater. */
  void onDrained();
  /** True while paused until the sink's output drains. */
  bool awaitingDrain() const { return awaiting_drain_; }

 private:
  enum class Phase { kStallBeforeHeaders, kGenerating, kEnded };

  void afterStall();
  void generate();
  void finishBody();
  void end(Ending how);

  ResponsePlan& plan_;
  const bool head_request_;
  ResponseSink& sink_;
  Phase phase_ = Phase::kStallBeforeHeaders;
  int64_t next_token_ = 0;
  bool stall_done_ = false;
  bool awaiting_drain_ = false;
};

}  // namespace mockllm
