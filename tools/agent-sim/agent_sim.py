#!/usr/bin/env python3
"""agent-sim: simulated LLM agents for sluice's demo (see README.md here).

Python 3 standard library only: asyncio streams over raw TCP, a hand-written
HTTP/1.1 client (chunked bodies, server-sent events), no pip packages.

  agent_sim.py plan   --seconds 20 ...            print the scenario
  agent_sim.py run    --target URL --mock URL ...  run the workload once, write JSON
  agent_sim.py report SLUICE.json DIRECT.json      print the side-by-side table

The same --seed gives the same workload: every agent, turn and call (sizes,
speeds, budgets, when the user hits Stop, when the agent gives up) is drawn
from a random generator seeded by (seed, agent, turn), never by timing. Only
the faults depend on time: they follow a schedule over the run (tight quota
throughout, slow streams, a 429 burst, a 503 outage), injected through
mock-llm's x-mock-* request headers.
"""

import argparse
import asyncio
import fnmatch
import json
import os
import random
import re
import shutil
import sys
import time
import urllib.parse
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Optional

# ---------------------------------------------------------------------------
# The scenario

AUTHORIZATION = "Bearer sk-demo-team"  # one API key (and so one quota) for all agents
QUOTA = "12/1000"                      # the tight quota: 12 requests per second, all run
SLOW_FACTOR = 4                        # slow streams: tokens come 4x slower ...
STALL_MS = 8000                        # ... and some streams stall for 8 s mid-way
AGENT_TIMER_SLACK = 0.3                # the agent's own timer fires this long after its budget
FAULT_SCHEDULE = [                     # (from, to) as fractions of --seconds (see fault_headers)
    (0.05, 0.35, "slow streams"),
    (0.40, 0.50, "429 burst"),
    (0.60, 0.78, "503 outage"),
]
FILLER = ("The agent keeps its working notes, tool results and the conversation so far "
          "in the prompt, which is why prompts grow with every turn. ")


@dataclass
class CallPlan:
    id: str                       # the ledger id (x-mock-request-id)
    kind: str                     # "model" or "tool"
    model: str
    stream: bool
    tokens: int
    interval_ms: int
    prompt_bytes: int
    budget_ms: int
    give_up_after: Optional[int]  # the agent stops caring after reading this many tokens
    stall_after: int              # where the stream stalls, if it starts during "slow streams"
    stalls: bool                  # whether it stalls then


@dataclass
class TurnPlan:
    think_s: float
    stop_at: Optional[float]      # the user hits Stop this long into the turn
    calls: list


@dataclass
class AgentPlan:
    index: int
    style: str                    # "abort": gives up by closing; "leaky": stops reading, keeps the socket
    turns: list


def turns_for(seconds):
    return max(1, round(seconds / 6.0))


def make_workload(seed, agents, turns, label):
    styles = ["leaky" if i % 2 else "abort" for i in range(agents)]
    random.Random(seed).shuffle(styles)
    plan = []
    for a in range(agents):
        agent_turns = []
        for t in range(turns):
            rng = random.Random(seed * 1_000_003 + a * 10_007 + t)
            think = rng.uniform(0.0, 0.6) if t == 0 else rng.uniform(0.2, 1.0)
            stop_at = rng.uniform(0.4, 2.5) if rng.random() < 0.10 else None
            calls = []
            n_tools = rng.randint(2, 4)
            for c in range(1 + n_tools):
                model_call = c == 0
                tokens = rng.randint(150, 500) if model_call else rng.randint(30, 200)
                stream = True if model_call else rng.random() < 0.8
                give_up = None
                if stream and rng.random() < (0.08 if model_call else 0.15):
                    give_up = max(1, int(tokens * rng.uniform(0.05, 0.30)))
                calls.append(CallPlan(
                    id=f"{label}-a{a}-t{t}-c{c}",
                    kind="model" if model_call else "tool",
                    model="gpt-4o" if model_call else "gpt-4o-mini",
                    stream=stream,
                    tokens=tokens,
                    interval_ms=rng.randint(10, 16) if model_call else rng.randint(5, 10),
                    prompt_bytes=rng.randint(3000, 12000) if model_call else rng.randint(800, 4000),
                    budget_ms=10000 if model_call else 4000,
                    give_up_after=give_up,
                    stall_after=rng.randint(3, 30),
                    stalls=stream and rng.random() < 0.5))
            agent_turns.append(TurnPlan(think, stop_at, calls))
        plan.append(AgentPlan(a, styles[a], agent_turns))
    return plan


def phase_at(elapsed, seconds):
    for lo, hi, name in FAULT_SCHEDULE:
        if lo * seconds <= elapsed < hi * seconds:
            return name
    return ""


