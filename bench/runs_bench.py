"""The `runs` scenario of bench/bench.py (bench/run --only runs): what runs cost.

  cancel fan-out   one run with `tasks` SSE streams in flight through sluice
                   (HTTP/1.1 to mock-llm, one upstream connection each); the
                   admin's POST /runs/{id}/cancel; the time from just before
                   that call to the moment mock-llm saw each upstream socket
                   close (its ledger's peer_closed_us, the same
                   CLOCK_MONOTONIC). Per repeat the last of the `tasks`
                   closes; p50 / p99 over the repeats.
  callgrind        bench/profile.py's HTTP/1.1 JSON request (the A′ request)
                   with runs off and on (`runs:` configured, every request a
                   task of a run): instructions per request, and the ratio.
  flood            `flood_ids` requests, each with a new x-run-id, through a
                   sluice with `runs.max_runs` = `max_runs` in front of the
                   static nginx upstream (A′'s): RSS after a warm-up without
                   run ids, after `max_runs` ids (the table full) and after
                   the whole flood. The table's share is the growth; bounded
                   means it stops growing once full.

Python standard library only; uses bench.py's Session and helpers.
"""

import os
import re
import selectors
import socket
import statistics
import subprocess
import sys
import time

import bench

# The documented bound on what one run costs in sluice's table (README
# "Runs", docs/guide/runs.md): the flood's growth per run is held against it.
RUN_BYTES_DOCUMENTED = 1024


def runs_config(max_runs):
    return ("runs:\n  header: x-run-id\n  parent_header: x-parent-run-id\n"
            f"  max_runs: {max_runs}\n")


def admin_cancel(admin_port, run_id):
    """POST /runs/{id}/cancel on a connection opened beforehand; returns the
    CLOCK_MONOTONIC µs just before the request's bytes were sent, and the
    answer's status line."""
    with socket.create_connection(("127.0.0.1", admin_port), timeout=10) as s:
        req = (f"POST /runs/{run_id}/cancel HTTP/1.1\r\nhost: 127.0.0.1:{admin_port}\r\n"
               "x-sluice-admin: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").encode()
        t0 = bench.now_us()
        s.sendall(req)
        answer = b""
        while b"\r\n" not in answer:
            data = s.recv(4096)
            if not data:
                break
            answer += data
    status = answer.split(b"\r\n", 1)[0]
    if b" 202 " not in status and b" 200 " not in status:
        raise RuntimeError(f"runs: the cancel answered {status!r}")
    return t0


def open_streams(port, run_id, n, timeout_s=20.0, first=0):
    """n SSE streams of run `run_id` (mock request ids `run_id`-`first`…),
    slow (a token per 50 ms, far more tokens than the repeat lasts); returns
    the sockets once every one has its response headers."""
    sel = selectors.DefaultSelector()
    socks, pending = [], {}
    body = bench.json_body(True, 256)
    for i in range(first, first + n):
        s = socket.socket()
        s.connect(("127.0.0.1", port))
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                f"content-type: application/json\r\nauthorization: Bearer sk-bench\r\n"
                f"x-run-id: {run_id}\r\nx-mock-request-id: {run_id}-{i}\r\n"
                f"x-mock-tokens: 100000\r\nx-mock-token-interval-ms: 50\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        s.sendall(head + body)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
        pending[i] = b""
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(0.1):
            i = key.data
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            if i in pending:
                pending[i] += data
                if b"\r\n\r\n" in pending[i] or not data:
                    if not pending[i].startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(f"runs: stream {i} answered {pending[i][:60]!r}")
                    del pending[i]
    sel.close()
    if pending:
        raise RuntimeError(f"runs: {len(pending)} of {n} streams got no headers")
    return socks


