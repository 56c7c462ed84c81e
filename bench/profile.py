#!/usr/bin/env python3
"""Instruction counts per request of sluice under valgrind's callgrind.

    python3 bench/profile.py [--build-dir build] [--requests 2000] [--h2] [--stream] [--access-log]
    python3 bench/profile.py --stream --tokens 1000 --requests 50   # per streamed chunk
    python3 bench/profile.py --memory 1000     # massif: heap bytes per open SSE stream

Starts mock-llm and sluice (the bench's sluice.yaml: every filter on) with
sluice under callgrind, warms up, zeroes the counters, sends a fixed number
of requests with h2load (the bench's 1 KiB JSON POST), dumps and prints
instructions per request and the top functions (inclusive and self).
Instruction counts do not depend on machine load, unlike wall-clock
figures, so they compare builds on a busy machine. bench/results/PROFILE.md
records the figures.

--stream --tokens N streams N content chunks per answer at full speed (no
interval); instructions per chunk are the whole cost divided by the chunks,
so with long answers (N = 1000) the per-request part is amortised away: the
SSE per-chunk figure in PROFILE.md.

--access-log turns sluice's access log on (a file in the temp dir): the
difference to a run without it is the log's cost per request (README
"Performance"). Instructions of every thread count, the writer's included.

--quota makes every answer carry a request quota (x-mock-quota, never
exhausted), so the throttle does its full per-request work; with
--shared-state it also goes to a redis-server started here (one EVALSHA to
take a slot, one to report the answer's quota, README "Running several
replicas"): the difference of the two runs is shared state's cost per
request in sluice. Redis's own CPU is not counted (another process).

--runs configures `runs:` (header x-run-id) and sends every request as a
task of one run (x-run-id): the difference to a run without it is what runs
cost per request (bench/run --only runs runs both). --run-header sends the
same x-run-id without `runs:` configured (one more header, forwarded like
any other): the difference of --runs to it is what turning runs on costs a
client that sends the header either way.

--mcp off|on sends an MCP `tools/call` (a JSON-RPC request padded to the
same 1 KiB) to mock-llm's echo endpoint through a route with a budget and a
retry policy: with `off` a plain route (a POST like any other), with `on`
the same route with `protocol: mcp` and a tool policy (the JSON-RPC read, the tool match,
its budget, the retry decision, the answer read for the outcome, the tool
metrics): the difference of the two runs is what sluice's MCP handling costs
per tool call (bench/run --only tools runs both).

--strace runs sluice natively instead and attaches `strace -f -c` to it
for the measured requests only (after the warm-up): system calls per
request, by call.

--memory N runs sluice under valgrind's massif instead, holds N concurrent
SSE streams open through it (a chunk every 500 ms, so valgrind keeps up),
and prints the heap at its peak per stream and by allocation site: what
scenario C's RSS per stream is made of.
"""

import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def start_redis(session):
    """redis-server on a free loopback port (no persistence); returns its port."""
    port = bench.free_port()
    proc = bench.Proc("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no"], bench.LOAD_CPU, session.tmp)
    session.procs.append(proc)
    bench.wait_port(port, proc)
    return port


# The route --mcp puts before the bench's catch-all route: the same retry
# and budget both ways; `on` adds what makes it an MCP route.
TOOLS_ROUTE = """  - name: tools
    match: {path_prefix: /echo/mcp, methods: [POST]}
    upstream: mock
    budget: {default: 60s}
    retry: {attempts: 3, backoff: {base: 100ms, max: 2s}}
"""
MCP_POLICY = """    protocol: mcp
    tools:
      - {name: "search_*", budget: 30s, retry: safe}
      - {name: "*", retry: never}
    tool_retry: annotations
"""


def mcp_body(size=1024):
    """A tools/call JSON-RPC request padded to exactly `size` bytes."""
    head = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_docs","arguments":{"q":"'
    tail = '"}}}'
    return (head + "x" * (size - len(head) - len(tail)) + tail).encode()


