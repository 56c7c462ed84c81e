#!/usr/bin/env python3
"""Checks dashboards/ against a real sluice, a real mock-llm and a real Prometheus.

Run through scripts/test-dashboards (which installs prometheus/promtool and
python3 when missing). No Docker needed. Steps:

  1. static: the Grafana JSON (datasource, variables, ids, metric names that
     exist in common/metrics.cc), `sluice --check-config` on the compose config,
     `promtool check rules`, `promtool check config` on a loopback version of
     the scrape config;
  2. starts mock-llm and sluice on port 0 (reading the ports they print) and a
     Prometheus on a free loopback port scraping sluice's admin /metrics every 1s;
  3. drives a short workload through sluice with curl: streams, an aborted
     stream, a 429 then a retry, a failing upstream that opens the circuit;
  4. once Prometheus has scraped the workload, evaluates every panel target and
     every alert expression through /api/v1/query: each must be valid and
     return at least one series (alerts: with their threshold turned into a
     `bool` comparison, so a quiet alert still proves its series exist).
     Expressions over the spend meter's families are only checked for
     validity and reported as SKIP until the meter is wired (SPEND_NOT_WIRED, empty now that it is wired).

Prints one line per check and finally `N passed, M failed`; exits 1 on any failure.
Leaves nothing running.
"""

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("SLUICE_BUILD_DIR", "build"))
SLUICE_BIN = os.path.join(BUILD, "sluice")
MOCK_BIN = os.path.join(BUILD, "tools", "mock-llm")
DASHBOARD = os.path.join(ROOT, "dashboards", "sluice.json")
SCRAPE_CONFIG = os.path.join(ROOT, "dashboards", "prometheus.yml")
ALERTS = os.path.join(ROOT, "dashboards", "alerts.yml")
COMPOSE_SLUICE = os.path.join(ROOT, "dashboards", "compose-sluice.yaml")
METRICS_CC = os.path.join(ROOT, "common", "metrics.cc")

# Metric families the spend meter fills. It is not wired into the response path
# yet (README "Status"), so they have no series: expressions over them are only
# checked for validity. Delete entries from this list once the meter is wired.
SPEND_NOT_WIRED: list = []  # the spend meter is wired: every spend query must return series

# Grafana variables, replaced by what "All" means for the dashboard's queries.
GRAFANA_VARS = {
    "instance": ".*",
    "route": ".*",
    "upstream": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}

DEADLINE = time.monotonic() + 110  # whole test, well under 2 minutes

passed = 0
failed = 0
skipped = 0


def ok(name):
    global passed
    passed += 1
    print(f"PASS {name}", flush=True)


def fail(name, why):
    global failed
    failed += 1
    print(f"FAIL {name}: {why}", flush=True)


def check(cond, name, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why)
    return cond


def remaining(cap):
    return max(0.1, min(cap, DEADLINE - time.monotonic()))


# --- processes ----------------------------------------------------------------

PROCS = []