def fault_headers(plan, call_phase, phase, attempt, server_outage=False):
    """mock-llm shaping and fault headers for the agent's `attempt` of a call that
    started during `call_phase`, sent during `phase`. A call that starts while
    streams are slow is slow on every attempt; 429s and 503s hit the requests
    sent during their window. sluice's own retries of an attempt carry the same
    headers."""
    h = {
        "x-mock-request-id": plan.id,
        "x-mock-tokens": str(plan.tokens),
        "x-mock-token-interval-ms": str(plan.interval_ms),
        "x-mock-quota": QUOTA,
        "x-mock-quota-key": "team",
        "x-mock-quota-style": "openai",
    }
    if call_phase == "slow streams":
        h["x-mock-token-interval-ms"] = str(plan.interval_ms * SLOW_FACTOR)
        if plan.stalls:
            h["x-mock-stall-after-tokens"] = str(min(plan.stall_after, plan.tokens))
            h["x-mock-stall-ms"] = str(STALL_MS)
    if phase == "429 burst":
        # The provider answers this request with 429 + Retry-After: 1; the burst is
        # over for a retry that waits as asked (fail-times 1 per agent attempt).
        h["x-mock-status"] = "429"
        h["x-mock-retry-after"] = "1"
        h["x-mock-fail-times"] = "1"
        h["x-mock-fail-key"] = f"{plan.id}-{attempt}"
    elif phase == "503 outage" and not server_outage:
        # The upstream is down: every request of this attempt (sluice's retries too) gets 503.
        # (With --server-outage the primary provider's own --schedule fails it instead, so
        # a fallback provider behind sluice is not hit by a stamped 503.)
        h["x-mock-status"] = "503"
    return h


def request_body(plan):
    reps = plan.prompt_bytes // len(FILLER) + 1
    content = (FILLER * reps)[: max(0, plan.prompt_bytes - 200)]
    body = {"model": plan.model, "stream": plan.stream,
            "messages": [{"role": "system", "content": "You are a careful coding agent."},
                         {"role": "user", "content": content}]}
    if plan.stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


# ---------------------------------------------------------------------------
# A minimal HTTP/1.1 client on asyncio streams

class GiveUp(Exception):
    """The agent's own timer fired."""


class Truncated(Exception):
    """The connection ended before the response did."""


