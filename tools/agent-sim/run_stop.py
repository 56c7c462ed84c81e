#!/usr/bin/env python3
"""run-stop: the demo's Stop scenario, agent runs that fan out and a user who presses Stop.

Python 3 standard library only (blocking sockets, one thread per task).

  run_stop.py run --label sluice --llm URL --mcp URL --mock URL --tools URL --admin URL --out FILE
  run_stop.py run --label direct --llm URL --mcp URL --mock URL --tools URL --out FILE
  run_stop.py report SLUICE.json DIRECT.json [--check]

Each of --runs agent runs fans out three tasks at once:

  * the orchestrator's model stream (the one the user's UI reads): a
    streamed chat completion, --tokens tokens at 50 ms each;
  * a sub-agent's model stream, the same, as a child run
    (x-run-id RUN-sub, x-parent-run-id RUN);
  * a tool call: MCP tools/call of mock-tools' write_rows, --rows rows, one
    every 100 ms, each row a side effect in mock-tools' ledger.

--stop-after seconds in, the user presses Stop on every run. Via sluice
(--admin given) that is POST /runs/{id}/cancel on sluice's admin port.
Direct, the orchestrator can only abort what it holds itself: it closes its
own model stream; the sub-agent and the tool call go on. Then every task is
read to its end, and both upstreams' ledgers say what happened after Stop:
tool rows written, tokens generated, and when the last upstream stopped.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

TOKEN_INTERVAL_MS = 50


def now_us():
    """CLOCK_MONOTONIC in microseconds: the clock of both mocks' ledgers."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def get_json(url, timeout=10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def delete(url):
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10).read()


class Task:
    """One request of a run, sent on its own connection and read to the end on a thread."""

    def __init__(self, kind, ledger_id, url, headers, body):
        self.kind, self.ledger_id = kind, ledger_id
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path
        self.headers, self.body = headers, json.dumps(body).encode()
        self.sock = None
        self.received = b""
        self.status = 0
        self.outcome = "open"
        self.aborted = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=60)
            head = [f"POST {self.path} HTTP/1.1", f"host: {self.host}:{self.port}",
                    "connection: close", f"content-length: {len(self.body)}"]
            head += [f"{k}: {v}" for k, v in self.headers.items()]
            self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + self.body)
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                self.received += data
                if self.received.endswith(b"\r\n0\r\n\r\n"):
                    break
            self.status = int(self.received.split(b" ", 2)[1]) if self.received else 0
            if self.aborted:
                self.outcome = "aborted by the orchestrator"
            elif b"run-cancelled" in self.received:
                self.outcome = "stopped by the run's cancel"
            elif self.received.endswith(b"0\r\n\r\n"):
                self.outcome = "completed"
            else:
                self.outcome = "closed early"
        except OSError as e:
            self.outcome = "aborted by the orchestrator" if self.aborted else f"error: {e}"
        finally:
            if self.sock:
                self.sock.close()

    def abort(self):
        """The orchestrator's own abort: close the socket mid-stream."""
        self.aborted = True
        if self.sock:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def plan_run(args, run_id):
    chat = {"model": "gpt-4o-mini", "stream": True,
            "messages": [{"role": "user", "content": "Plan the migration, then run it."}]}
    model_headers = {"content-type": "application/json", "authorization": "Bearer sk-demo-team",
                     "x-mock-tokens": str(args.tokens),
                     "x-mock-token-interval-ms": str(TOKEN_INTERVAL_MS)}
    main = Task("model", f"{run_id}-model", args.llm + "/v1/chat/completions",
                dict(model_headers, **{"x-run-id": run_id, "x-mock-request-id": f"{run_id}-model"}),
                chat)
    sub = Task("sub-agent", f"{run_id}-sub", args.llm + "/v1/chat/completions",
               dict(model_headers, **{"x-run-id": f"{run_id}-sub", "x-parent-run-id": run_id,
                                      "x-mock-request-id": f"{run_id}-sub"}), chat)
    tool = Task("tool", f"{run_id}-tool", args.mcp,
                {"content-type": "application/json", "accept": "application/json, text/event-stream",
                 "mcp-protocol-version": "2025-06-18", "x-run-id": run_id,
                 "x-mock-request-id": f"{run_id}-tool"},
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "write_rows", "arguments": {"table": f"orders_{run_id}",
                                                                 "rows": args.rows},
                            "_meta": {"progressToken": f"{run_id}-tool"}}})
    return main, sub, tool