def cancel_fanout(session, tags, tasks, repeats):
    """`tasks` streams of one run spread evenly over the replicas `tags`
    (one: the one-process fan-out); the cancel goes to the first one's admin
    port. The time to the last upstream socket closed at the mock."""
    admin = session.peers[tags[0]]["admin_port"]
    last, per_task, admin_call = [], [], []
    for r in range(repeats):
        run_id = f"fanout-{r}-{time.monotonic_ns()}"
        socks, first = [], 0
        for k, tag in enumerate(tags):
            n = tasks // len(tags) + (1 if k < tasks % len(tags) else 0)
            socks += open_streams(session.port(tag), run_id, n, first=first)
            first += n
        t0 = admin_cancel(admin, run_id)
        admin_call.append(bench.now_us() - t0)
        # The bench keeps off the mock while the cancel runs: one ledger query
        # costs the single-threaded mock ~1 ms, and a query made at once held
        # up the very closes it was waiting for (up to half the measured
        # time). The closes are stamped by the mock, so reading them 50 ms
        # later changes nothing else; a slower cancel is still polled for.
        time.sleep(0.05)
        deadline = time.monotonic() + 10
        while True:
            entries = session.ledger(run_id + "-")
            closed = [e["peer_closed_us"] for e in entries.values() if e["peer_closed_us"]]
            if len(closed) == tasks or time.monotonic() > deadline:
                break
            time.sleep(0.02)  # the bench polling the mock's ledger, not a test
        for s in socks:
            s.close()
        if len(closed) < tasks:
            raise RuntimeError(f"runs: {tasks - len(closed)} of {tasks} upstream streams still open "
                               "10 s after the cancel")
        lat = [c - t0 for c in closed]
        last.append(max(lat))
        per_task += lat
        session.clear_ledger()
    return {"tasks": tasks, "repeats": repeats,
            "last_close_p50_us": bench.pct(last, 50), "last_close_p99_us": bench.pct(last, 99),
            "last_close_max_us": max(last), "per_task_p50_us": bench.pct(per_task, 50),
            "per_task_p99_us": bench.pct(per_task, 99),
            "admin_call_p50_us": bench.pct(admin_call, 50)}


def pubsub_rtt(redis_port, n):
    """PUBLISH on one connection to the message read at a subscriber on
    another, n times one at a time (after 20 to warm up): what a cancel's
    crossing between replicas takes at least. Microseconds."""
    def resp(*args):
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    lat = []
    with socket.create_connection(("127.0.0.1", redis_port), timeout=10) as sub, \
            socket.create_connection(("127.0.0.1", redis_port), timeout=10) as pub:
        for c in (sub, pub):
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sub.sendall(resp(b"SUBSCRIBE", b"bench-rtt"))
        buf = b""
        while b"subscribe" not in buf or not buf.endswith(b"\r\n"):
            buf += sub.recv(4096)
        for i in range(n + 20):
            tag = b"m-%d" % i
            t0 = time.perf_counter_ns()
            pub.sendall(resp(b"PUBLISH", b"bench-rtt", tag))
            got = b""
            while tag + b"\r\n" not in got:
                chunk = sub.recv(4096)
                if not chunk:
                    raise RuntimeError("runs: redis closed the subscriber")
                got += chunk
            t1 = time.perf_counter_ns()
            answer = b""
            while not answer.endswith(b"\r\n"):
                answer += pub.recv(64)
            if i >= 20:
                lat.append((t1 - t0) / 1000.0)
    return {"samples": len(lat), "p50_us": bench.pct(lat, 50), "p99_us": bench.pct(lat, 99)}


def fleet_cancel(session, tasks, repeats, rtt_n):
    """Three replicas with shared_state on one redis-server, a run's tasks
    spread over them, the cancel on the first: the cancel fan-out across the
    fleet, next to the measured pub/sub round trip."""
    redis_port, _ = session.start_redis()
    shared = (f'shared_state: {{redis: "redis://127.0.0.1:{redis_port}/0", prefix: "bench:", '
              f'timeout: {bench.R_REDIS_TIMEOUT}}}\n')
    tags = []
    try:
        for i in range(3):
            tags.append(session.start_peer("sluice", f"-fleet{i}", extra_config=runs_config(100000) + shared))
        def up(tag):
            try:
                return bench.scrape_metrics(session.peers[tag]["admin_port"]).get("sluice_shared_state_up") == 1
            except OSError:  # the admin listener not yet open
                return False

        deadline = time.monotonic() + 20
        while not all(up(t) for t in tags):
            if time.monotonic() > deadline:
                raise RuntimeError("runs: the replicas' shared state is not up after 20 s")
            time.sleep(0.05)  # the bench waiting for start-up, not a test
        out = cancel_fanout(session, tags, tasks, repeats)
        out["replicas"] = len(tags)
        out["pubsub"] = pubsub_rtt(redis_port, rtt_n)
        return out
    finally:
        for t in tags:
            session.stop_peer(t)


