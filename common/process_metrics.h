#pragma once

// The standard `process_*` metrics every Prometheus client library exports
// (the Go and Python clients' process collector), read from /proc when
// /metrics is scraped: nothing is sampled in the background and nothing
// runs per request. Linux only; elsewhere the families are simply absent.
//
//   process_cpu_seconds_total        user + system CPU time
//   process_resident_memory_bytes    RSS
//   process_virtual_memory_bytes     virtual memory size
//   process_open_fds                 entries in /proc/self/fd
//   process_max_fds                  RLIMIT_NOFILE (soft)
//   process_start_time_seconds       Unix time the process started

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <optional>
#include <string_view>
#include <vector>

namespace sluice {

/** One reading of the process's resource usage. */
struct ProcessStats {
  double cpu_seconds = 0;
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double start_time_seconds = 0;
  double open_fds = 0;
  double max_fds = 0;
};

/**
 * Fills the /proc/self/stat part of `out` (CPU, memory, start time) from
 * that file's text. `ticks_per_second` is sysconf(_SC_CLK_TCK), `page_size`
 * sysconf(_SC_PAGESIZE), `boot_time_seconds` the `btime` line of /proc/stat.
 * False when the text is not a stat line (the command name in parentheses
 * may hold spaces and parentheses: fields are counted from the last ')').
 */
bool parseProcStat(std::string_view stat, long ticks_per_second, long page_size,
                   double boot_time_seconds, ProcessStats& out);

/** Reads this process's stats from /proc; nullopt when /proc is not there. */
std::optional<ProcessStats> readProcessStats();

/** A prometheus Collectable producing the six process_* families on each Collect(). */
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace sluice