def press_stop(args, run_id, tasks):
    if args.admin:
        req = urllib.request.Request(f"{args.admin}/runs/{urllib.parse.quote(run_id, safe='')}/cancel",
                                     data=b"", method="POST", headers={"x-sluice-admin": "1"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r).get("tasks_cancelled")
    tasks[0].abort()  # direct: the orchestrator holds only its own model stream
    return None


def mock_entries(mock, prefix):
    return {e["id"]: e for e in get_json(f"{mock}/_ledger")["requests"] if e["id"].startswith(prefix)}


def run(args):
    prefix = f"{args.label}-run-"
    ids = [f"{prefix}{k}" for k in range(args.runs)]
    delete(f"{args.mock}/_ledger")
    delete(f"{args.tools}/_ledger")
    if args.admin:  # sluice learns the tool's annotations from tools/list (never retried once sent)
        Task("tools/list", "", args.mcp, {"content-type": "application/json",
                                          "accept": "application/json, text/event-stream"},
             {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}).run()
    runs = {rid: plan_run(args, rid) for rid in ids}
    t_start = time.monotonic()
    for tasks in runs.values():
        for t in tasks:
            t.thread.start()
    time.sleep(max(0.0, t_start + args.stop_after - time.monotonic()))
    # What the model had generated when the user pressed Stop (read just
    # before: an upper bound on "after", by what one ledger read takes).
    at_stop = mock_entries(args.mock, prefix)
    stop_us, cancelled = {}, {}
    for rid, tasks in runs.items():
        stop_us[rid] = now_us()
        cancelled[rid] = press_stop(args, rid, tasks)
    for tasks in runs.values():
        for t in tasks:
            t.thread.join(timeout=args.tokens * TOKEN_INTERVAL_MS / 1000.0 + args.rows + 30)
    # Both mocks finalise their entries on their own threads: poll until settled.
    deadline = time.monotonic() + 5
    while True:
        final = mock_entries(args.mock, prefix)
        tools = get_json(f"{args.tools}/_ledger")
        settled = (all(e["finished_us"] for e in final.values())
                   and all(c["finished_us"] for c in tools["calls"]))
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    calls = {c["id"]: c for c in tools["calls"]}
    out = {"label": args.label, "runs": args.runs, "stop_after_s": args.stop_after,
           "tokens_per_stream": args.tokens, "rows_per_call": args.rows, "per_run": []}
    for rid, tasks in runs.items():
        t0 = stop_us[rid]
        models = [final.get(t.ledger_id) for t in tasks if t.kind != "tool"]
        call = calls.get(f"{rid}-tool")
        rows_after = sum(1 for r in tools["rows"]
                         if r["call"] == f"{rid}-tool" and r["at_us"] > t0)
        tokens_after = sum(max(0, e["tokens_emitted"] - at_stop.get(e["id"], {}).get("tokens_emitted", 0))
                           for e in models if e)
        ends = [e["finished_us"] or now_us() for e in models if e]
        if call:
            ends.append(call["finished_us"] or now_us())
        out["per_run"].append({
            "run": rid, "tasks_cancelled": cancelled[rid],
            "rows_written": call["rows_written"] if call else None, "rows_after_stop": rows_after,
            "tokens_generated": sum(e["tokens_emitted"] for e in models if e),
            "tokens_after_stop": tokens_after,
            "stop_to_last_upstream_byte_ms": max(0, max(ends, default=t0) - t0) / 1000.0,
            "outcomes": {t.kind: t.outcome for t in tasks},
            "missing": [t.ledger_id for t in tasks if t.ledger_id not in final and t.ledger_id not in calls]})
    per = out["per_run"]
    out["rows_after_stop"] = sum(p["rows_after_stop"] for p in per)
    out["rows_after_stop_max_per_call"] = max(p["rows_after_stop"] for p in per)
    out["tokens_after_stop"] = sum(p["tokens_after_stop"] for p in per)
    out["tokens_after_stop_max_per_run"] = max(p["tokens_after_stop"] for p in per)
    lat = [p["stop_to_last_upstream_byte_ms"] for p in per]
    out["stop_to_last_upstream_byte_ms"] = {"median": statistics.median(lat), "max": max(lat)}
    return out


def fmt_ms(ms):
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.1f} ms"


