#pragma once

// How many CPUs this process may really use, for `workers: auto`.
//
// std::thread::hardware_concurrency() counts the machine's CPUs, but a
// container (docker --cpus, a Kubernetes CPU limit) or a systemd unit
// (CPUQuota=) gets a CFS quota: with 2 CPUs' worth of quota on a 64-core
// host, 64 workers would each run in short bursts and be throttled, which
// shows as latency spikes. Like Go's automaxprocs, sluice reads the quota:
//   cgroup v2: `cpu.max` ("QUOTA PERIOD" or "max PERIOD") of the process's
//              cgroup and every ancestor up to the mount, the smallest wins;
//   cgroup v1: `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 = no limit).
// The process's cgroup comes from /proc/self/cgroup and the mount point from
// /proc/self/mountinfo, so it works in a container (cgroup namespace: the
// cgroup is "/") and under systemd (/system.slice/sluice.service) alike.
// The CPU affinity mask (taskset, docker --cpuset-cpus) also bounds it.
// A fractional quota rounds down (1.5 CPUs → 1 worker), never below 1, as
// automaxprocs does: a worker more than the quota can run is throttled.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

/** A `cpu.max` value ("200000 100000") as CPUs (2.0); nullopt for "max ..." or malformed. */
std::optional<double> parseCgroupV2CpuMax(std::string_view text);

/** A v1 quota and period (µs) as CPUs; nullopt when the quota is -1 (unlimited) or malformed. */
std::optional<double> parseCgroupV1Quota(std::string_view quota_us, std::string_view period_us);

/**
 * The CPU limit of this process's cgroup, in CPUs, or nullopt when there is
 * none (or no cgroup filesystem). `root` prefixes every path read
 * (/proc/self/cgroup, /proc/self/mountinfo and the mount points they name),
 * so tests point it at a directory of fixture files; "" = the real system.
 */
std::optional<double> cgroupCpuLimit(const std::string& root = "");

/**
 * Workers for `workers: auto`: the online CPUs, bounded by the affinity mask
 * and by cgroupCpuLimit(root) rounded down; at least 1.
 */
uint32_t autoWorkerCount(const std::string& root = "");

/** The worker count to run: `configured`, or autoWorkerCount() when it is 0 (auto). */
uint32_t resolveWorkerCount(uint32_t configured);

}  // namespace sluice
