#!/usr/bin/env python3
"""Instruction counts per request of sluice under valgrind's callgrind.

    python3 bench/profile.py [--build-dir build] [--requests 2000] [--h2] [--stream]

Starts mock-llm and sluice (the bench's sluice.yaml: every filter on) with
sluice under callgrind, warms up, zeroes the counters, sends a fixed number
of requests with h2load (the bench's 1 KiB JSON POST), dumps and prints
instructions per request and the top functions (inclusive and self).
Instruction counts do not depend on machine load, unlike wall-clock
figures, so they compare builds on a busy machine. bench/results/PROFILE.md
records the figures.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.environ.get("SLUICE_BUILD_DIR", "build"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--h2", action="store_true", help="clients speak h2c (4 x 32 streams)")
    ap.add_argument("--stream", action="store_true", help="streamed (SSE) answers, 10 tokens")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    session = bench.Session(args)
    out_dir = tempfile.mkdtemp(prefix="sluice-callgrind-")
    try:
        session.start_mock()
        port = bench.free_port()
        cfg = bench.render("sluice.yaml", session.params("sluice", port),
                           os.path.join(session.tmp, "sluice.yaml"))
        cg_out = os.path.join(out_dir, "callgrind.out")
        proc = bench.Proc("sluice-callgrind", [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_out}",
            session.sluice_bin, "--config", cfg], bench.PROXY_CPU, session.tmp)
        session.procs.append(proc)
        bench.wait_port(port, proc, timeout=120)
        body = os.path.join(session.tmp, "body.json")
        with open(body, "wb") as f:
            f.write(bench.json_body(args.stream, 1024))

        def load(n):
            argv = ["h2load", "-n", str(n), "-d", body]
            headers = dict(bench.COMMON_HEADERS)
            if args.stream:
                headers["x-mock-tokens"] = "10"
            for k, v in headers.items():
                argv += ["-H", f"{k}: {v}"]
            argv += (["-c", "4", "-m", "32"] if args.h2 else ["--h1", "-c", "8", "-m", "1"])
            argv.append(f"http://127.0.0.1:{port}/v1/chat/completions")
            out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
            m = re.search(r"(\d+) succeeded", out)
            return int(m.group(1)) if m else 0

        load(200)  # warm-up: pools, metric series, allocator
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
        ok = load(args.requests)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        time.sleep(0.5)
        dumps = sorted(glob.glob(cg_out + ".*"), key=os.path.getmtime)
        dump = dumps[-1]
        ann = subprocess.run(["callgrind_annotate", "--inclusive=no", dump],
                             capture_output=True, text=True).stdout
        total = int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", ann).group(1).replace(",", ""))
        mode = ("h2c" if args.h2 else "http/1.1") + (", SSE 10 tokens" if args.stream else ", JSON")
        print(f"requests ok: {ok}/{args.requests} ({mode})")
        print(f"instructions per request: {total / max(1, ok):,.0f}")
        lines = [ln for ln in ann.splitlines() if re.match(r"\s*[\d,]+ \(\s*[\d.]+%\)", ln)]
        print("\nself cost, top functions:")
        for ln in lines[1:args.top + 1]:
            print("  " + ln.strip()[:200])
        inc = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump],
                             capture_output=True, text=True).stdout
        lines = [ln for ln in inc.splitlines() if re.match(r"\s*[\d,]+ \(\s*[\d.]+%\)", ln)]
        print("\ninclusive cost, top functions:")
        for ln in lines[1:args.top + 1]:
            print("  " + ln.strip()[:200])
        print(f"\ncallgrind output: {dump}")
    finally:
        session.close()


if __name__ == "__main__":
    main()