class Proc:
    """A child whose stdout+stderr lines are collected by a reader thread."""

    def __init__(self, name, argv, logdir):
        self.name = name
        self.lines = queue.Queue()
        self.log = open(os.path.join(logdir, f"{name}.log"), "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                  start_new_session=True)
        PROCS.append(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern, timeout):
        """Returns the first regex match among the output lines, or None."""
        end = time.monotonic() + remaining(timeout)
        rx = re.compile(pattern)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            m = rx.search(line)
            if m:
                return m

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        # The reader may still be copying the child's last lines: let it end
        # (the pipe's write end closed with the child) before closing its log.
        self.reader.join(timeout=10)
        self.log.close()


def stop_all():
    while PROCS:
        PROCS.pop().stop()


def dump_log(proc):
    try:
        with open(proc.log.name) as f:
            tail = f.readlines()[-30:]
        print(f"--- last lines of {proc.name} ---\n" + "".join(tail), file=sys.stderr)
    except OSError:
        pass


# --- HTTP -----------------------------------------------------------------------

def http_get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def curl(args, timeout=15):
    r = subprocess.run(["curl", "-sS", "--max-time", str(timeout)] + args,
                       capture_output=True, text=True, timeout=timeout + 5)
    return r


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- static checks ----------------------------------------------------------------

def metric_names():
    with open(METRICS_CC) as f:
        # Registered families (.Name("…")) and the ones Metrics::serialize builds (.name = "…").
        return set(re.findall(r'(?:\.Name\(|\.name = )"(sluice_[a-z_]+)"', f.read()))


def referenced_families(expr):
    out = set()
    for name in re.findall(r"\bsluice_[a-z_]+", expr):
        out.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return out


def dashboard_targets(dash):
    out = []

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            for t in p.get("targets", []):
                out.append((p["title"], t.get("refId", "?"), t["expr"]))
    walk(dash["panels"])
    return out


def check_dashboard():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    check(35 <= dash.get("schemaVersion", 0) <= 41, "dashboard: schemaVersion ~39",
          f"schemaVersion={dash.get('schemaVersion')}")
    tvars = {v["name"]: v for v in dash["templating"]["list"]}
    check({"DS_PROMETHEUS", "instance", "route", "upstream"} <= tvars.keys(),
          "dashboard: variables DS_PROMETHEUS, instance, route, upstream", f"have {sorted(tvars)}")
    ds = tvars.get("DS_PROMETHEUS", {})
    check(ds.get("type") == "datasource" and ds.get("query") == "prometheus"
          and ds.get("current", {}).get("value") == "prometheus",
          "dashboard: DS_PROMETHEUS is a prometheus datasource variable (uid prometheus)", json.dumps(ds))
    bad_ds = []
    ids = []
    for p in dash["panels"]:
        ids.append(p["id"])
        if p["type"] == "row":
            continue
        for obj in [p] + p.get("targets", []):
            d = obj.get("datasource", {})
            if d.get("type") != "prometheus" or d.get("uid") != "${DS_PROMETHEUS}":
                bad_ds.append(p["title"])
    check(not bad_ds, "dashboard: every panel and target uses ${DS_PROMETHEUS}", f"{sorted(set(bad_ds))}")
    check(len(ids) == len(set(ids)), "dashboard: panel ids unique", f"{ids}")
    known = metric_names()
    targets = dashboard_targets(dash)
    unknown = sorted({n for _, _, e in targets for n in referenced_families(e)} - known)
    check(not unknown, "dashboard: every metric exists in common/metrics.cc", f"unknown {unknown}")
    used = {n for _, _, e in targets for n in referenced_families(e)}
    required = {"sluice_requests_total", "sluice_request_duration_seconds", "sluice_cancellations_total",
                "sluice_leaked_spend_usd_total", "sluice_tokens_total", "sluice_circuit_state",
                "sluice_ratelimit_remaining", "sluice_throttle_queue_depth", "sluice_retries_total",
                "sluice_cancel_propagation_seconds", "sluice_upstream_attempts_total",
                "sluice_time_to_first_byte_seconds", "sluice_downstream_rejections_total",
                "sluice_config_reloads_total"}
    check(required <= used, "dashboard: covers the required metric families", f"missing {sorted(required - used)}")
    unfiltered = sorted({f"{t} {r}" for t, r, e in targets if '$instance' not in e})
    check(not unfiltered, "dashboard: every target honours the instance selector", f"{unfiltered}")
    exprs = [e for _, _, e in targets]
    check(all(f"histogram_quantile({q}," in " ".join(exprs) for q in ("0.5", "0.95", "0.99")),
          "dashboard: latency p50/p95/p99 panels")
    return targets


def alert_rules():
    """(name, expr) from alerts.yml via promtool's own parser output is not
    available, so read the YAML the simple way: expr is a one-line scalar or a
    `>-` folded block."""
    rules = []
    with open(ALERTS) as f:
        lines = f.read().splitlines()
    i = 0
    name = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*- alert:\s*(\S+)", line)
        if m:
            name = m.group(1)
        m = re.match(r"(\s*)expr:\s*(.*)$", line)
        if m and name:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in (">-", ">", "|", "|-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                rules.append((name, " ".join(b for b in block if b)))
                name = None
                continue
            rules.append((name, rest))
            name = None
        i += 1
    return rules


def substitute(expr):
    def rep(m):
        return GRAFANA_VARS.get(m.group(1) or m.group(2), m.group(0))
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", rep, expr)


def as_bool_comparison(expr):
    """`x > 0.01` -> `x > bool 0.01`: the same series, whether or not it fires."""
    return re.sub(r"(>=|<=|==|!=|>|<)\s*(?!bool\b)(-?[0-9][0-9.eE+-]*)\b", r"\1 bool \2", expr)


def loopback_sluice_config(mock_port):
    with open(COMPOSE_SLUICE) as f:
        text = f.read()
    subs = [(r"(?m)^listen: 0\.0\.0\.0:8080$", "listen: 127.0.0.1:0"),
            (r"(?m)^  address: 0\.0\.0\.0:9901\b", "  address: 127.0.0.1:0"),
            (r"http://mock-llm:9000", f"http://127.0.0.1:{mock_port}")]
    for rx, new in subs:
        text, n = re.subn(rx, new, text)
        # The mock is two upstreams (mock and its fallback mock-spare).
        expected = 2 if "mock-llm" in rx else 1
        if n != expected:
            raise RuntimeError(f"compose-sluice.yaml: expected {expected} matches of {rx}, got {n}")
    return text


def loopback_scrape_config(admin_target):
    with open(SCRAPE_CONFIG) as f:
        text = f.read()
    subs = [(r'"sluice:9901"', f'"{admin_target}"'),
            (r"/etc/prometheus/alerts\.yml", ALERTS),
            (r"(?m)^(\s*)scrape_interval: \S+", r"\1scrape_interval: 1s"),
            (r"(?m)^(\s*)evaluation_interval: \S+", r"\1evaluation_interval: 1s")]
    for rx, new in subs:
        text, n = re.subn(rx, new, text)
        if n != 1:
            raise RuntimeError(f"prometheus.yml: expected one match of {rx}, got {n}")
    return text


# --- Prometheus queries -------------------------------------------------------------

def prom_query(base, expr):
    """Returns (error or None, result list)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = http_get(url)
    try:
        doc = json.loads(body)
    except ValueError:
        return f"HTTP {status}: {body[:200]}", []
    if doc.get("status") != "success":
        return f"{doc.get('errorType')}: {doc.get('error')}", []
    return None, doc["data"]["result"]


def poll_series(base, expr, timeout):
    """Polls until expr returns >= 1 series; returns (error, result)."""
    end = time.monotonic() + remaining(timeout)
    while True:
        err, res = prom_query(base, expr)
        if err or res or time.monotonic() >= end:
            return err, res
        time.sleep(0.25)


def scalar(res):
    try:
        return float(res[0]["value"][1])
    except (IndexError, KeyError, ValueError):
        return float("nan")


# --- main ------------------------------------------------------------------------

def main():
    for b in (SLUICE_BIN, MOCK_BIN):
        if not os.access(b, os.X_OK):
            fail("binaries", f"{b} not built (run scripts/build)")
            return
    work = tempfile.mkdtemp(prefix="sluice-dash-")
    try:
        run(work)
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


def run(work):
    global skipped
    targets = check_dashboard()
    rules = alert_rules()
    check(len(rules) == 7, "alerts.yml: 7 alert rules parsed", f"{rules}")
    check({"SluiceConfigReloadRejected", "SluiceDown", "SluiceSharedStateDown"}
          <= {n for n, _ in rules},
          "alerts.yml: rejected reload, up == 0 and shared state down alerts",
          f"{[n for n, _ in rules]}")

    r = subprocess.run([SLUICE_BIN, "--check-config", COMPOSE_SLUICE], capture_output=True, text=True)
    check(r.returncode == 0, "sluice --check-config dashboards/compose-sluice.yaml", r.stdout + r.stderr)
    r = subprocess.run(["promtool", "check", "rules", ALERTS], capture_output=True, text=True)
    check(r.returncode == 0, "promtool check rules dashboards/alerts.yml", r.stdout + r.stderr)

    # mock-llm and sluice on port 0
    mock = Proc("mock-llm", [MOCK_BIN, "--listen", "127.0.0.1:0"], work)
    m = mock.wait_for(r"^mock-llm listening on (\S+):(\d+)$", 10)
    if not check(m is not None, "mock-llm started"):
        dump_log(mock)
        return
    mock_port = int(m.group(2))
    cfg = os.path.join(work, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(loopback_sluice_config(mock_port))
    r = subprocess.run([SLUICE_BIN, "--check-config", cfg], capture_output=True, text=True)
    check(r.returncode == 0, "sluice --check-config (loopback version)", r.stdout + r.stderr)
    sl = Proc("sluice", [SLUICE_BIN, "--config", cfg], work)
    m1 = sl.wait_for(r"^sluice listening on (\S+):(\d+)$", 10)
    m2 = sl.wait_for(r"^sluice admin on (\S+):(\d+)$", 10) if m1 else None
    if not check(m1 is not None and m2 is not None, "sluice started"):
        dump_log(sl)
        return
    proxy = f"http://127.0.0.1:{m1.group(2)}"
    admin_target = f"127.0.0.1:{m2.group(2)}"
    status, body = http_get(f"http://{admin_target}/metrics")
    check(status == 200 and "sluice_circuit_state" in body, "sluice admin /metrics answers", f"{status}")

    # Prometheus on a free loopback port
    pcfg = os.path.join(work, "prometheus.yml")
    with open(pcfg, "w") as f:
        f.write(loopback_scrape_config(admin_target))
    r = subprocess.run(["promtool", "check", "config", pcfg], capture_output=True, text=True)
    check(r.returncode == 0, "promtool check config (loopback dashboards/prometheus.yml)", r.stdout + r.stderr)
    prom_base = None
    for attempt in range(3):  # the port may be taken between bind-probe and Prometheus' bind
        port = free_port()
        prom = Proc(f"prometheus-{attempt}", ["prometheus", f"--config.file={pcfg}",
                                              f"--storage.tsdb.path={os.path.join(work, f'tsdb{attempt}')}",
                                              f"--web.listen-address=127.0.0.1:{port}",
                                              "--log.level=warn"], work)
        end = time.monotonic() + remaining(30)
        while time.monotonic() < end and prom.p.poll() is None:
            if http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1)[0] == 200:
                prom_base = f"http://127.0.0.1:{port}"
                break
            time.sleep(0.1)
        if prom_base:
            break
        dump_log(prom)
        prom.stop()
        PROCS.remove(prom)
    if not check(prom_base is not None, "prometheus ready"):
        return
    err, res = poll_series(prom_base, 'up{job="sluice"} == 1', 15)
    check(not err and res, "prometheus scrapes sluice (up{job=\"sluice\"} == 1)", err or "no successful scrape")

    workload(proxy, f"http://127.0.0.1:{mock_port}")

    # Wait until Prometheus holds the end of the workload (the circuit opened last).
    err, res = poll_series(prom_base, 'sum(sluice_circuit_transitions_total{to="open"}) >= 1', 20)
    check(not err and res, "prometheus scraped the workload (circuit transition to open)", err or "not seen")
    for name, expr, want in [
        ("client_disconnect cancellation counted",
         'sum(sluice_cancellations_total{cancel_reason="client_disconnect"}) >= 1', None),
        ("circuit_open cancellation counted", 'sum(sluice_cancellations_total{cancel_reason="circuit_open"}) >= 1', None),
        ("retry counted", "sum(sluice_retries_total) >= 1", None),
        ("cancel propagation observed", "sum(sluice_cancel_propagation_seconds_count) >= 1", None),
        ("circuit state left closed", "max(max_over_time(sluice_circuit_state[5m])) >= 1", None),
    ]:
        err, res = poll_series(prom_base, expr, 10)
        check(not err and res, f"workload visible: {name}", err or f"empty: {expr}")

    # Every panel target and alert expression.
    def evaluate(label, expr, signal_expr):
        global skipped
        q = substitute(signal_expr)
        if "$" in q:
            fail(label, f"unsubstituted variable in {q}")
            return
        spend = sorted(referenced_families(q) & set(SPEND_NOT_WIRED))
        if spend:
            err, _ = prom_query(prom_base, q)
            if check(err is None, f"{label}: valid, series not required", err or ""):
                skipped += 1
                print(f"SKIP (spend meter not wired): {expr}", flush=True)
            return
        err, res = poll_series(prom_base, q, 15)
        if err:
            fail(label, f"{err}\n    {q}")
        elif not res:
            fail(label, f"no series\n    {q}")
        else:
            ok(f"{label} ({len(res)} series)")

    for title, ref, expr in targets:
        evaluate(f"panel '{title}' {ref}", expr, expr)
    for name, expr in rules:
        err, _ = prom_query(prom_base, expr)
        check(err is None, f"alert {name}: expression valid", err or "")
        evaluate(f"alert {name}: series present", expr, as_bool_comparison(expr))

    # Prometheus evaluated the rule group without errors.
    end = time.monotonic() + remaining(10)
    health = {}
    while time.monotonic() < end:
        _, body = http_get(f"{prom_base}/api/v1/rules")
        try:
            groups = json.loads(body)["data"]["groups"]
            health = {r["name"]: (r.get("health"), r.get("lastError", ""))
                      for g in groups for r in g["rules"]}
        except (ValueError, KeyError):
            health = {}
        if len(health) == len(rules) and all(h == "ok" for h, _ in health.values()):
            break
        time.sleep(0.25)
    check(len(health) == len(rules) and all(h == "ok" for h, _ in health.values()),
          "prometheus evaluates every alert rule (health ok)", f"{health}")


def workload(proxy, mock):
    chat = '{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}'
    plain = '{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    ct = ["-H", "content-type: application/json"]

    def post(path, body, headers=(), extra=(), timeout=15):
        args = ["-o", "/dev/null", "-D", "-", "-w", "%{http_code}\n"] + ct + list(extra)
        for h in headers:
            args += ["-H", h]
        return curl(args + ["-d", body, proxy + path], timeout)

    def code_of(r):
        lines = r.stdout.strip().splitlines()
        return lines[-1] if lines else "000"

    codes = [code_of(post("/v1/chat/completions", chat, ["x-mock-tokens: 5"])) for _ in range(5)]
    check(codes == ["200"] * 5, "workload: 5 streamed chat completions -> 200", f"{codes}")
    r = post("/v1/chat/completions", plain, ["x-mock-tokens: 3"])
    check(code_of(r) == "200", "workload: non-streaming chat completion -> 200", code_of(r))
    r = post("/v1/messages", '{"model":"claude-sonnet-4-5","stream":true,"max_tokens":16,'
             '"messages":[{"role":"user","content":"hi"}]}', ["x-mock-tokens: 4"])
    check(code_of(r) == "200", "workload: streamed anthropic message -> 200", code_of(r))
    r = post("/v1/responses", '{"model":"gpt-4o-mini","stream":true,"input":"hi"}', ["x-mock-tokens: 4"])
    check(code_of(r) == "200", "workload: streamed responses call -> 200", code_of(r))
    # An MCP tools/call on the `tools` route (the Tools row): the mock has no
    # MCP endpoint and answers 404, which is a tool call's outcome too.
    r = post("/mcp", '{"jsonrpc":"2.0","id":1,"method":"tools/call",'
             '"params":{"name":"search_docs","arguments":{}}}')
    check(code_of(r) == "404", "workload: MCP tools/call through the tools route -> 404", code_of(r))

    # The user hits Stop: abort a long stream after the first bytes arrived.
    p = subprocess.Popen(["curl", "-sSN"] + ct + ["-H", "x-mock-tokens: 2000", "-H", "x-mock-token-interval-ms: 5",
                                                  "-H", "x-mock-request-id: dash-abort", "-d", chat,
                                                  proxy + "/v1/chat/completions"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    got = p.stdout.read(200)  # blocks until the stream is flowing
    p.kill()
    p.wait()
    p.stdout.close()
    entry = {}
    end = time.monotonic() + remaining(5)
    while time.monotonic() < end:
        _, body = http_get(mock + "/_ledger?id=dash-abort")
        try:
            reqs = json.loads(body)["requests"]
            entry = reqs[0] if reqs else {}
        except (ValueError, KeyError):
            entry = {}
        if entry.get("peer_closed"):
            break
        time.sleep(0.05)
    check(len(got) > 0 and entry.get("peer_closed") is True and entry.get("completed") is False,
          "workload: aborted stream torn down upstream", f"read {len(got)} bytes, ledger {entry}")

    # The agent gives up before the first token: the input was billed, nobody got
    # anything (leaked spend, cancel_reason client_disconnect).
    subprocess.run(["curl", "-sS", "--max-time", "0.3"] + ct +
                   ["-H", "x-mock-stall-before-headers-ms: 5000", "-d", chat,
                    proxy + "/v1/chat/completions"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # 429 + Retry-After once, then sluice retries and the agent gets a 200.
    r = post("/v1/chat/completions", plain, ["x-mock-status: 429", "x-mock-retry-after: 1",
                                             "x-mock-fail-times: 1", "x-mock-fail-key: dash-429"])
    attempts = re.search(r"(?im)^x-sluice-attempts:\s*(\d+)", r.stdout)
    check(code_of(r) == "200" and attempts and attempts.group(1) == "2",
          "workload: 429 then retry -> 200 after 2 attempts", r.stdout)

    # Quota headers (after the 429 step: sluice treats a 429 as the known quota
    # being exhausted until its reset, so keep the window short and separate).
    codes = [code_of(post("/v1/chat/completions", chat, ["x-mock-tokens: 2", "x-mock-quota: 1000/2000",
                                                         "x-mock-quota-key: dash-quota"])) for _ in range(2)]
    check(codes == ["200"] * 2, "workload: requests reporting quota headers -> 200", f"{codes}")

    # The provider is down: the circuit opens, then sluice answers 503 circuit_open.
    down = ["x-mock-status: 503", "x-mock-fail-times: 1000", "x-mock-fail-key: dash-down"]
    first = post("/v1/chat/completions", plain, down)
    body = ""
    for _ in range(3):  # normally the very next request; more only if a slow host let the cooldown pass
        body = curl(ct + sum((["-H", h] for h in down), []) +
                    ["-d", plain, proxy + "/v1/chat/completions"]).stdout
        if "circuit_open" in body:
            break
    check(code_of(first) == "503" and "circuit_open" in body,
          "workload: failing upstream opens the circuit (503 circuit_open)", f"{code_of(first)} / {body[:200]}")


if __name__ == "__main__":
    def on_signal(signum, _frame):
        stop_all()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        main()
    except Exception as e:  # report, clean up, fail
        import traceback
        traceback.print_exc()
        fail("test harness", repr(e))
    finally:
        stop_all()
    if skipped:
        print(f"({skipped} checks validity-only: spend meter not wired)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
