#include "proxy/server/cpu_limit.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace sluice {

namespace {

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::optional<int64_t> parseInt(std::string_view s) {
  s = trim(s);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(
        s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

/** A cgroup hierarchy this process is in: where it is mounted and the process's directory. */
struct CgroupDir {
  std::string mount_point;  // with the test root prefixed
  std::string dir;          // mount_point + the process's cgroup below the mount's root
};

/**
 * Finds the directory of this process's cgroup in the hierarchy whose
 * /proc/self/cgroup line satisfies `is_line` and whose mountinfo entry
 * satisfies `is_mount` (fstype, super options).
 */
template <class LineFn, class MountFn>
std::optional<CgroupDir> findCgroupDir(const std::string& root, const std::string& cgroup_file,
                                       const std::string& mountinfo, LineFn is_line,
                                       MountFn is_mount) {
  std::optional<std::string_view> cgroup_path;
  for (std::string_view line : split(cgroup_file, '\n')) {
    const auto fields = split(line, ':');  // id:controllers:path (the path may hold ':')
    if (fields.size() < 3) continue;
    if (is_line(fields[0], fields[1])) {
      const size_t path_start = fields[0].size() + fields[1].size() + 2;
      cgroup_path = trim(line.substr(path_start));
      break;
    }
  }
  if (!cgroup_path) return std::nullopt;
  for (std::string_view line : split(mountinfo, '\n')) {
    const size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const auto before = split(line.substr(0, dash), ' ');
    const auto after = split(line.substr(dash + 3), ' ');
    if (before.size() < 5 || after.size() < 3 || !is_mount(after[0], trim(after[2]))) continue;
    const std::string_view mount_root = before[3];
    std::string_view relative = *cgroup_path;
    if (mount_root != "/" && relative.substr(0, mount_root.size()) == mount_root) {
      relative.remove_prefix(mount_root.size());
    } else if (mount_root != "/") {
      relative = "/";  // the mount shows only our own part of the tree
    }
    CgroupDir out;
    out.mount_point = root + std::string(before[4]);
    out.dir = out.mount_point + (relative == "/" ? "" : std::string(relative));
    return out;
  }
  return std::nullopt;
}

/** The smallest limit `read(dir)` finds from `d.dir` up to its mount point. */
template <class ReadFn>
std::optional<double> smallestUpTheTree(const CgroupDir& d, ReadFn read) {
  std::optional<double> best;
  std::string dir = d.dir;
  for (;;) {
    if (const std::optional<double> limit = read(dir))
      best = best ? std::min(*best, *limit) : *limit;
    if (dir.size() <= d.mount_point.size()) return best;
    dir = dir.substr(0, dir.rfind('/'));
    if (dir.size() < d.mount_point.size()) dir = d.mount_point;
  }
}

bool hasOption(std::string_view options, std::string_view option) {
  const auto list = split(options, ',');
  return std::find(list.begin(), list.end(), option) != list.end();
}

}  // namespace

std::optional<double> parseCgroupV2CpuMax(std::string_view text) {
  const auto parts = split(trim(text), ' ');
  if (parts.size() != 2 || parts[0] == "max") return std::nullopt;
  const auto quota = parseInt(parts[0]);
  const auto period = parseInt(parts[1]);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> parseCgroupV1Quota(std::string_view quota_us, std::string_view period_us) {
  const auto quota = parseInt(quota_us);
  const auto period = parseInt(period_us);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> cgroupCpuLimit(const std::string& root) {
  const auto cgroup_file = readFile(root + "/proc/self/cgroup");
  const auto mountinfo = readFile(root + "/proc/self/mountinfo");
  if (!cgroup_file || !mountinfo) return std::nullopt;

  std::optional<double> limit;
  const auto keep = [&](std::optional<double> found) {
    if (found) limit = limit ? std::min(*limit, *found) : *found;
  };
  const auto v2 = findCgroupDir(
      root, *cgroup_file, *mountinfo,
      [](std::string_view id, std::string_view controllers) {
        return id == "0" && controllers.empty();
      },
      [](std::string_view fstype, std::string_view) { return fstype == "cgroup2"; });
  if (v2) {
    keep(smallestUpTheTree(*v2, [](const std::string& dir) -> std::optional<double> {
      const auto text = readFile(dir + "/cpu.max");
      return text ? parseCgroupV2CpuMax(*text) : std::nullopt;
    }));
  }
  const auto v1 = findCgroupDir(
      root, *cgroup_file, *mountinfo,
      [](std::string_view, std::string_view controllers) { return hasOption(controllers, "cpu"); },
      [](std::string_view fstype, std::string_view options) {
        return fstype == "cgroup" && hasOption(options, "cpu");
      });
  if (v1) {
    keep(smallestUpTheTree(*v1, [](const std::string& dir) -> std::optional<double> {
      const auto quota = readFile(dir + "/cpu.cfs_quota_us");
      const auto period = readFile(dir + "/cpu.cfs_period_us");
      return quota && period ? parseCgroupV1Quota(*quota, *period) : std::nullopt;
    }));
  }
  return limit;
}

uint32_t autoWorkerCount(const std::string& root) {
  uint32_t cpus = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (root.empty() && sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    cpus = std::min(cpus, static_cast<uint32_t>(CPU_COUNT(&set)));
  }
  if (const std::optional<double> limit = cgroupCpuLimit(root)) {
    cpus = std::min(cpus, static_cast<uint32_t>(std::max(1.0, std::floor(*limit))));
  }
  return std::max(1u, cpus);
}

uint32_t resolveWorkerCount(uint32_t configured) {
  return configured > 0 ? configured : autoWorkerCount();
}

}  // namespace sluice
