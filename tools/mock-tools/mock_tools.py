#!/usr/bin/env python3
"""mock-tools: a fake MCP tool server with a slow side-effecting tool (see README.md here).

Python 3 standard library only. Speaks MCP Streamable HTTP (JSON-RPC 2.0 over
POST, answers as JSON or as a server-sent event stream) on one path, /mcp:

  mock_tools.py --listen 127.0.0.1:0      prints "mock-tools listening on HOST:PORT"

The tool `write_rows` writes one row into the ledger every 100 ms (by
default) while its call is open, and stops the moment its client goes away:
what a real side-effecting tool (a migration, an e-mail batch, a bulk
update) does when nobody tells it to stop. GET /_ledger shows every row
written and when, on CLOCK_MONOTONIC in microseconds (the clock of
mock-llm's ledger and of time.monotonic()), so a demo can count the rows
written after the user pressed Stop.
"""

import argparse
import json
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL_VERSION = "2025-06-18"
ROW_INTERVAL_MS = 100

WRITE_ROWS = {
    "name": "write_rows",
    "title": "Write rows",
    "description": "Writes `rows` rows into `table`, one every 100 ms (`interval_ms`), "
                   "reporting progress per row. Stops when the call's stream is closed.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "rows": {"type": "integer", "minimum": 1},
            "interval_ms": {"type": "integer", "minimum": 1},
        },
        "required": ["rows"],
    },
    # Not read-only, not idempotent: a proxy must never send it twice.
    "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
}


def now_us():
    """CLOCK_MONOTONIC in microseconds."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Ledger:
    """Every tools/call received and every row written, thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []
        self.rows = []

    def add_call(self, call):
        with self.lock:
            self.calls.append(call)

    def update(self, call, **fields):
        with self.lock:
            call.update(fields)

    def add_row(self, call, row):
        with self.lock:
            self.rows.append(row)
            call["rows_written"] += 1
            call["last_row_us"] = row["at_us"]

    def to_json(self, run_id=None):
        with self.lock:
            calls = [dict(c) for c in self.calls if run_id is None or c["run_id"] == run_id]
            rows = [dict(r) for r in self.rows if run_id is None or r["run_id"] == run_id]
        return {"calls": calls, "rows": rows}

    def clear(self):
        with self.lock:
            self.calls = []
            self.rows = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mock-tools"

    def log_message(self, fmt, *args):  # quiet: the ledger is the record
        pass

    # ---- plumbing

    def send_body(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def client_gone(self, timeout_s):
        """Waits up to timeout_s; True as soon as the client has closed or reset
        the connection (EOF or RST on the socket), False when the time is up."""
        sock = self.connection
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable, _, _ = select.select([sock], [], [], left)
            if not readable:
                return False
            try:
                peek = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                return True
            if not peek:
                return True
            # A byte of a next request (the client pipelines): not a close.
            time.sleep(min(left, 0.01))

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # ---- endpoints

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path == "/_health":
            return self.send_body(200, {"status": "ok"})
        if path == "/_ledger":
            run_id = None
            for part in query.split("&"):
                if part.startswith("run_id="):
                    run_id = part[len("run_id="):]
            return self.send_body(200, self.server.ledger.to_json(run_id))
        if path == "/mcp":  # no server-initiated stream (allowed by the spec)
            self.send_response(405)
            self.send_header("allow", "POST")
            self.send_header("content-length", "0")
            self.end_headers()
            return None
        return self.send_body(404, {"error": f"no such path {path}"})

    def do_DELETE(self):
        if self.path == "/_ledger":
            self.server.ledger.clear()
            return self.send_body(200, {"cleared": True})
        return self.send_body(404, {"error": f"no such path {self.path}"})

    def do_POST(self):
        if self.path.partition("?")[0] != "/mcp":
            self.read_body()
            return self.send_body(404, {"error": f"no such path {self.path}"})
        raw = self.read_body()
        try:
            msg = json.loads(raw)
        except ValueError:
            return self.send_body(400, error(None, -32700, "parse error"))
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or "method" not in msg:
            return self.send_body(400, error(None, -32600, "invalid request"))
        method, rid = msg["method"], msg.get("id")
        if rid is None:  # a notification (notifications/initialized, cancelled, ...)
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return None
        if method == "initialize":
            return self.send_body(200, result(rid, {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "mock-tools", "version": "1.0.0"}}))
        if method == "ping":
            return self.send_body(200, result(rid, {}))
        if method == "tools/list":
            return self.send_body(200, result(rid, {"tools": [WRITE_ROWS]}))
        if method == "tools/call":
            params = msg.get("params") or {}
            if params.get("name") != WRITE_ROWS["name"]:
                return self.send_body(200, error(rid, -32602, f"unknown tool {params.get('name')!r}"))
            return self.write_rows(rid, params)
        return self.send_body(200, error(rid, -32601, f"method not found: {method}"))

    def write_rows(self, rid, params):
        args = params.get("arguments") or {}
        try:
            rows = int(args.get("rows", 10))
            interval_ms = int(args.get("interval_ms", self.server.interval_ms))
        except (TypeError, ValueError):
            return self.send_body(200, error(rid, -32602, "rows and interval_ms are integers"))
        if rows < 1 or interval_ms < 1:
            return self.send_body(200, error(rid, -32602, "rows and interval_ms must be positive"))
        table = str(args.get("table", "rows"))
        progress = (params.get("_meta") or {}).get("progressToken")
        ledger = self.server.ledger
        call = {"id": self.headers.get("x-mock-request-id") or f"call-{rid}",
                "run_id": self.headers.get("x-run-id") or "", "tool": WRITE_ROWS["name"],
                "table": table, "rows_asked": rows, "rows_written": 0,
                "received_us": now_us(), "last_row_us": 0, "peer_closed_us": 0,
                "finished_us": 0, "completed": False, "peer_closed": False}
        ledger.add_call(call)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for n in range(1, rows + 1):
                if self.client_gone(interval_ms / 1000.0):
                    t = now_us()
                    ledger.update(call, peer_closed=True, peer_closed_us=t, finished_us=t)
                    self.close_connection = True
                    return None
                ledger.add_row(call, {"call": call["id"], "run_id": call["run_id"], "table": table,
                                      "row": n, "at_us": now_us()})
                if progress is not None:
                    self.write_chunk(sse({"jsonrpc": "2.0", "method": "notifications/progress",
                                          "params": {"progressToken": progress, "progress": n,
                                                     "total": rows}}))
            self.write_chunk(sse(result(rid, {
                "content": [{"type": "text", "text": f"wrote {rows} rows into {table}"}],
                "isError": False})))
            self.write_chunk(b"")
            ledger.update(call, completed=True, finished_us=now_us())
        except OSError:
            t = now_us()
            ledger.update(call, peer_closed=True, peer_closed_us=t, finished_us=t)
            self.close_connection = True
        return None


def result(rid, value):
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def error(rid, code, message):
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def sse(obj):
    return b"event: message\ndata: " + json.dumps(obj).encode() + b"\n\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def main(argv=None):
    ap = argparse.ArgumentParser(prog="mock-tools", description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)")
    ap.add_argument("--interval-ms", type=int, default=ROW_INTERVAL_MS,
                    help="default time per row of write_rows (default 100)")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = Server((host.strip("[]") or "127.0.0.1", int(port)), Handler)
    server.ledger = Ledger()
    server.interval_ms = args.interval_ms
    bound_host, bound_port = server.server_address[:2]
    print(f"mock-tools listening on {bound_host}:{bound_port}", flush=True)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