def start_under_valgrind(session, tool, tool_args, access_log=False, redis_port=0, runs=False,
                         mcp=None):
    """mock-llm, then sluice (the bench's sluice.yaml, optionally with its
    access log on, or shared state in the redis at `redis_port`, or `runs:`) under a
    valgrind tool (or natively, tool None); returns the process and sluice's
    port once it listens."""
    session.start_mock()
    port = bench.free_port()
    cfg = bench.render("sluice.yaml", session.params("sluice", port),
                       os.path.join(session.tmp, "sluice.yaml"))
    if access_log:
        with open(cfg, "a") as f:
            f.write(f"\naccess_log: {{path: {os.path.join(session.tmp, 'access.log')}, format: json}}\n")
    if redis_port:
        # A long timeout: valgrind slows sluice ~50x, a 50 ms call would time out.
        with open(cfg, "a") as f:
            f.write(f"\nshared_state: {{redis: \"redis://127.0.0.1:{redis_port}/0\", timeout: 2s}}\n")
    if runs:
        with open(cfg, "a") as f:
            f.write("\nruns: {header: x-run-id, parent_header: x-parent-run-id}\n")
    if mcp:
        with open(cfg) as f:
            text = f.read()
        assert "  - name: default\n" in text, "the bench's sluice.yaml lost its catch-all route"
        route = TOOLS_ROUTE + (MCP_POLICY if mcp == "on" else "") + "\n"
        with open(cfg, "w") as f:
            f.write(text.replace("  - name: default\n", route + "  - name: default\n", 1))
    wrapper = ["valgrind", f"--tool={tool}"] + tool_args if tool else []
    proc = bench.Proc(f"sluice-{tool or 'native'}", wrapper + [session.sluice_bin, "--config", cfg],
                      bench.PROXY_CPU, session.tmp)
    session.procs.append(proc)
    bench.wait_port(port, proc, timeout=120)
    return proc, port


