#include "common/attempt.h"

namespace sluice {

std::string causeLabel(const AttemptOutcome& outcome) {
  switch (outcome.kind) {
    case OutcomeKind::Status:
      return std::to_string(outcome.status);
    case OutcomeKind::ConnectError:
      return "connect_error";
    case OutcomeKind::Reset:
      return "reset";
    case OutcomeKind::Timeout:
      return "timeout";
    case OutcomeKind::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

}  // namespace sluice
