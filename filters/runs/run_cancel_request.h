#pragma once

// `DELETE /sluice/runs/{id}` on the proxy listeners (docs/design.md §9): with
// `runs.cancel_token` set, an agent's orchestrator that can reach sluice's
// listeners but not its admin port stops a run with
// `Authorization: Bearer <token>`, exactly as admin `POST /runs/{id}/cancel`
// does. With the token set the path prefix `/sluice/runs/` is sluice's: it is
// never routed upstream (a stray request there would carry the token to a
// provider). Without a token the path is not special and routes as usual.

#include <optional>
#include <string_view>

#include "common/http_message.h"
#include "common/problem.h"
#include "filters/runs/run_table.h"
#include "filters/runs/runs_config.h"

namespace sluice {

/** The path prefix sluice answers on the listeners when `runs.cancel_token` is set. */
inline constexpr std::string_view kRunCancelPrefix = "/sluice/runs/";

/**
 * `a` equals `b`, in time that depends only on `b`'s length (`b` is the
 * secret: how much of it a guess matched does not show).
 */
bool constantTimeEquals(std::string_view a, std::string_view b);

/**
 * The answer to `request` when it is sluice's run cancel (cancel_token set,
 * path under kRunCancelPrefix): 202 and the run cancelled, 401 without the
 * right token, 405 for a method other than DELETE, 400 for an invalid id.
 * nullopt when the request is not one (it is routed as usual).
 */
std::optional<LocalReply> answerRunCancelRequest(const RequestHead& request,
                                                 const config::RunsConfig& config, RunTable& table);

}  // namespace sluice