def start_peer(session, peer, tool_args):
    """mock-llm, then a peer proxy (the bench's own config for it) under
    callgrind (natively when tool_args is None); returns the process and the
    peer's port once it listens."""
    session.start_mock()
    port = bench.free_port()
    p = session.params(peer, port)
    template = {"nginx": "nginx.conf", "haproxy": "haproxy.cfg", "nghttpx": "nghttpx.conf"}[peer]
    cfg = bench.render(template, p, os.path.join(session.tmp, template))
    argv = {"nginx": ["nginx", "-c", cfg, "-e", os.path.join(session.tmp, "nginx-error.log")],
            "haproxy": ["haproxy", "-db", "-f", cfg],
            "nghttpx": ["nghttpx", "--conf", cfg]}[peer]
    wrapper = ["valgrind", "--tool=callgrind"] + tool_args if tool_args is not None else []
    proc = bench.Proc(f"{peer}-profiled", wrapper + argv, bench.PROXY_CPU, session.tmp)
    session.procs.append(proc)
    bench.wait_port(port, proc, timeout=120)
    return proc, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.environ.get("SLUICE_BUILD_DIR", "build"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--h2", action="store_true", help="clients speak h2c (4 x 32 streams)")
    ap.add_argument("--stream", action="store_true", help="streamed (SSE) answers, 10 tokens")
    ap.add_argument("--tokens", type=int, default=10, help="content chunks per streamed answer")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--access-log", action="store_true", help="with the JSON access log on (to a file)")
    ap.add_argument("--quota", action="store_true",
                    help="answers carry a request quota: the throttle's full work per request")
    ap.add_argument("--shared-state", action="store_true",
                    help="shared_state on, through a redis-server started here (implies --quota)")
    ap.add_argument("--runs", action="store_true",
                    help="runs configured, every request a task of one run (x-run-id)")
    ap.add_argument("--run-header", action="store_true",
                    help="every request carries x-run-id, runs not configured (a header like any "
                         "other): with --runs' count, what turning runs on costs")
    ap.add_argument("--mcp", choices=["off", "on"],
                    help="an MCP tools/call to the echo endpoint, plain route (off) or protocol: mcp (on)")
    ap.add_argument("--strace", action="store_true",
                    help="system calls per request (strace -f -c) instead of callgrind")
    ap.add_argument("--peer", choices=["nginx", "haproxy", "nghttpx"],
                    help="profile this peer proxy (the bench's config for it) instead of sluice, "
                         "under the same load: instructions per request to compare with sluice's")
    ap.add_argument("--memory", type=int, default=0, metavar="N",
                    help="massif: heap per stream with N concurrent SSE streams")
    args = ap.parse_args()
    if args.memory:
        return memory(args)

    session = bench.Session(args)
    out_dir = tempfile.mkdtemp(prefix="sluice-callgrind-")
    try:
        cg_out = os.path.join(out_dir, "callgrind.out")
        if args.shared_state:
            args.quota = True
        redis_port = start_redis(session) if args.shared_state else 0
        if args.peer:
            # nghttpx forks its worker even with workers=1: follow children,
            # one output file per process.
            proc, port = start_peer(session, args.peer, None if args.strace else
                                    [f"--callgrind-out-file={cg_out}.%p", "--trace-children=yes"])
        else:
            proc, port = start_under_valgrind(session, None if args.strace else "callgrind",
                                              [f"--callgrind-out-file={cg_out}"], args.access_log,
                                              redis_port, args.runs, args.mcp)
        body = os.path.join(session.tmp, "body.json")
        with open(body, "wb") as f:
            f.write(mcp_body(1024) if args.mcp else bench.json_body(args.stream, 1024))

        def load(n):
            argv = ["h2load", "-n", str(n), "-d", body]
            headers = dict(bench.COMMON_HEADERS)
            if args.stream:
                headers["x-mock-tokens"] = str(args.tokens)
            if args.quota:
                headers["x-mock-quota"] = "100000000/60000"
            if args.runs or args.run_header:
                headers["x-run-id"] = "profile-run"
            if args.mcp:
                headers["accept"] = "application/json, text/event-stream"
            for k, v in headers.items():
                argv += ["-H", f"{k}: {v}"]
            argv += (["-c", "4", "-m", "32"] if args.h2 else ["--h1", "-c", "8", "-m", "1"])
            path = "/echo/mcp" if args.mcp else "/v1/chat/completions"
            argv.append(f"http://127.0.0.1:{port}{path}")
            out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
            m = re.search(r"(\d+) succeeded", out)
            return int(m.group(1)) if m else 0

        load(200 if not args.stream or args.tokens <= 10 else 20)  # warm-up: pools, metric series, allocator
        if args.strace:
            return strace_count([str(proc.pid)] + (descendants(proc.pid) if args.peer else []),
                                load, args)
        # Only this run's processes: other callgrind runs may share the machine.
        pids = [str(proc.pid)] + (descendants(proc.pid) if args.peer else [])
        for pid in pids:
            subprocess.run(["callgrind_control", "-z", pid], capture_output=True, check=True)
        ok = load(args.requests)
        dumped_after = time.time() - 1
        for pid in pids:
            subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
        time.sleep(0.5)
        # The dumps just written; of a forking peer's processes, the one that
        # did the work (its worker).
        dumps = [d for d in glob.glob(cg_out + ".*") if os.path.getmtime(d) >= dumped_after]
        self_cost, total, dump = max((self_costs(d) + (d,) for d in dumps), key=lambda ctd: ctd[1])
        mode = (f"{args.peer}, " if args.peer else "") + ("h2c" if args.h2 else "http/1.1") + (f", SSE {args.tokens} tokens" if args.stream else ", JSON")
        if args.access_log:
            log = os.path.join(session.tmp, "access.log")
            lines = sum(1 for _ in open(log)) if os.path.exists(log) else 0
            mode += f", access log on ({lines} lines)"
        if args.runs:
            mode += ", runs on (one run)"
        elif args.run_header:
            mode += ", x-run-id sent, runs off"
        if args.mcp:
            mode += ", MCP tools/call, " + ("protocol: mcp route" if args.mcp == "on" else "plain route")
        if args.quota:
            mode += ", quota headers" + (", shared state on (redis)" if args.shared_state else "")
        print(f"requests ok: {ok}/{args.requests} ({mode})")
        print(f"instructions per request: {total / max(1, ok):,.0f}")
        if args.stream:
            print(f"instructions per content chunk (whole cost / {args.tokens} chunks per answer): "
                  f"{total / max(1, ok * args.tokens):,.0f}")
        print("\nself cost, top functions (Ir per request):")
        for name, cost in sorted(self_cost.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {cost / max(1, ok):10,.0f} {100 * cost / max(1, total):5.1f}%  {name[:160]}")
        if not args.peer:
            features = feature_costs(dump)
            spent = sum(features.values())
            print("\nwhere the instructions go (inclusive, Ir per request):")
            for name, _ in FEATURES:
                if features.get(name):
                    print(f"  {features[name] / max(1, ok):10,.0f}  {name}")
            print(f"  {spent / max(1, ok):10,.0f}  all of the above")
            print(f"  {(total - spent) / max(1, ok):10,.0f}  the rest: receiving, parsing, forwarding, "
                  "answering (compare with --peer)")
        inc = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump],
                             capture_output=True, text=True).stdout
        lines = [ln for ln in inc.splitlines() if re.match(r"\s*[\d,]+ \(\s*[\d.]+%\)", ln)]
        print("\ninclusive cost, top functions:")
        for ln in lines[1:args.top + 1]:
            print("  " + ln.strip()[:200])
        print(f"\ncallgrind output: {dump}")
    finally:
        session.close()


