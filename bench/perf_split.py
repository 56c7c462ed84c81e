#!/usr/bin/env python3
"""Where each proxy's CPU goes under A′'s load: kernel against user time, and
the user time by shared object and by function, in µs per request.

A′ (bench/bench.py, `--only P`) reports one number per proxy, the CPU per
request. This splits it, so a ratio can be explained: how much of the gap
is the kernel's TCP (the same work in every proxy), how much the proxy's own
code, its event library, its allocator. It runs A′'s setup (the static
nginx upstream, the proxy pinned to CPU 0, wrk on CPU 1, 32 connections,
1 KiB JSON POST with every sluice feature exercised) with `perf record -e
cpu-clock` attached to the proxy's processes, and scales perf's sample
shares by the CPU time /proc reports for the same seconds.

    python3 bench/perf_split.py [--seconds 5] [--rounds 2] [--top 12] [--peers sluice,haproxy,nginx]

Needs `perf` (Debian's linux-perf) and what bench/run installs (wrk, nginx,
haproxy). Per-symbol figures below ~0.05 µs are within sampling noise.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def perf_shares(data, sort):
    """perf report's sample shares (percent) by `sort` (dso or dso,sym)."""
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio",
                          "--percent-limit", "0"], capture_output=True, text=True).stdout
    shares = []
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"\s*([\d.]+)%\s+(.*)$", line)
        if m:
            shares.append((float(m.group(1)), m.group(2).strip()))
    return shares


def dso_group(dso, proxy_binary):
    if dso == "[kernel.kallsyms]":
        return "kernel"
    if dso == proxy_binary:
        return "the proxy's own code"
    if dso.startswith("libevent"):
        return "libevent"
    if dso.startswith("libmimalloc"):
        return "allocator (mimalloc)"
    if dso.startswith("libc.so"):
        return "libc (memcpy, malloc, syscall stubs)"
    if dso.startswith("libnghttp2"):
        return "nghttp2"
    if dso.startswith("libprometheus"):
        return "prometheus-cpp"
    return "other"


def measure(session, peer, seconds, work, out_dir):
    tag = session.start_peer(peer, "-perf", upstream_port=session.static_port)
    try:
        bench.scenario_a(session, tag, 2, work, connections=32, upstream=session.static)  # warm
        pids = bench.process_tree(session.pid(tag))
        data = os.path.join(out_dir, f"{peer}.data")
        u0, s0 = bench.cpu_user_sys(session.pid(tag))
        rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", data,
                                "-p", ",".join(str(p) for p in pids), "--", "sleep", str(seconds + 1)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        res = bench.scenario_a(session, tag, seconds, work, connections=32, upstream=session.static)
        u1, s1 = bench.cpu_user_sys(session.pid(tag))
        rec.wait()
    finally:
        session.stop_peer(tag)
    n = max(1, res["requests"])
    binary = {"sluice": "sluice", "nginx": "nginx", "haproxy": "haproxy", "nghttpx": "nghttpx"}[peer]
    # perf's samples cover the wrk run plus its ramp; shares are what is used.
    cpu_us = res["proxy_cpu_us_per_req"]
    groups = collections.Counter()
    for pct, dso in perf_shares(data, "dso"):
        groups[dso_group(dso, binary)] += pct
    total_pct = sum(groups.values()) or 100.0
    syms = []
    for pct, rest in perf_shares(data, "dso,sym"):
        parts = rest.split(None, 2)
        if len(parts) == 3 and parts[1] == "[.]":
            syms.append((pct, parts[0], parts[2]))
    return {
        "rps": res["rps"], "cpu_us": cpu_us,
        "proc_user_us": (u1 - u0) * 1e6 / n, "proc_sys_us": (s1 - s0) * 1e6 / n,
        "groups": {g: cpu_us * p / total_pct for g, p in groups.items()},
        "user_syms": [(cpu_us * p / total_pct, dso, sym) for p, dso, sym in syms],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("SLUICE_BUILD_DIR", "build"))
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--peers", default="sluice,haproxy,nginx")
    args = ap.parse_args()
    peers = args.peers.split(",")
    session = bench.Session(types.SimpleNamespace(build_dir=args.build_dir))
    out_dir = tempfile.mkdtemp(prefix="sluice-perf-split-")
    runs = collections.defaultdict(list)
    try:
        session.start_mock()
        session.start_static_upstream()
        work = os.path.join(session.tmp, "work")
        os.makedirs(work)
        for r in range(args.rounds):
            for p in peers[r % len(peers):] + peers[:r % len(peers)]:
                runs[p].append(measure(session, p, args.seconds, work, out_dir))
                x = runs[p][-1]
                bench.log(f"round {r + 1} {p}: {x['rps']:.0f} req/s, {x['cpu_us']:.1f} µs/req "
                          f"(kernel {x['groups'].get('kernel', 0):.1f})")
    finally:
        session.close()

    def avg(p, f):
        return sum(f(x) for x in runs[p]) / len(runs[p])
    groups = sorted({g for p in peers for x in runs[p] for g in x["groups"]},
                    key=lambda g: (g != "kernel", -avg(peers[0], lambda x: x["groups"].get(g, 0))))
    print(f"\nA′ load, µs of CPU per request (mean of {args.rounds} rounds; perf sample shares "
          f"scaled by /proc's CPU time):\n")
    print("| | " + " | ".join(peers) + " |")
    print("|---|" + "---|" * len(peers))
    print("| req/s | " + " | ".join(f"{avg(p, lambda x: x['rps']):,.0f}" for p in peers) + " |")
    print("| CPU per request | " + " | ".join(f"**{avg(p, lambda x: x['cpu_us']):.2f}**" for p in peers) + " |")
    print("| /proc user / sys | " + " | ".join(
        f"{avg(p, lambda x: x['proc_user_us']):.2f} / {avg(p, lambda x: x['proc_sys_us']):.2f}" for p in peers) + " |")
    for g in groups:
        print(f"| {g} | " + " | ".join(f"{avg(p, lambda x: x['groups'].get(g, 0)):.2f}" for p in peers) + " |")
    for p in peers:
        acc = collections.Counter()
        for x in runs[p]:
            for us, dso, sym in x["user_syms"]:
                acc[(dso, sym)] += us / len(runs[p])
        print(f"\n{p}: top user-space functions, µs per request")
        for (dso, sym), us in acc.most_common(args.top):
            print(f"  {us:6.3f}  {sym[:90]}  [{dso}]")
    print(f"\nperf data: {out_dir}")


if __name__ == "__main__":
    main()