def callgrind(build_dir, requests):
    """Instructions per request of the A′ request, runs off and on (bench/profile.py)."""
    out = {}
    for mode, extra in (("off", []), ("on", ["--runs"])):
        argv = [sys.executable, os.path.join(bench.ROOT, "bench", "profile.py"), "--build-dir", build_dir,
                "--requests", str(requests), "--top", "0"] + extra
        text = subprocess.run(argv, capture_output=True, text=True, timeout=1800).stdout
        m = re.search(r"instructions per request: ([\d,]+)", text)
        if not m:
            raise RuntimeError(f"runs: bench/profile.py {' '.join(extra)} printed no count:\n{text[-2000:]}")
        out[f"ir_per_request_{mode}"] = int(m.group(1).replace(",", ""))
        runs_ir = re.search(r"^\s*([\d,]+)\s+runs \(run filter", text, re.M)
        if mode == "on" and runs_ir:
            out["ir_in_runs_code"] = int(runs_ir.group(1).replace(",", ""))
    out["ir_ratio"] = out["ir_per_request_on"] / out["ir_per_request_off"]
    return out


def wrk_flood(session, tag, duration, tmp, prefix):
    """wrk, 32 connections, one thread: the A′ POST, each request a new run id."""
    lua = os.path.join(tmp, f"flood-{prefix}.lua")
    body = bench.json_body(False).decode()
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\n')
        f.write("wrk.body = '%s'\n" % body)
        for k, v in bench.COMMON_HEADERS.items():
            f.write('wrk.headers["%s"] = "%s"\n' % (k, v))
        if prefix:
            f.write("local n = 0\nrequest = function()\n  n = n + 1\n"
                    f'  wrk.headers["x-run-id"] = "{prefix}-" .. n\n'
                    "  return wrk.format()\nend\n")
    url = f"http://127.0.0.1:{session.port(tag)}/v1/chat/completions"
    out = bench.run_cmd(["wrk", "-t1", "-c32", f"-d{duration}s", "-s", lua, url], duration + 30)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return total, int(non2xx.group(1)) if non2xx else 0


def flood(session, tag, flood_ids, max_runs, chunk_s, tmp):
    pid = session.pid(tag)
    wrk_flood(session, tag, 1, tmp, "")  # warm-up without run ids: pools, buffers, metric series
    base = bench.rss_kib(pid)
    sent, errors, chunk, samples, rss_full = 0, 0, 0, [], None
    t0 = time.monotonic()
    while sent < flood_ids:
        n, e = wrk_flood(session, tag, chunk_s, tmp, f"flood{chunk}")
        sent, errors, chunk = sent + n, errors + e, chunk + 1
        rss = bench.rss_kib(pid)
        samples.append((sent, rss))
        if rss_full is None and sent >= max_runs:
            rss_full = rss
        bench.log(f"runs flood: {sent:,} distinct run ids, RSS {rss:,} KiB (base {base:,})")
    end = bench.rss_kib(pid)
    per_run = (rss_full - base) * 1024 / max_runs
    return {"max_runs": max_runs, "run_ids": sent, "errors": errors, "seconds": time.monotonic() - t0,
            "rss_base_kib": base, "rss_full_kib": rss_full, "rss_end_kib": end,
            "ids_when_full": next(s for s, _ in samples if s >= max_runs),
            "bytes_per_run": per_run, "growth_after_full_kib": end - rss_full,
            "bound_kib": base + max_runs * RUN_BYTES_DOCUMENTED / 1024,
            "documented_bytes_per_run": RUN_BYTES_DOCUMENTED, "samples": samples}


def run(session, smoke, work, build_dir):
    """The whole scenario; returns its results (bench.py's results["runs"])."""
    tasks, repeats = (10, 2) if smoke else (100, 50)
    max_runs, flood_ids, chunk_s = (1000, 3000, 1) if smoke else (100000, 1000000, 2)
    res = {"smoke": smoke,
           "params": {"tasks": tasks, "repeats": repeats, "max_runs": max_runs, "flood_ids": flood_ids}}
    tag = session.start_peer("sluice", "-runs", extra_config=runs_config(max_runs))
    try:
        res["cancel"] = cancel_fanout(session, [tag], tasks, repeats)
        c = res["cancel"]
        bench.log(f"runs cancel: {tasks} tasks, last upstream close p50 {c['last_close_p50_us']}us "
                  f"p99 {c['last_close_p99_us']}us (admin call p50 {c['admin_call_p50_us']}us)")
    finally:
        session.stop_peer(tag)
    res["fleet_cancel"] = fleet_cancel(session, tasks, 2 if smoke else 30, 200 if smoke else 2000)
    fc = res["fleet_cancel"]
    bench.log(f"runs fleet cancel: {tasks} tasks over {fc['replicas']} replicas, last upstream close "
              f"p50 {fc['last_close_p50_us']}us p99 {fc['last_close_p99_us']}us; pub/sub round trip "
              f"p50 {fc['pubsub']['p50_us']:.0f}us p99 {fc['pubsub']['p99_us']:.0f}us")
    res["load_average"] = os.getloadavg()
    if session.static_port is None:
        session.start_static_upstream()
    tag = session.start_peer("sluice", "-flood", upstream_port=session.static_port,
                             extra_config=runs_config(max_runs))
    try:
        res["flood"] = flood(session, tag, flood_ids, max_runs, chunk_s, work)
    finally:
        session.stop_peer(tag)
    if smoke:
        res["callgrind"] = None  # valgrind's start-up alone outlasts a smoke run
    else:
        res["callgrind"] = callgrind(build_dir, 2000)
        bench.log(f"runs callgrind: {res['callgrind']}")
    return res


