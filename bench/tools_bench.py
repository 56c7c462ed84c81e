"""The `tools` scenario of bench/bench.py (bench/run --only tools): what sluice's
MCP handling costs per tool call.

  callgrind   bench/profile.py --mcp: an MCP `tools/call` (a JSON-RPC request
              padded to 1 KiB, HTTP/1.1, 8 in flight) to mock-llm's echo
              endpoint through a route with a budget and a retry policy, once
              as a plain route (`--mcp off`: a POST like any other) and once
              with `protocol: mcp` and a tool policy (`--mcp on`): the JSON-RPC
              read, the tool match and its budget, the retry decision, the
              answer read for the outcome, the tool metrics. Instructions per
              request both ways, their difference, and that difference as CPU
              time at a conservative 1 instruction per nanosecond (a core of
              this class retires 2-4 per ns on this code: the real time is
              lower).

The target: a proxied `tools/call` adds <= 50 µs CPU over a plain POST of the
same size. Python standard library only; uses bench.py's helpers.
"""

import os
import re
import subprocess
import sys

import bench

TARGET_US = 50


def callgrind(build_dir, requests):
    """Instructions per request of the tools/call, plain route and MCP route."""
    out = {}
    for mode in ("off", "on"):
        argv = [sys.executable, os.path.join(bench.ROOT, "bench", "profile.py"), "--build-dir", build_dir,
                "--requests", str(requests), "--top", "0", "--mcp", mode]
        text = subprocess.run(argv, capture_output=True, text=True, timeout=1800).stdout
        m = re.search(r"instructions per request: ([\d,]+)", text)
        ok = re.search(r"requests ok: (\d+)/(\d+)", text)
        if not m or not ok or ok.group(1) != ok.group(2):
            raise RuntimeError(f"tools: bench/profile.py --mcp {mode} failed:\n{text[-2000:]}")
        out[f"ir_per_request_{mode}"] = int(m.group(1).replace(",", ""))
        for key, rx in (("ir_in_tools_code", r"^\s*([\d,]+)\s+tools \(MCP"),
                        ("ir_in_spend_code", r"^\s*([\d,]+)\s+spend \(")):
            found = re.search(rx, text, re.M)
            if found:
                out[f"{key}_{mode}"] = int(found.group(1).replace(",", ""))
    out["ir_added"] = out["ir_per_request_on"] - out["ir_per_request_off"]
    out["us_added_at_1_ir_per_ns"] = out["ir_added"] / 1000
    out["ir_ratio"] = out["ir_per_request_on"] / out["ir_per_request_off"]
    return out


def run(session, smoke, work, build_dir):
    """The whole scenario; returns its results (bench.py's results["tools"])."""
    # A smoke run measures 50 requests (the warm-up's 200 are not counted):
    # enough to check that both routes answer, too few for a figure to record.
    return {"smoke": smoke, "callgrind": callgrind(build_dir, 50 if smoke else 2000)}


def evaluate(r):
    cg = r["callgrind"]
    tools_ir = cg.get("ir_in_tools_code_on", 0)
    # Both must hold: the call as a whole, and the MCP code on its own (an MCP
    # route meters no spend, which alone saves more than the MCP code costs).
    ok = cg["us_added_at_1_ir_per_ns"] <= TARGET_US and tools_ir / 1000 <= TARGET_US
    return {"target": f"a proxied tools/call adds ≤ {TARGET_US} µs CPU over a plain POST of the same size "
                      "(callgrind)",
            "result": f"Ir per request MCP route / plain route {cg['ir_per_request_on']:,} / "
                      f"{cg['ir_per_request_off']:,}: {cg['ir_added']:+,} Ir "
                      f"({cg['us_added_at_1_ir_per_ns']:+.1f} µs at 1 Ir/ns; {cg['ir_ratio']:.3f}×); "
                      f"the MCP code itself {tools_ir:,} Ir (≤ {tools_ir / 1000:.1f} µs)",
            "verdict": ("met" if ok else "MISSED") if not r.get("smoke") else "–"}


def report(r):
    cg = r["callgrind"]
    return ["", "## tools. What an MCP tools/call costs", "",
            "callgrind, an MCP `tools/call` (JSON-RPC padded to 1 KiB, HTTP/1.1, 8 in flight) to mock-llm's "
            "echo endpoint, through the same route (budget, retry) without and with `protocol: mcp` and a "
            "tool policy" + (" (smoke: 50 requests, start-up not amortised)" if r.get("smoke") else "") + ":",
            "",
            "| plain route Ir/request | MCP route Ir/request | added Ir | added µs at 1 Ir/ns | ratio | "
            "MCP code Ir (inclusive) | spend metering Ir, plain route |",
            "|---|---|---|---|---|---|---|",
            f"| {cg['ir_per_request_off']:,} | {cg['ir_per_request_on']:,} | {cg['ir_added']:+,} | "
            f"{cg['us_added_at_1_ir_per_ns']:+.1f} | {cg['ir_ratio']:.3f}× | "
            f"{cg.get('ir_in_tools_code_on', 0):,} | {cg.get('ir_in_spend_code_off', 0):,} |", "",
            "An MCP route meters no spend (tool calls are not billed per token); the plain route's spend "
            "filter scans the JSON-RPC body and the answer for an LLM's `model` and `usage`. The MCP code's "
            "own cost is the inclusive cost of the tools filter and the JSON-RPC envelope read "
            "(bench/profile.py's feature groups)."]
