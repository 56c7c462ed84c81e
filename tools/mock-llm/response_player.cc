#include "tools/mock-llm/response_player.h"

#include <algorithm>

namespace mockllm {

void applyMark(LedgerEntry& e, MarkKind kind, int64_t count, int64_t now_us) {
  switch (kind) {
    case MarkKind::kHeaders:
      e.headers_sent_us = now_us;
      break;
    case MarkKind::kTokens:
      e.tokens_emitted += count;
      e.last_token_us = now_us;
      break;
    case MarkKind::kUsage:
      e.usage_reported = true;
      break;
    case MarkKind::kEnd:
      e.completed = true;
      e.finished_us = now_us;
      break;
  }
}

ResponsePlayer::ResponsePlayer(ResponsePlan& plan, bool head_request, ResponseSink& sink)
    : plan_(plan), head_request_(head_request), sink_(sink) {}

void ResponsePlayer::start() {
  const int64_t stall = plan_.stall_before_headers_ms;
  if (stall > 0) {
    sink_.armTimer(std::chrono::milliseconds(stall));
  } else if (stall == 0) {
    afterStall();
  }
  // stall < 0: never answer; only the peer leaving (or stop) ends this.
}

void ResponsePlayer::onTimer() {
  switch (phase_) {
    case Phase::kStallBeforeHeaders:
      afterStall();
      break;
    case Phase::kGenerating:
      generate();
      break;
    case Phase::kEnded:
      break;
  }
}

void ResponsePlayer::onDrained() {
  if (!awaiting_drain_ || phase_ != Phase::kGenerating) return;
  awaiting_drain_ = false;
  generate();
}

void ResponsePlayer::end(Ending how) {
  phase_ = Phase::kEnded;
  sink_.end(how);
}

void ResponsePlayer::afterStall() {
  if (plan_.garbage) {
    end(Ending::kGarbage);
    return;
  }
  if (plan_.sse) {
    sink_.sendHead();
    if (plan_.close_after_headers) {
      end(Ending::kCloseAfterHeaders);
      return;
    }
    for (const SsePiece& piece : plan_.sse->prologue()) {
      sink_.sendBody(piece.text);
      if (piece.carries_usage) sink_.addMark(MarkKind::kUsage);
    }
  }
  phase_ = Phase::kGenerating;
  generate();
}

void ResponsePlayer::generate() {
  const ResponsePlan& p = plan_;
  while (true) {
    const int64_t i = next_token_;
    if (i == p.stall_after_tokens && !stall_done_) {
      stall_done_ = true;
      if (p.stall_ms < 0) return;  // stalled for good: only the peer leaving ends it
      if (p.stall_ms > 0) {
        sink_.armTimer(std::chrono::milliseconds(p.stall_ms));
        return;
      }
    }
    if (i == p.reset_after_tokens) {
      end(Ending::kReset);
      return;
    }
    if (i >= p.tokens) {
      finishBody();
      return;
    }
    if (p.sse) {
      sink_.sendBody(p.sse->token(i));
      sink_.addMark(MarkKind::kTokens, 1);
      next_token_ = i + 1;
    } else if (p.token_interval.count() > 0) {
      next_token_ = i + 1;
    } else {
      // Non-streaming and untimed: jump to the next scripted event.
      int64_t next = p.tokens;
      if (!stall_done_ && p.stall_after_tokens > i) next = std::min(next, p.stall_after_tokens);
      if (p.reset_after_tokens > i) next = std::min(next, p.reset_after_tokens);
      next_token_ = next;
      continue;
    }
    if (next_token_ < p.tokens && p.token_interval.count() > 0) {
      sink_.armTimer(p.token_interval);
      return;
    }
    if (sink_.unsentBytes() > kHighWater) {
      awaiting_drain_ = true;
      return;
    }
  }
}

void ResponsePlayer::finishBody() {
  const ResponsePlan& p = plan_;
  if (p.sse) {
    for (const SsePiece& piece : p.sse->epilogue()) {
      sink_.sendBody(piece.text);
      if (piece.carries_usage) sink_.addMark(MarkKind::kUsage);
    }
  } else {
    sink_.sendHead();
    if (p.close_after_headers) {
      end(Ending::kCloseAfterHeaders);
      return;
    }
    if (!head_request_) sink_.sendBody(p.body);
    if (p.tokens > 0) sink_.addMark(MarkKind::kTokens, p.tokens);
    if (p.usage_in_body) sink_.addMark(MarkKind::kUsage);
  }
  end(Ending::kComplete);
}

}  // namespace mockllm