def fleet_bound_us(fc):
    """The across-replicas target: one pub/sub round trip (its measured p99) + 5 ms."""
    return fc["pubsub"]["p99_us"] + 5000


def evaluate(r):
    c, f, cg, fc = r["cancel"], r["flood"], r.get("callgrind"), r.get("fleet_cancel")
    bounded = f["rss_end_kib"] <= f["bound_kib"]
    ok = (c["tasks"] >= 100 and c["last_close_p99_us"] <= 5000 and bounded
          and (cg is None or cg["ir_ratio"] <= 1.05)
          and (fc is None or fc["last_close_p99_us"] <= fleet_bound_us(fc)))
    cg_text = ("callgrind not run (smoke)" if cg is None else
               f"Ir per request on / off {cg['ir_per_request_on']:,} / {cg['ir_per_request_off']:,} = "
               f"{cg['ir_ratio']:.3f}×")
    return {"target": f"a run cancel reaches all {c['tasks']} in-flight tasks: p99 admin call → last upstream "
                      "socket closed ≤ 5 ms (100 tasks); CPU per request with runs on ≤ 1.05× off "
                      f"(callgrind); {f['run_ids']:,} distinct run ids keep RSS ≤ base + max_runs × "
                      f"{RUN_BYTES_DOCUMENTED} B",
            "result": f"p99 {c['last_close_p99_us']:,} µs (p50 {c['last_close_p50_us']:,}); "
                      + (f"across {fc['replicas']} replicas p99 {fc['last_close_p99_us']:,} µs against "
                         f"{fleet_bound_us(fc):,.0f} (pub/sub round trip p99 {fc['pubsub']['p99_us']:,.0f} "
                         "+ 5 ms); " if fc else "") + f"{cg_text}; "
                      f"RSS {f['rss_end_kib']:,} KiB after the flood, bound {f['bound_kib']:,.0f} KiB "
                      f"({f['bytes_per_run']:.0f} B per run while filling, "
                      f"{f['growth_after_full_kib']:+,} KiB after the table was full)",
            "verdict": "met" if ok and not r.get("smoke") else ("MISSED" if not ok else "–")}


def fleet_report(fc):
    ps = fc["pubsub"]
    return [f"Across replicas: {fc['replicas']} sluice replicas with `shared_state` on one redis-server, "
            f"one run's {fc['tasks']} SSE streams spread evenly over them, the cancel on the first "
            f"replica's admin port ({fc['repeats']} repeats); the peers cut their tasks when the "
            f"published cancel reaches them. Pub/sub round trip: PUBLISH on one connection to the "
            f"message read at a subscriber on another ({ps['samples']} one at a time).", "",
            "| last of the tasks closed p50 µs | p99 µs | max µs | per task p50 µs | per task p99 µs | "
            "pub/sub round trip p50 µs | p99 µs | target: round trip p99 + 5 ms |",
            "|---|---|---|---|---|---|---|---|",
            f"| {bench.fmt(fc['last_close_p50_us'])} | {bench.fmt(fc['last_close_p99_us'])} | "
            f"{bench.fmt(fc['last_close_max_us'])} | {bench.fmt(fc['per_task_p50_us'])} | "
            f"{bench.fmt(fc['per_task_p99_us'])} | {ps['p50_us']:,.0f} | {ps['p99_us']:,.0f} | "
            f"{fleet_bound_us(fc):,.0f} |", ""]


