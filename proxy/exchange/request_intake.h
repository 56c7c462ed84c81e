#pragma once

// A request's body on its way in, as one part of its Exchange: the plan
// (buffer whole so a retry can replay it, or stream it when no retry could),
// the body itself (RequestBody, counted against the process-wide cap), the
// client's upload paused and resumed around the streamed body's watermarks,
// and the bytes received. It decides; the Exchange acts (answers 413 or 503,
// starts the attempt, tells the codec to pause or resume).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/http_message.h"
#include "config/config.h"
#include "proxy/downstream/downstream_stream.h"
#include "proxy/http/request_body.h"

namespace sluice {

class RequestIntake {
 public:
  /** A streamed body held above this pauses the client's upload... */
  static constexpr uint64_t kBodyHighWatermark = 256 * 1024;
  /** ... until the upstream took it down to this. */
  static constexpr uint64_t kBodyLowWatermark = 64 * 1024;
  /**
   * Bodies up to this size are buffered whole even when no retry could
   * replay them: the filters read them (spend meter, throttle estimate) and
   * an attempt the upstream never processed can still be replayed.
   */
  static constexpr uint64_t kAlwaysBufferedBytes = 1024 * 1024;

  RequestIntake(BodyMemory* memory, uint64_t cap) : body_(memory, cap) {}

  /** Above this many bytes a body cannot be replayed by a retry of `route`: it is streamed. */
  static uint64_t streamAbove(const config::RetryConfig& retry, const RequestHead& request);

  enum class Plan {
    Ok,        // buffered whole (its room reserved) or streamed from the start, or chunked
    TooLarge,  // Content-Length above limits.max_body: 413 before reading a byte
    Refused,   // the process cannot hold it (limits.max_buffered_body_bytes): 503
  };
  /** At the request head: reads the declared length and plans the body. */
  Plan plan(const RequestHead& request, uint64_t max_body, uint64_t stream_above);

  enum class Intake {
    Held,            // buffered, still replayable
    StartStreaming,  // just passed the replay threshold: the attempt starts now
    Streamed,        // more of a streamed body
    TooLarge,        // passed limits.max_body: 413
    Refused,         // the process-wide cap refused it: 503
  };
  Intake append(const char* data, size_t len, uint64_t max_body);

  /** The request's last byte arrived. True when the client was paused (the codec must resume). */
  bool complete();
  bool requestComplete() const { return complete_; }
  /** The whole body is in and held: an attempt can send it again. */
  bool replayable() const { return complete_ && !body_.streaming() && body_.replayable(); }

  enum class Flow { Keep, Pause, Resume };
  /**
   * What the client's upload should do now: pause while a streamed body
   * holds more than the high watermark, resume below the low one. The caller
   * applies it to the codec.
   */
  Flow flow();
  /** The client is paused; clears it (the request ended, the codec reads the rest). */
  bool takeClientPaused();
  /** Applies flow() to the client's upload: pauses or resumes its codec. */
  void steer(DownstreamStream& client);

  /** The route was matched without the body and has a `match.model` glob: it is matched again. */
  void awaitModel() { awaiting_model_ = true; }
  /** The body (or a streamed body's first block) is in: the route may be matched on its model. */
  bool modelReady() const { return awaiting_model_ && (complete_ || body_.streaming()); }
  /** The body's top-level "model" (the last one, as a parse reads it; "" when none), once. */
  std::string takeModel();

  RequestBody& body() { return body_; }
  const RequestBody& body() const { return body_; }
  uint64_t bytesIn() const { return bytes_in_; }

 private:
  RequestBody body_;
  uint64_t stream_above_ = 0;
  uint64_t bytes_in_ = 0;
  bool complete_ = false;
  bool client_paused_ = false;
  bool awaiting_model_ = false;
};

/** The request's Content-Length (the codecs validated it), if it has one. */
std::optional<uint64_t> declaredContentLength(const RequestHead& request);

}  // namespace sluice