def descendants(pid):
    """The pids of a process's descendants (a peer's forked workers)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [c for child in out for c in [child] + descendants(child)]


def callgrind_costs(dump):
    """The cost lines of a callgrind dump, as (function, callee, cost, None):
    callee is None for a function's own cost, else the called function (the
    line after `calls=` is the call's inclusive cost). Last comes
    (None, None, 0, total): the dump's `summary:`/`totals:`, or None."""
    names, fn, cfn, after_call, summary = {}, None, None, False, None
    with open(dump) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                summary = int(line.split()[1])
            elif line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("fn="):
                    fn = names[m.group(1)]
                else:
                    cfn = names[m.group(1)]
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    yield fn, (cfn if after_call else None), int(parts[1]), None
                after_call = False
    yield None, None, 0, summary


def self_costs(dump):
    """Self cost per function of a callgrind dump, and the total.

    callgrind_annotate 3.19's --inclusive=no lists inclusive costs for these
    dumps (everything under `clone`), so the file is read here.
    """
    costs, summary = {}, None
    for fn, callee, cost, total in callgrind_costs(dump):
        if fn is None:
            summary = total
        elif callee is None:
            costs[fn] = costs.get(fn, 0) + cost
    return costs, summary if summary is not None else sum(costs.values())


# What sluice does beyond forwarding, by the functions that do it: a
# feature's cost is the inclusive cost of calls into its functions from
# functions outside every group (so nothing is counted twice).
FEATURES = [
    ("budget", r"sluice::BudgetFilter::"),
    ("circuit breaker", r"sluice::CircuitBreakerFilter::"),
    ("throttle (quota key, admission, rate-limit headers)", r"sluice::ThrottleFilter::"),
    ("retry", r"sluice::RetryFilter::"),
    ("spend (request model, response usage, pricing)", r"sluice::SpendFilter::"),
    ("filter chain construction", r"sluice::buildFilterChain"),
    ("request identity (x-request-id)", r"sluice::IdGenerator::|sluice::establishIdentity"),
    ("access log", r"sluice::AccessLog"),
    ("shared state (Redis replies)", r"sluice::SharedState|sluice::RedisClient"),
    ("runs (run filter and table)", r"sluice::RunFilter::|sluice::RunTable::"),
    ("tools (MCP: JSON-RPC envelope, tool policy, answer read, tool metrics)",
     r"sluice::ToolsFilter::|sluice::ToolRoute::|sluice::readJsonRpcRequest|sluice::ToolAnswer|"
     r"sluice::classifyToolAnswer|sluice::McpSessionTable::|sluice::ToolAnnotationTable::"),
    ("metrics outside the filters", r"prometheus::"),
]