def report(r):
    c, f, cg, p = r["cancel"], r["flood"], r.get("callgrind"), r["params"]
    lines = ["", f"## runs. One run's cancel, runs' CPU, a flood of run ids", "",
             f"Cancel fan-out: one run with {c['tasks']} SSE streams in flight through sluice (HTTP/1.1 "
             f"upstream, a connection each), then `POST /runs/{{id}}/cancel` on the admin port; the time "
             f"from just before that call until mock-llm saw each upstream socket close "
             f"({c['repeats']} repeats):", "",
             "| last of the tasks closed p50 µs | p99 µs | max µs | per task p50 µs | per task p99 µs | "
             "admin call p50 µs |", "|---|---|---|---|---|---|",
             f"| {bench.fmt(c['last_close_p50_us'])} | {bench.fmt(c['last_close_p99_us'])} | "
             f"{bench.fmt(c['last_close_max_us'])} | {bench.fmt(c['per_task_p50_us'])} | "
             f"{bench.fmt(c['per_task_p99_us'])} | {bench.fmt(c['admin_call_p50_us'])} |", ""]
    fc = r.get("fleet_cancel")
    if fc:
        lines += fleet_report(fc)
    if cg:
        lines += [f"callgrind, the A′ request (HTTP/1.1 1 KiB JSON POST, every filter on), runs off / on "
                  f"(`runs:` configured, every request a task of one run, 8 in flight): "
                  f"{cg['ir_per_request_off']:,} / {cg['ir_per_request_on']:,} Ir per request = "
                  f"**{cg['ir_ratio']:.3f}×**"
                  + (f" ({cg['ir_in_runs_code']:,} Ir in the run filter and table)"
                     if cg.get("ir_in_runs_code") else ""), ""]
    else:
        lines += ["callgrind: not run (smoke).", ""]
    lines += [f"Flood: {f['run_ids']:,} requests, each a new `x-run-id`, `runs.max_runs: {f['max_runs']:,}`, "
              f"static nginx upstream, wrk 32 connections, {f['seconds']:.0f} s, non-2xx {f['errors']}:", "",
              "| RSS KiB, warm, no run ids | when the table was full | after the flood | bytes per run "
              "while filling | growth after full | bound (base + max_runs × "
              f"{f['documented_bytes_per_run']} B) |", "|---|---|---|---|---|---|",
              f"| {f['rss_base_kib']:,} | {f['rss_full_kib']:,} (at {f['ids_when_full']:,} ids) | "
              f"{f['rss_end_kib']:,} | {f['bytes_per_run']:.0f} | {f['growth_after_full_kib']:+,} KiB | "
              f"{f['bound_kib']:,.0f} KiB |"]
    return lines


def cancel_only():
    """`python3 bench/runs_bench.py [--build-dir build] [--out DIR]`: only the
    two cancel measurements (one process, and across three replicas), for a
    quick re-run; writes cancel.json and cancel.md (with the load average)."""
    import argparse
    import json
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.environ.get("SLUICE_BUILD_DIR", "build"))
    ap.add_argument("--out", default=os.path.join(bench.ROOT, "bench", "results", "runs"))
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--fleet-repeats", type=int, default=30)
    args = ap.parse_args()
    session = bench.Session(args)
    load_before = os.getloadavg()
    try:
        session.start_mock()
        tag = session.start_peer("sluice", "-runs", extra_config=runs_config(100000))
        try:
            one = cancel_fanout(session, [tag], args.tasks, args.repeats)
        finally:
            session.stop_peer(tag)
        fleet = fleet_cancel(session, args.tasks, args.fleet_repeats, 2000)
    finally:
        session.close()
    load_after = os.getloadavg()
    res = {"cancel": one, "fleet_cancel": fleet, "load_average_before": load_before,
           "load_average_after": load_after,
           "commit": subprocess.run(["git", "-C", bench.ROOT, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cancel.json"), "w") as f:
        json.dump(res, f, indent=2)
    c = one
    lines = [f"# Runs: a run's cancel, one process and across replicas ({res['commit']})", "",
             f"Load average (1 / 5 / 15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)}, "
             f"after: {' / '.join(f'{x:.2f}' for x in load_after)} (2-core machine shared with other "
             "sessions).", "",
             f"One process: one run with {c['tasks']} SSE streams in flight, `POST /runs/{{id}}/cancel` "
             f"on the admin port, the time from just before that call until mock-llm saw each "
             f"upstream socket close ({c['repeats']} repeats):", "",
             "| last of the tasks closed p50 µs | p99 µs | max µs | per task p50 µs | per task p99 µs | "
             "admin call p50 µs |", "|---|---|---|---|---|---|",
             f"| {bench.fmt(c['last_close_p50_us'])} | {bench.fmt(c['last_close_p99_us'])} | "
             f"{bench.fmt(c['last_close_max_us'])} | {bench.fmt(c['per_task_p50_us'])} | "
             f"{bench.fmt(c['per_task_p99_us'])} | {bench.fmt(c['admin_call_p50_us'])} |", ""]
    lines += fleet_report(fleet)
    with open(os.path.join(args.out, "cancel.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    cancel_only()