def report(s, d, check):
    rows = [
        ("agent runs, each: model stream + sub-agent stream + tool call", s["runs"], d["runs"]),
        ("Stop pressed after", f"{s['stop_after_s']:g} s", f"{d['stop_after_s']:g} s"),
        ("how", "POST /runs/{id}/cancel", "orchestrator closes its stream"),
        ("tool rows written after Stop (all runs)", s["rows_after_stop"], d["rows_after_stop"]),
        ("  most for one tool call", s["rows_after_stop_max_per_call"], d["rows_after_stop_max_per_call"]),
        ("tokens generated after Stop (all runs)", s["tokens_after_stop"], d["tokens_after_stop"]),
        ("Stop -> last upstream byte, median run", fmt_ms(s["stop_to_last_upstream_byte_ms"]["median"]),
         fmt_ms(d["stop_to_last_upstream_byte_ms"]["median"])),
        ("Stop -> last upstream byte, slowest run", fmt_ms(s["stop_to_last_upstream_byte_ms"]["max"]),
         fmt_ms(d["stop_to_last_upstream_byte_ms"]["max"])),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"  {'':<{w}}  {'via sluice':>24}  {'direct':>30}")
    for name, a, b in rows:
        print(f"  {name:<{w}}  {str(a):>24}  {str(b):>30}")
    kinds = {}
    for label, res in (("via sluice", s), ("direct", d)):
        for p in res["per_run"]:
            for kind, outcome in p["outcomes"].items():
                kinds.setdefault((label, kind), set()).add(outcome)
    print("\n  how each task ended:")
    for (label, kind), outcomes in sorted(kinds.items()):
        print(f"    {label:<10} {kind:<9} {', '.join(sorted(outcomes))}")
    if not check:
        return 0
    failed = []
    # One row may be in flight at Stop: due in the same moment the cancel
    # crosses loopback (the tool writes one every 100 ms).
    if s["rows_after_stop_max_per_call"] > 1:
        failed.append(f"via sluice a tool call wrote {s['rows_after_stop_max_per_call']} rows after Stop "
                      "(at most the one in flight allowed)")
    # The model ledger is read just before Stop: a token in flight per stream.
    if s["tokens_after_stop_max_per_run"] > 2:
        failed.append(f"via sluice a run generated {s['tokens_after_stop_max_per_run']} tokens after Stop "
                      "(at most one per stream allowed)")
    if s["stop_to_last_upstream_byte_ms"]["max"] >= 1000:
        failed.append("via sluice an upstream still worked 1 s after Stop")
    missing = [m for p in s["per_run"] + d["per_run"] for m in p["missing"]]
    if missing:
        failed.append(f"tasks missing from the ledgers: {missing[:5]}")
    if not d["rows_after_stop"] > s["rows_after_stop"]:
        failed.append("direct wrote no more rows after Stop than via sluice: the scenario did not run")
    for f in failed:
        print(f"run-stop: CHECK FAILED: {f}", file=sys.stderr)
    if failed:
        return 1
    print(f"  check: via sluice {s['rows_after_stop_max_per_call']} row(s) per tool call and "
          f"{s['tokens_after_stop_max_per_run']} tokens per run after Stop, every upstream idle "
          f"{fmt_ms(s['stop_to_last_upstream_byte_ms']['max'])} after it: ok")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="run-stop", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run the scenario once and write its numbers as JSON")
    p.add_argument("--label", required=True, help="prefixes every run id and ledger id")
    p.add_argument("--llm", required=True, help="base URL of the model API (sluice or mock-llm)")
    p.add_argument("--mcp", required=True, help="the MCP endpoint (sluice's /mcp route or mock-tools' /mcp)")
    p.add_argument("--mock", required=True, help="mock-llm's base URL, for its /_ledger")
    p.add_argument("--tools", required=True, help="mock-tools' base URL, for its /_ledger")
    p.add_argument("--admin", default="", help="sluice's admin base URL: Stop cancels the run there; "
                   "without it Stop closes the orchestrator's own stream only")
    p.add_argument("--runs", type=int, default=6, help="agent runs (default 6)")
    p.add_argument("--stop-after", type=float, default=1.5, help="seconds until Stop (default 1.5)")
    p.add_argument("--tokens", type=int, default=120, help="tokens per model stream (default 120, 50 ms each)")
    p.add_argument("--rows", type=int, default=50, help="rows per tool call (default 50, 100 ms each)")
    p.add_argument("--out", required=True)
    p = sub.add_parser("report", help="print the side-by-side table")
    p.add_argument("via_sluice")
    p.add_argument("direct")
    p.add_argument("--check", action="store_true", help="exit 1 unless sluice stopped every task")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        result = run(args)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.out)
        return 0
    with open(args.via_sluice) as f:
        s = json.load(f)
    with open(args.direct) as f:
        d = json.load(f)
    return report(s, d, args.check)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
