#pragma once

// `sluice --health-check URL` (alias `--probe`): one blocking HTTP/1.1 GET,
// for container health checks (Dockerfile HEALTHCHECK, Kubernetes exec
// probes) in an image that
// has no curl or wget. Exit status 0 when the answer is 2xx, 1 otherwise
// (refused, timed out, not HTTP, any other status), 2 for a URL it cannot use.
// Plain http:// only: the admin port it is made for speaks no TLS. Sends
// `x-sluice-admin: 1` so the same check works against any admin path.

#include <chrono>
#include <ostream>
#include <string>

namespace sluice {

/**
 * GETs `url` (http://host[:port]/path) within `timeout` (connect, send and
 * read together). Writes the status line to `out`, or why it failed to `err`.
 * Returns the process exit status described above.
 */
int checkHealth(const std::string& url, std::chrono::milliseconds timeout, std::ostream& out,
                std::ostream& err);

}  // namespace sluice