def split_url(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or 80, (u.path.rstrip("/") or "")


async def timed(aw, deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        if asyncio.iscoroutine(aw):
            aw.close()
        raise GiveUp()
    try:
        return await asyncio.wait_for(aw, left)
    except asyncio.TimeoutError:
        raise GiveUp() from None


async def read_head(reader, deadline):
    try:
        raw = await timed(reader.readuntil(b"\r\n\r\n"), deadline)
    except (asyncio.IncompleteReadError, ConnectionError) as e:
        raise Truncated() from e
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def body_pieces(reader, headers, deadline):
    """Yields the de-chunked body as it arrives."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                line = await timed(reader.readuntil(b"\r\n"), deadline)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await timed(reader.readuntil(b"\r\n"), deadline)) != b"\r\n":
                        pass
                    return
                data = await timed(reader.readexactly(size + 2), deadline)
                yield data[:-2]
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n:
                yield await timed(reader.readexactly(n), deadline)
        else:
            while True:
                data = await timed(reader.read(65536), deadline)
                if not data:
                    return
                yield data
    except (asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
        raise Truncated() from e


async def http_get(url, timeout=10.0):
    return await http_simple("GET", url, timeout)


async def http_simple(method, url, timeout=10.0):
    """One request without a body on a fresh connection: (status, body bytes)."""
    host, port, _ = split_url(url)
    u = urllib.parse.urlsplit(url)
    target = (u.path or "/") + (("?" + u.query) if u.query else "")
    deadline = time.monotonic() + timeout
    reader, writer = await timed(asyncio.open_connection(host, port, limit=1 << 20), deadline)
    try:
        writer.write(f"{method} {target} HTTP/1.1\r\nhost: {host}:{port}\r\n"
                     f"connection: close\r\ncontent-length: 0\r\n\r\n".encode())
        status, headers = await read_head(reader, deadline)
        body = b"".join([p async for p in body_pieces(reader, headers, deadline)])
        return status, body
    finally:
        writer.close()


# ---------------------------------------------------------------------------
# Pricing (the same table sluice uses: the `pricing:` list of its config)

def load_pricing(path):
    prices = []
    in_pricing = False
    with open(path) as f:
        for line in f:
            stripped = line.split("#", 1)[0].rstrip()
            if re.match(r"^pricing:\s*$", stripped):
                in_pricing = True
                continue
            if in_pricing and stripped and not stripped.startswith(" "):
                break
            m = re.search(r'model:\s*"?([^",}]+)"?\s*,\s*input:\s*([0-9.]+)\s*,\s*output:\s*([0-9.]+)',
                          stripped) if in_pricing else None
            if m:
                prices.append((m.group(1).strip(), float(m.group(2)), float(m.group(3))))
    if not prices:
        raise SystemExit(f"agent-sim: no `pricing:` entries found in {path}")
    return prices


def price_of(prices, model):
    for glob, inp, out in prices:  # first match wins, as in sluice (fnmatch, no FNM_PATHNAME)
        if fnmatch.fnmatchcase(model, glob):
            return inp, out
    return 0.0, 0.0


# ---------------------------------------------------------------------------
# Prometheus text format

def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
        try:
            out[(m.group(1), labels)] = float(m.group(4))
        except ValueError:
            pass
    return out


def metric_sum(metrics, name, by=None, **match):
    """Sum of a metric's series whose labels match; grouped by label `by` if given."""
    total = Counter() if by else 0.0
    for (n, labels), v in metrics.items():
        if n != name:
            continue
        d = dict(labels)
        if any(d.get(k) != val for k, val in match.items()):
            continue
        if by:
            total[d.get(by, "")] += v
        else:
            total += v
    return total


# ---------------------------------------------------------------------------
# The run

@dataclass
class CallRecord:
    plan: CallPlan
    phase: str = ""
    outcome: str = ""            # ok, failed, truncated, timed_out, gave_up, stopped, conn_error
    status: int = 0
    attempts: int = 0
    tokens_read: int = 0
    problem: str = ""            # sluice's cancel_reason on an error it made
    log: list = None             # per attempt: [seconds into the run, status, cancel_reason]
    ended: float = 0.0           # seconds into the run when the call ended


class Run:
    def __init__(self, args, prices):
        self.args = args
        self.prices = prices
        # Several targets (comma-separated, e.g. sluice replicas): agent i calls target i mod n.
        self.targets = [split_url(t) for t in args.target.split(",") if t]
        self.host, self.port, self.base_path = self.targets[0]
        self.label = args.label
        self.records = {}
        self.leaked_sockets = []   # (writer, call id): given up on, never closed, never read again
        self.counts = Counter()
        self.in_flight = 0
        self.start = 0.0
        self.done = False
        self.note = ""

    # -- one HTTP attempt -------------------------------------------------

    async def attempt(self, agent, rec, headers, body, deadline):
        """One attempt. Returns (status, response headers, error body) for an error
        answer, or None when the call ended (ok, truncated, gave up)."""
        plan = rec.plan
        host, port, base_path = self.targets[agent.index % len(self.targets)]
        try:
            reader, writer = await timed(asyncio.open_connection(host, port), deadline)
        except GiveUp:
            rec.outcome = "timed_out"
            return None
        except OSError:
            return (0, {}, b"")
        keep_open = False
        try:
            budget_left = max(1, int((deadline - AGENT_TIMER_SLACK - time.monotonic()) * 1000))
            head = [f"POST {base_path}/v1/chat/completions HTTP/1.1",
                    f"host: {host}:{port}",
                    "content-type: application/json",
                    "accept: text/event-stream" if plan.stream else "accept: application/json",
                    f"authorization: {AUTHORIZATION}",
                    f"x-budget-ms: {budget_left}",
                    f"content-length: {len(body)}"]
            head += [f"{k}: {v}" for k, v in headers.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            status, rh = await read_head(reader, deadline)
            rec.status = status
            if status != 200:
                err = b"".join([p async for p in body_pieces(reader, rh, deadline)])
                return (status, rh, err)
            if not plan.stream:
                data = b"".join([p async for p in body_pieces(reader, rh, deadline)])
                msg = json.loads(data)
                n = len((msg["choices"][0]["message"].get("content") or "").split())
                rec.tokens_read += n
                self.counts["tokens_read"] += n
                rec.outcome = "ok"
                return None
            buf = b""
            async for piece in body_pieces(reader, rh, deadline):
                buf += piece
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            rec.outcome = "ok"
                            return None
                        chunk = json.loads(payload)
                        for choice in chunk.get("choices") or []:
                            n = len(((choice.get("delta") or {}).get("content") or "").split())
                            rec.tokens_read += n
                            self.counts["tokens_read"] += n
                    if plan.give_up_after is not None and rec.tokens_read >= plan.give_up_after:
                        # The agent has what it needs (or moved on): it stops caring.
                        rec.outcome = "gave_up"
                        keep_open = self.give_up(agent, writer, plan)
                        return None
            raise Truncated()
        except GiveUp:
            # The agent's own timer (its budget): it gives up on the call.
            rec.outcome = "timed_out"
            keep_open = self.give_up(agent, writer, plan)
            return None
        except Truncated:
            rec.outcome = "truncated"
            return None
        except (ValueError, KeyError, IndexError):
            rec.outcome = "failed"   # an answer that is not what the API promises
            return None
        except (ConnectionError, OSError):
            return (0, {}, b"")
        finally:
            if not keep_open:
                writer.close()   # also on Stop (CancelledError): the socket closes mid-stream

    def give_up(self, agent, writer, plan):
        if agent.style == "leaky":
            # Promise.race / wait_for without an abort: nobody reads this socket
            # again, nobody closes it either.
            writer.transport.pause_reading()
            self.leaked_sockets.append((writer, plan.id))
            self.counts["leaky_give_ups"] += 1
            return True
        return False

    # -- one call, with SDK-style retries ----------------------------------

    async def call(self, agent, plan):
        rec = CallRecord(plan)
        self.records[plan.id] = rec
        started = time.monotonic()
        rec.phase = phase_at(started - self.start, self.args.seconds)
        body = request_body(plan)
        deadline = started + plan.budget_ms / 1000.0 + AGENT_TIMER_SLACK
        self.in_flight += 1
        self.counts["calls"] += 1
        rng = random.Random(f"{self.args.seed}-{plan.id}")  # backoff jitter
        try:
            retries = 0
            while True:
                rec.attempts += 1
                phase = phase_at(time.monotonic() - self.start, self.args.seconds)
                headers = fault_headers(plan, rec.phase, phase, rec.attempts,
                                        self.args.server_outage)
                r = await self.attempt(agent, rec, headers, body, deadline)
                if r is None:
                    return
                status, rh, err = r
                rec.log = (rec.log or []) + [[round(time.monotonic() - self.start, 2), status]]
                if status == 429:
                    self.counts["seen_429"] += 1
                elif status >= 500:
                    self.counts["seen_5xx"] += 1
                if rh.get("content-type", "").startswith("application/problem+json"):
                    try:
                        rec.problem = json.loads(err).get("cancel_reason") or ""
                    except ValueError:
                        pass
                    rec.log[-1].append(rec.problem)
                wait = self.retry_wait(status, rh, retries, rng)
                if wait is None or retries >= self.args.client_retries or \
                        time.monotonic() + wait >= deadline - AGENT_TIMER_SLACK:
                    rec.outcome = "conn_error" if status == 0 else "failed"
                    return
                retries += 1
                self.counts["client_retries"] += 1
                await asyncio.sleep(wait)
        except asyncio.CancelledError:
            rec.outcome = "stopped"   # the user hit Stop (attempt() closed the socket)
        finally:
            rec.ended = time.monotonic() - self.start
            self.in_flight -= 1
            self.counts["calls_done"] += 1
            self.counts["outcome_" + (rec.outcome or "stopped")] += 1

    @staticmethod
    def retry_wait(status, headers, retries, rng):
        """The OpenAI SDKs' policy: retry connection errors, 408, 409, 429 and 5xx,
        obey x-should-retry, wait retry-after-ms / Retry-After when given (up to
        60 s), else 0.5 s * 2^n (max 8 s) minus up to 25 % jitter."""
        should = headers.get("x-should-retry", "").lower()
        if should == "false":
            return None
        if should != "true" and not (status == 0 or status in (408, 409, 429) or status >= 500):
            return None
        wait = None
        try:
            if "retry-after-ms" in headers:
                wait = float(headers["retry-after-ms"]) / 1000.0
            elif "retry-after" in headers:
                wait = float(headers["retry-after"])
        except ValueError:
            wait = None
        if wait is None or not 0 <= wait <= 60:
            wait = min(0.5 * 2 ** retries, 8.0) * (1 - 0.25 * rng.random())
        return wait

    # -- agents, turns ----------------------------------------------------

    async def agent(self, agent):
        for turn in agent.turns:
            await asyncio.sleep(turn.think_s)
            tasks = [asyncio.create_task(self.call(agent, c)) for c in turn.calls]
            if turn.stop_at is not None:
                _, pending = await asyncio.wait(tasks, timeout=turn.stop_at)
                if pending:
                    self.counts["stops"] += 1  # the user hits Stop: every open call of the turn closes
                    for t in pending:
                        t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def progress(self):
        # One line, redrawn with \r; when stderr is not a terminal (CI logs), a
        # plain line every 5 s instead.
        tty = sys.stderr.isatty()
        width = 0
        while True:
            line = self.progress_line()
            if tty:
                sys.stderr.write("\r" + line.ljust(width) + ("\n" if self.done else ""))
                width = len(line)
            else:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()
            if self.done:
                return
            try:
                await asyncio.wait_for(self.finished.wait(), 0.2 if tty else 5.0)
            except asyncio.TimeoutError:
                pass

    def progress_line(self):
        c = self.counts
        el = time.monotonic() - self.start
        total = sum(len(t.calls) for a in self.plan for t in a.turns)
        frac = min(1.0, c["calls_done"] / total) if total else 1.0
        bar = "[" + "#" * int(frac * 10) + "." * (10 - int(frac * 10)) + "]"
        head = f"  {self.label} {el:5.1f}s"
        if self.note:
            line = f"{head} {bar} {c['calls_done']}/{total} calls; {self.note}"
        else:
            phase = phase_at(el, self.args.seconds) or "steady"
            line = (f"{head} {phase:<12} {bar} {c['calls_done']}/{total} calls, {self.in_flight} open, "
                    f"{c['tokens_read']:,} tok read, 429s {c['seen_429']}, 5xx {c['seen_5xx']}, "
                    f"retries {c['client_retries']}")
        if not sys.stderr.isatty():
            return line
        cols = shutil.get_terminal_size((100, 24)).columns
        return line if len(line) < cols else line[: cols - 4] + "..."

    def mocks(self):
        """Every provider's base URL (--mock may list several: a primary and its fallbacks)."""
        return [m.rstrip("/") for m in self.args.mock.split(",") if m]

    async def ledger_entries(self):
        out = []
        prefix = self.label + "-"
        for mock in self.mocks():
            status, body = await http_get(mock + "/_ledger", timeout=30)
            if status != 200:
                raise SystemExit(f"agent-sim: GET {mock}/_ledger answered {status}")
            for e in json.loads(body)["requests"]:
                if e.get("id", "").startswith(prefix):
                    e["provider"] = mock
                    out.append(e)
        return out

    async def metrics(self):
        if not self.args.metrics:
            return {}
        # Several replicas (comma-separated URLs): their series are summed.
        out = Counter()
        for url in self.args.metrics.split(","):
            status, body = await http_get(url)
            if status != 200:
                raise SystemExit(f"agent-sim: GET {url} answered {status}")
            out.update(parse_metrics(body.decode()))
        return dict(out)

    async def main(self):
        a = self.args
        for mock in self.mocks():
            if a.reset_ledger:
                await http_simple("DELETE", mock + "/_ledger")
        before = await self.metrics()
        self.plan = make_workload(a.seed, a.agents, a.turns or turns_for(a.seconds), self.label)
        if a.server_outage:
            # A provider's --schedule starts over with the run, so its outage falls
            # in the run's "503 outage" phase.
            for mock in self.mocks():
                await http_simple("POST", mock + "/_schedule")
        self.start = time.monotonic()
        self.finished = asyncio.Event()
        prog = asyncio.create_task(self.progress()) if a.progress else None
        await asyncio.gather(*(self.agent(ag) for ag in self.plan))
        agents_done = time.monotonic() - self.start

        # Calls the agents gave up on may still be streaming upstream (the leak).
        # Wait until the mock has finished every one of them (or --drain-max),
        # then close the abandoned sockets.
        drain_until = time.monotonic() + a.drain_max
        while True:
            entries = await self.ledger_entries()
            running = sum(1 for e in entries if not e.get("finished_us"))
            if running == 0 or time.monotonic() >= drain_until:
                break
            self.note = f"waiting: {running} abandoned stream(s) still running upstream"
            await asyncio.sleep(0.25)
        self.note = "done"
        for writer, _ in self.leaked_sockets:
            writer.close()
        await asyncio.sleep(0.3)
        entries = await self.ledger_entries()
        after = await self.metrics()
        elapsed = time.monotonic() - self.start
        self.done = True
        self.finished.set()
        if prog:
            await prog
        return self.result(entries, before, after, agents_done, elapsed,
                           sum(1 for e in entries if not e.get("finished_us")))

    # -- results ----------------------------------------------------------

    def result(self, entries, before, after, agents_done, elapsed, unfinished):
        by_id = defaultdict(list)
        for e in entries:
            by_id[e["id"]].append(e)
        led = Counter()
        usd = Counter()
        statuses = Counter()
        for cid, es in by_id.items():
            rec = self.records.get(cid)
            read = rec.tokens_read if rec else 0
            model = es[0].get("model") or (rec.plan.model if rec else "")
            p_in, p_out = price_of(self.prices, model)
            emitted = sum(e.get("tokens_emitted", 0) for e in es)
            # The provider bills the input of every request it accepted (200),
            # whether or not its answer got out.
            billed = [e for e in es if e.get("status") == 200]
            in_billed = sum(e.get("input_tokens", 0) for e in billed)
            in_delivered = billed[-1].get("input_tokens", 0) if (billed and read > 0) else 0
            out_leaked = max(0, emitted - read)
            in_leaked = in_billed - in_delivered
            for e in es:
                statuses[str(e.get("status"))] += 1
                led["upstream_calls"] += 1
                led["peer_closed"] += bool(e.get("peer_closed"))
                led["completed"] += bool(e.get("completed"))
            led["output_emitted"] += emitted
            led["output_read"] += min(read, emitted)
            led["output_leaked"] += out_leaked
            led["input_billed"] += in_billed
            led["input_leaked"] += in_leaked
            usd["billed"] += (in_billed * p_in + emitted * p_out) / 1e6
            usd["leaked"] += (in_leaked * p_in + out_leaked * p_out) / 1e6
        usd["delivered"] = usd["billed"] - usd["leaked"]

        sluice = None
        if before or after:
            d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}
            sluice = {
                "requests": metric_sum(d, "sluice_requests_total"),
                "requests_by_code": dict(metric_sum(d, "sluice_requests_total", by="code")),
                "attempts_by_result": dict(metric_sum(d, "sluice_upstream_attempts_total", by="result")),
                "retries": metric_sum(d, "sluice_retries_total"),
                "retries_by_cause": dict(metric_sum(d, "sluice_retries_total", by="cause")),
                "throttled_queued": metric_sum(d, "sluice_throttle_wait_seconds_count"),
                "throttle_wait_seconds": metric_sum(d, "sluice_throttle_wait_seconds_sum"),
                "circuit_opens": metric_sum(d, "sluice_circuit_transitions_total", to="open"),
                "fallbacks": metric_sum(d, "sluice_fallbacks_total"),
                "cancellations": dict(metric_sum(d, "sluice_cancellations_total", by="cancel_reason")),
                "tokens": {f"{kind}_{disp}": metric_sum(d, "sluice_tokens_total", kind=kind, disposition=disp)
                           for kind in ("input", "output") for disp in ("delivered", "leaked")},
                "spend_usd": dict(metric_sum(d, "sluice_spend_usd_total", by="disposition")),
                "leaked_usd_by_reason": dict(metric_sum(d, "sluice_leaked_spend_usd_total", by="cancel_reason")),
            }

        outcomes = Counter(r.outcome or "stopped" for r in self.records.values())
        # The outage window: calls that ended in it, and those of them that got a full answer.
        lo, hi = next(((f * self.args.seconds, t * self.args.seconds)
                       for f, t, name in FAULT_SCHEDULE if name == "503 outage"), (0.0, 0.0))
        during = [r for r in self.records.values() if lo <= r.ended < hi]
        outage_calls = len(during)
        outage_ok = sum(1 for r in during if r.outcome == "ok")
        mocks = self.mocks()
        fallback_answers = sum(1 for e in entries
                               if e.get("provider") != mocks[0] and e.get("status") == 200)
        problems = Counter(r.problem for r in self.records.values() if r.problem)
        phases = Counter(r.phase or "steady" for r in self.records.values())
        c = self.counts
        return {
            "label": self.label, "target": self.args.target, "seed": self.args.seed,
            "seconds": self.args.seconds, "agents": self.args.agents,
            "turns_per_agent": len(self.plan[0].turns) if self.plan else 0,
            "elapsed_s": round(elapsed, 2), "agents_done_s": round(agents_done, 2),
            "client": {
                "calls": c["calls"], "outcomes": dict(outcomes), "stops": c["stops"],
                "retries": c["client_retries"], "seen_429": c["seen_429"], "seen_5xx": c["seen_5xx"],
                "tokens_read": c["tokens_read"], "leaky_give_ups": c["leaky_give_ups"],
                "sluice_problems": dict(problems), "calls_by_phase": dict(phases),
                "outage_calls": outage_calls, "outage_ok": outage_ok,
            },
            "ledger": dict(led), "ledger_statuses": dict(statuses),
            "fallback_answers": fallback_answers,
            "ledger_unfinished": unfinished,
            "usd": dict(usd),
            "sluice": sluice,
            "ledger_entries": [{k: v for k, v in e.items() if k != "request_headers"} for e in entries],
            "calls": [{"id": r.plan.id, "kind": r.plan.kind, "phase": r.phase, "outcome": r.outcome,
                       "status": r.status, "attempts": r.attempts, "planned": r.plan.tokens,
                       "read": r.tokens_read, "problem": r.problem, "errors": r.log or [],
                       "emitted": sum(e.get("tokens_emitted", 0) for e in by_id.get(r.plan.id, []))}
                      for r in self.records.values()],
        }


# ---------------------------------------------------------------------------
# The table

def fmt_n(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


def fmt_usd(v):
    return "-" if v is None else f"${v:,.5f}"


def pct_saved(s, d, less="less", more="more"):
    if d is None or s is None or d <= 0:
        return ""
    return f"{(d - s) / d * 100:.0f}% {less}" if s <= d else f"{(s - d) / d * 100:.0f}% {more}"


def report(s, d, out=sys.stdout, columns=("via sluice", "direct")):
    W, C = 44, 13
    rows = []

    def row(name, sv, dv, save="", fmt=fmt_n):
        rows.append(f"  {name:<{W}}{fmt(sv):>{C}}{fmt(dv):>{C}}   {save}".rstrip())

    def section(title):
        rows.append(f"  {title}")

    sc, dc = s["client"], d["client"]
    so, do = sc["outcomes"], dc["outcomes"]
    sl, dl = s["ledger"], d["ledger"]
    sx = s.get("sluice") or {}

    def outcome(o, *keys):
        return sum(o.get(k, 0) for k in keys)

    rows.append(f"  {'':<{W}}{columns[0]:>{C}}{columns[1]:>{C}}   saving")
    rows.append("  " + "-" * (W + 2 * C + 24))
    section("requests")
    row("  agent calls (the same seeded workload)", sc["calls"], dc["calls"])
    row("  HTTP requests the agents sent", sc["calls"] + sc["retries"], dc["calls"] + dc["retries"])
    row("  upstream calls the provider saw", sl.get("upstream_calls", 0), dl.get("upstream_calls", 0),
        pct_saved(sl.get("upstream_calls", 0), dl.get("upstream_calls", 0), "fewer"))
    section("what the agents got")
    row("  a full answer", outcome(so, "ok"), outcome(do, "ok"))
    row("  an error (after retries)", outcome(so, "failed", "conn_error"), outcome(do, "failed", "conn_error"))
    row("  budget ran out / stream stalled", outcome(so, "truncated", "timed_out"),
        outcome(do, "truncated", "timed_out"))
    row("  gave up on the stream", outcome(so, "gave_up"), outcome(do, "gave_up"))
    row("  the user hit Stop", outcome(so, "stopped"), outcome(do, "stopped"))
    section("retries")
    row("  by the agents' SDK", sc["retries"], dc["retries"])
    row("  by sluice", sx.get("retries"), None)
    section("throttled")
    row("  429s the agents saw", sc["seen_429"], dc["seen_429"])
    row("  429s the provider answered", s.get("ledger_statuses", {}).get("429", 0),
        d.get("ledger_statuses", {}).get("429", 0))
    row("  held by sluice until the quota reset", sx.get("throttled_queued"), None)
    row("circuit opens", sx.get("circuit_opens"), None)
    section("the provider's outage")
    row("  calls that ended during it", sc.get("outage_calls", 0), dc.get("outage_calls", 0))
    row("  ... with a full answer", sc.get("outage_ok", 0), dc.get("outage_ok", 0))
    row("  answered by the fallback provider", s.get("fallback_answers", 0), d.get("fallback_answers", 0))
    row("  spill-overs to the fallback (sluice)", sx.get("fallbacks"), None)
    section("cancellations by reason (sluice)")
    cancels = sx.get("cancellations") or {}
    for reason in ("client_disconnect", "budget_exhausted", "upstream_timeout", "rate_limited",
                   "circuit_open", "overloaded", "draining"):
        if cancels.get(reason) or reason in ("client_disconnect", "budget_exhausted"):
            row(f"  {reason}", cancels.get(reason, 0.0), None)
    row("upstream streams cut before their end", sl.get("peer_closed", 0), dl.get("peer_closed", 0))
    section("output tokens (mock ledger vs what the agents read)")
    row("  generated by the provider", sl.get("output_emitted", 0), dl.get("output_emitted", 0))
    row("  delivered: read by an agent", sl.get("output_read", 0), dl.get("output_read", 0))
    row("  leaked: generated, never read", sl.get("output_leaked", 0), dl.get("output_leaked", 0),
        pct_saved(sl.get("output_leaked", 0), dl.get("output_leaked", 0)))
    row("input tokens leaked (output never read)", sl.get("input_leaked", 0), dl.get("input_leaked", 0))
    row("billed USD", s["usd"]["billed"], d["usd"]["billed"], fmt=fmt_usd)
    ls, ld = s["usd"]["leaked"], d["usd"]["leaked"]
    save = f"{fmt_usd(ld - ls)} saved ({pct_saved(ls, ld)})" if ld > ls else pct_saved(ls, ld)
    row("leaked USD", ls, ld, save, fmt=fmt_usd)
    if sx:
        section("sluice's own count (/metrics)")
        t = sx["tokens"]
        row("  output tokens delivered / leaked",
            f"{fmt_n(t['output_delivered'])} / {fmt_n(t['output_leaked'])}", None)
        row("  input tokens delivered / leaked",
            f"{fmt_n(t['input_delivered'])} / {fmt_n(t['input_leaked'])}", None)
        lr = sx.get("leaked_usd_by_reason") or {}
        row("  leaked USD", fmt_usd((sx.get("spend_usd") or {}).get("leaked", 0.0)), None,
            ", ".join(f"{k} {fmt_usd(v)}" for k, v in sorted(lr.items(), key=lambda kv: -kv[1]) if v > 0))
    print("\n".join(rows), file=out)
    print(f"""
  leaked: output tokens the provider generated that no agent read, plus the input of calls whose
  output nobody read; counted from the mock's ledger the same way for both runs, priced with
  demo.yaml's `pricing`. sluice's own count books a response once the agent's next request, close or
  socket (sluice looks at what an agent on its host left unread) says how much was read; the unread
  part of an answer is client_abandoned, of a response sluice cut the cut's reason.
  run time: via sluice {s['elapsed_s']:.1f}s, direct {d['elapsed_s']:.1f}s; {s['agents']} agents x \
{s['turns_per_agent']} turn(s), seed {s['seed']}.""", file=out)
    for r in (s, d):
        if r.get("ledger_unfinished"):
            print(f"  note: {r['ledger_unfinished']} abandoned stream(s) of the {r['label']} run were "
                  f"still running at the end; their leak is counted only up to then.", file=out)


# ---------------------------------------------------------------------------

def describe(args):
    plan = make_workload(args.seed, args.agents, args.turns or turns_for(args.seconds), "x")
    turns = len(plan[0].turns)
    calls = sum(len(t.calls) for a in plan for t in a.turns)
    leaky = sum(1 for a in plan if a.style == "leaky")
    D = args.seconds
    print(f"""  {args.agents} agents x {turns} turn(s) = {calls} calls. Each turn fans out, concurrently, one streamed
  gpt-4o call (x-budget-ms: 10000) and 2-4 gpt-4o-mini tool calls (x-budget-ms: 4000).
  The agents' SDK retries twice on 429/5xx, honouring Retry-After and x-should-retry.
  How they abort: the user hits Stop on ~10% of turns (sockets closed mid-stream); an agent
  stops caring about some streams partway (15% of tool calls, 8% of model calls); and when its
  own timer (the budget) fires it gives up too.
  {leaky} of the {args.agents} agents give up the leaky way: they stop reading but keep the socket open.
  Faults (mock-llm request headers) on a schedule:""")
    print(f"    {'whole run':<11}   tight quota: {QUOTA.split('/')[0]} requests per {QUOTA.split('/')[1]} ms "
          f"for the team's API key")
    for lo, hi, name in FAULT_SCHEDULE:
        what = {"slow streams": f"calls started now stream {SLOW_FACTOR}x slower; half stall "
                                f"{STALL_MS // 1000} s mid-way",
                "429 burst": "requests sent now get 429, Retry-After: 1 (a retry succeeds)",
                "503 outage": "requests sent now get 503"}[name]
        print(f"    {lo * D:4.1f}-{hi * D:4.1f} s   {name}: {what}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agent-sim", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--seconds", type=float, default=20.0,
                       help="nominal length of the run; scales the fault schedule (default 20)")
        p.add_argument("--agents", type=int, default=12, help="concurrent agents (default 12)")
        p.add_argument("--turns", type=int, default=0,
                       help="turns per agent (default: seconds / 6, at least 1)")
        p.add_argument("--seed", type=int, default=42, help="workload seed (default 42)")

    p = sub.add_parser("plan", help="print the scenario")
    common(p)
    p = sub.add_parser("run", help="run the workload once and write its numbers as JSON")
    common(p)
    p.add_argument("--target", required=True, help="base URL the agents call (sluice or the mock); "
                   "several comma-separated: agent i calls the (i mod n)-th")
    p.add_argument("--mock", required=True,
                   help="mock-llm's base URL, for its /_ledger; several comma-separated "
                        "(the primary provider first, then its fallbacks): their ledgers are summed")
    p.add_argument("--server-outage", action="store_true",
                   help="the outage is the primary provider's own (mock-llm --schedule, restarted "
                        "with the run): no 503 is stamped into request headers")
    p.add_argument("--metrics", default="", help="sluice's admin /metrics URL (sluice run only); several "
                   "comma-separated (replicas): summed")
    p.add_argument("--label", required=True, help="run name; prefixes every ledger id")
    p.add_argument("--pricing", required=True, help="sluice config whose `pricing:` list prices tokens")
    p.add_argument("--out", required=True, help="where to write the run's JSON")
    p.add_argument("--client-retries", type=int, default=2, help="SDK retries per call (default 2)")
    p.add_argument("--drain-max", type=float, default=12.0,
                   help="after the last turn, wait at most this long for abandoned streams (default 12)")
    p.add_argument("--reset-ledger", action="store_true", help="DELETE the mock's ledger first")
    p.add_argument("--progress", action="store_true", help="live progress line on stderr")
    p = sub.add_parser("report", help="print the side-by-side table")
    p.add_argument("via_sluice")
    p.add_argument("direct")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless the leaked USD via sluice is below direct's")
    p.add_argument("--columns", default="via sluice,direct",
                   help="the two column headings (default: via sluice,direct)")
    args = ap.parse_args(argv)

    if args.cmd == "plan":
        describe(args)
        return 0
    if args.cmd == "run":
        run = Run(args, load_pricing(args.pricing))
        result = asyncio.run(run.main())
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.out)
        return 0
    with open(args.via_sluice) as f:
        s = json.load(f)
    with open(args.direct) as f:
        d = json.load(f)
    report(s, d, columns=tuple(args.columns.split(",", 1)))
    if args.check:
        ls, ld = s["usd"]["leaked"], d["usd"]["leaked"]
        if not ls < ld:
            print(f"agent-sim: CHECK FAILED: leaked USD via sluice {ls:.6f} is not below direct's {ld:.6f}",
                  file=sys.stderr)
            return 1
        print(f"  check: leaked USD via sluice ({fmt_usd(ls)}) < direct ({fmt_usd(ld)}): ok")
        own = ((s.get("sluice") or {}).get("spend_usd") or {}).get("leaked", 0.0)
        if ls > 0 and abs(own - ls) > 0.10 * ls:
            print(f"agent-sim: CHECK FAILED: sluice's own leaked USD {own:.6f} is not within 10% of "
                  f"the ledger's {ls:.6f}", file=sys.stderr)
            return 1
        print(f"  check: sluice's own leaked USD ({fmt_usd(own)}) within 10% of the ledger's "
              f"({fmt_usd(ls)}): ok")
        so, do = s["client"].get("outage_ok", 0), d["client"].get("outage_ok", 0)
        direct_hurt = d["client"].get("outage_calls", 0) - do
        if direct_hurt <= 0:
            print("  check: no direct call failed during the outage (a short run): "
                  "nothing to compare")
        else:
            if not so > do:
                print(f"agent-sim: CHECK FAILED: during the primary's outage sluice answered {so} calls, "
                      f"direct {do}: not more", file=sys.stderr)
                return 1
            print(f"  check: calls answered during the outage via sluice ({so}) > direct ({do}): ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
