#include "common/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace sluice {

namespace {

std::string readFile(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double bootTimeSeconds() {
  std::istringstream in(readFile("/proc/stat"));
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

double openFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

prometheus::MetricFamily singleSample(const char* name, const char* help, double value,
                                      prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

bool parseProcStat(std::string_view stat, long ticks_per_second, long page_size,
                   double boot_time_seconds, ProcessStats& out) {
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) return false;
  // Fields after "pid (comm)", numbered as in proc(5): state is field 3.
  std::istringstream in{std::string(stat.substr(close + 1))};
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(std::move(f));
  const auto field = [&](size_t number) -> std::optional<double> {
    const size_t i = number - 3;
    if (i >= fields.size()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(fields[i].c_str(), &end);
    if (end == fields[i].c_str() || *end != '\0') return std::nullopt;
    return v;
  };
  const auto utime = field(14), stime = field(15), start = field(22), vsize = field(23),
             rss = field(24);
  if (!utime || !stime || !start || !vsize || !rss) return false;
  const double tck = static_cast<double>(ticks_per_second);
  out.cpu_seconds = (*utime + *stime) / tck;
  out.start_time_seconds = boot_time_seconds + *start / tck;
  out.virtual_memory_bytes = *vsize;
  out.resident_memory_bytes = *rss * static_cast<double>(page_size);
  return true;
}

std::optional<ProcessStats> readProcessStats() {
  ProcessStats stats;
  const std::string stat = readFile("/proc/self/stat");
  if (stat.empty() || !parseProcStat(stat, ::sysconf(_SC_CLK_TCK), ::sysconf(_SC_PAGESIZE),
                                     bootTimeSeconds(), stats)) {
    return std::nullopt;
  }
  stats.open_fds = openFds();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    stats.max_fds = limit.rlim_cur == RLIM_INFINITY ? -1 : static_cast<double>(limit.rlim_cur);
  }
  return stats;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  const std::optional<ProcessStats> s = readProcessStats();
  if (!s) return {};
  return {
      singleSample("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                   s->cpu_seconds, prometheus::MetricType::Counter),
      singleSample("process_resident_memory_bytes", "Resident memory size in bytes.",
                   s->resident_memory_bytes),
      singleSample("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                   s->virtual_memory_bytes),
      singleSample("process_open_fds", "Number of open file descriptors.", s->open_fds),
      singleSample("process_max_fds", "Maximum number of open file descriptors.", s->max_fds),
      singleSample("process_start_time_seconds",
                   "Start time of the process since unix epoch in seconds.", s->start_time_seconds),
  };
}

}  // namespace sluice