def feature_costs(dump):
    """Inclusive cost of each FEATURES group in a callgrind dump."""
    patterns = [(name, re.compile(rx)) for name, rx in FEATURES]
    group_of = {}

    def group(fn):
        if fn not in group_of:
            group_of[fn] = next((name for name, rx in patterns if rx.search(fn)), None)
        return group_of[fn]

    costs = {}
    for fn, callee, cost, _ in callgrind_costs(dump):
        if fn is not None and callee is not None and group(callee) and group(fn) is None:
            costs[group(callee)] = costs.get(group(callee), 0) + cost
    return costs


def strace_count(pids, load, args):
    """Attaches `strace -f -c` to the running proxy (every process in `pids`:
    a peer's forked workers too) for `args.requests` requests."""
    out = os.path.join(tempfile.mkdtemp(prefix="sluice-strace-"), "strace.txt")
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", out] + [a for pid in pids for a in ("-p", pid)],
                              stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # attached to every thread before the first request
    ok = load(args.requests)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)
    with open(out) as f:
        text = f.read()
    mode = ((f"{args.peer}, " if args.peer else "") + ("h2c" if args.h2 else "http/1.1") +
            (f", SSE {args.tokens} tokens" if args.stream else ", JSON"))
    print(f"requests ok: {ok}/{args.requests} ({mode})")
    total = 0
    rows = []
    for ln in text.splitlines():
        cols = ln.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(cols) >= 5 and cols[0][0].isdigit() and cols[-1] != "total":
            calls = int(cols[3])
            errors = int(cols[4]) if len(cols) == 6 else 0
            rows.append((calls, errors, cols[-1]))
        elif cols and cols[-1] == "total":
            total = int(cols[3])
    print(f"system calls per request: {total / max(1, ok):.2f}")
    for calls, errors, name in sorted(rows, reverse=True):
        err = f" ({errors / max(1, ok):.2f} failed)" if errors else ""
        print(f"  {name:<16} {calls / max(1, ok):6.2f}{err}")
    return 0


def memory(args):
    session = bench.Session(args)
    out_dir = tempfile.mkdtemp(prefix="sluice-massif-")
    try:
        out = os.path.join(out_dir, "massif.out")
        proc, port = start_under_valgrind(session, "massif", [
            f"--massif-out-file={out}", "--threshold=0.5", "--peak-inaccuracy=0.5",
            # sluice's malloc is mimalloc's (CMakeLists.txt): massif must see it
            "--soname-synonyms=somalloc=libmimalloc.so*"])
        # Warm-up: pools, metric series, allocator arenas; then the held streams.
        bench.run_streams(port, 20, 2, 50, "mem-warm", 200, record_lateness=False)
        streams, _, _ = bench.run_streams(port, args.memory, 8, 500, "mem", 500,
                                          record_lateness=False)
        errors = sum(1 for st in streams if st.error)
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(timeout=120)
        report = subprocess.run(["ms_print", "--threshold=0.5", out], capture_output=True,
                                text=True).stdout
        # ms_print's snapshot table: n, time, total, useful-heap, extra-heap, stacks.
        snapshots = re.findall(r"^\s*\d+\s+[\d,]+\s+([\d,]+)\s+[\d,]+\s+[\d,]+\s+[\d,]+$",
                               report, re.M)
        heap = [int(x.replace(",", "")) for x in snapshots]
        print(f"streams: {args.memory} ({errors} errors)")
        if heap:
            print(f"heap (useful + extra) at the peak {max(heap) / 1024:,.0f} KiB, "
                  f"{max(heap) / args.memory / 1024:.2f} KiB per stream "
                  f"(an upper bound: sluice's own startup heap is included)")
        m = re.search(r"(\d+) \(peak\)", report)
        row = re.search(rf"^\s*{m.group(1)}\s+[\d,]+\s", report, re.M) if m else None
        print(report[row.start():row.start() + 8000] if row else report[-8000:])
        print(f"\nmassif output: {out}")
    finally:
        session.close()


if __name__ == "__main__":
    main()
