#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ (run from anywhere).

Seeds are small, realistic inputs: real request and response shapes of the
OpenAI, Anthropic and Responses APIs, the rate-limit dialects sluice reads,
the example configs. HTTP/2 seeds are frames built here (HPACK literals, no
Huffman), since they are binary. Re-running rewrites the generated files and
leaves crash reproducers (repro-*) alone.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def crlf(text):
    return text.replace("\n", "\r\n")


# --- bodies shared by several targets ---------------------------------------------
CHAT_REQ = '{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hi"}]}'
CHAT_JSON = '{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}'
CHAT_SSE = (
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"lo"}}]}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}\n\n'
    "data: [DONE]\n\n"
)
RESPONSES_SSE = (
    'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","model":"gpt-4o-mini","status":"in_progress"}}\n\n'
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m1","delta":"Hi"}\n\n'
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m1","delta":" there"}\n\n'
    'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-4o-mini","status":"completed","usage":{"input_tokens":8,"output_tokens":2,"total_tokens":10}}}\n\n'
)
ANTHROPIC_SSE = (
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"claude-sonnet-4","usage":{"input_tokens":25,"output_tokens":1}}}\n\n'
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    ": keep-alive\n\n"
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}\n\n'
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
ANTHROPIC_JSON = '{"id":"msg_1","type":"message","model":"claude-sonnet-4","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":10,"output_tokens":4}}'
PROBLEM = '{"type":"https://example.com/overloaded","title":"Overloaded","status":503,"detail":"try later","is_retriable":false}'


def chunked(body, piece=40):
    out = ""
    for i in range(0, len(body), piece):
        part = body[i:i + piece]
        out += "%x\r\n%s\r\n" % (len(part.encode()), part)
    return out + "0\r\n\r\n"


def http1():
    t = "http1_request"
    write(t, "get-models", crlf("GET /v1/models HTTP/1.1\nhost: sluice\naccept: */*\n\n"))
    write(t, "post-chat", crlf("POST /v1/chat/completions HTTP/1.1\nhost: sluice\ncontent-type: application/json\n"
                               "authorization: Bearer sk-test\nx-budget-ms: 20000\ncontent-length: %d\n\n" % len(CHAT_REQ)) + CHAT_REQ)
    write(t, "post-chunked", crlf("POST /v1/chat/completions HTTP/1.1\nhost: sluice\ntransfer-encoding: chunked\n"
                                  "content-type: application/json\n\n") + chunked(CHAT_REQ))
    write(t, "chunk-ext-trailer", crlf("POST /v1/responses HTTP/1.1\nhost: s\ntransfer-encoding: chunked\n\n"
                                       "5;ext=1\nhello\n0\nx-trailer: t\n\n"))
    write(t, "pipelined", crlf("GET /v1/models HTTP/1.1\nhost: s\n\nPOST /v1/messages HTTP/1.1\nhost: s\n"
                               "content-length: 2\n\n{}GET /nothing HTTP/1.1\nhost: s\nconnection: close\n\n"))
    write(t, "expect-100", crlf("POST /v1/chat/completions HTTP/1.1\nhost: s\nexpect: 100-continue\n"
                                "content-length: %d\n\n" % len(CHAT_REQ)) + CHAT_REQ)
    write(t, "http10-keepalive", crlf("GET /v1/models HTTP/1.0\nconnection: keep-alive\n\nHEAD /v1/models HTTP/1.0\n\n"))
    write(t, "head", crlf("HEAD /v1/models HTTP/1.1\nhost: s\n\n"))
    write(t, "no-route-body", crlf("POST /other HTTP/1.1\nhost: s\ncontent-length: 5\n\nhelloGET /v1/x HTTP/1.1\n\n"))
    write(t, "bad-budget", crlf("POST /v1/chat/completions HTTP/1.1\nhost: s\nx-budget-ms: -5\ncontent-length: 0\n\n"))
    write(t, "idempotency", crlf("PUT /v1/files/1 HTTP/1.1\nhost: s\nidempotency-key: abc\nx-forwarded-for: 10.0.0.1\n"
                                 "connection: keep-alive, x-hop\nx-hop: 1\ncontent-length: 3\n\nabc"))
    write(t, "obs-fold", crlf("GET /v1/models HTTP/1.1\nhost: s\nx-a: 1\n continued\n\n"))
    write(t, "space-before-colon", crlf("GET /v1/models HTTP/1.1\nhost : s\n\n"))
    write(t, "cl-and-te", crlf("POST /v1/chat/completions HTTP/1.1\nhost: s\ncontent-length: 4\n"
                               "transfer-encoding: chunked\n\n0\n\n"))
    write(t, "upgrade", crlf("GET /v1/realtime HTTP/1.1\nhost: s\nconnection: upgrade\nupgrade: websocket\n\n"))
    write(t, "bad-chunk", crlf("POST /v1/chat/completions HTTP/1.1\nhost: s\ntransfer-encoding: chunked\n\nzz\nabc\n"))
    write(t, "leading-crlf", crlf("\n\nGET /v1/models?x=1 HTTP/1.1\nhost: s\n\n"))
    write(t, "h2-preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")


# --- HTTP/2 frames ---------------------------------------------------------------------
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    # Literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def headers_block(method, path, extra=()):
    block = b""
    block += {"GET": b"\x82", "POST": b"\x83"}.get(method, b"") or hpack_literal(":method", method)
    block += b"\x86"  # :scheme http
    block += hpack_literal(":path", path)
    block += hpack_literal(":authority", "sluice")
    for n, v in extra:
        block += hpack_literal(n, v)
    return block


SETTINGS = 4
HEADERS = 1
DATA = 0
RST = 3
GOAWAY = 7
PING = 6
WINDOW_UPDATE = 8
CONTINUATION = 9
PRIORITY = 2
END_STREAM = 0x1
END_HEADERS = 0x4
ACK = 0x1


def http2():
    t = "http2_frames"
    settings = frame(SETTINGS, 0, 0)
    write(t, "get", PREFACE + settings + frame(HEADERS, END_HEADERS | END_STREAM, 1, headers_block("GET", "/v1/models")))
    body = CHAT_REQ.encode()
    post = frame(HEADERS, END_HEADERS, 1, headers_block("POST", "/v1/chat/completions",
                                                        [("content-type", "application/json"), ("x-budget-ms", "20000")]))
    write(t, "post-chat", PREFACE + settings + post + frame(DATA, 0, 1, body[:30]) + frame(DATA, END_STREAM, 1, body[30:]))
    two = (frame(HEADERS, END_HEADERS | END_STREAM, 1, headers_block("GET", "/v1/models")) +
           frame(HEADERS, END_HEADERS, 3, headers_block("POST", "/v1/messages", [("content-length", "2")])) +
           frame(DATA, 0, 3, b"{") + frame(RST, 0, 3, struct.pack(">I", 8)))
    write(t, "two-streams-rst", PREFACE + settings + two)
    block = headers_block("GET", "/v1/models", [("user-agent", "fuzz"), ("cookie", "a=1"), ("cookie", "b=2")])
    write(t, "continuation", PREFACE + settings + frame(HEADERS, END_STREAM, 1, block[:10]) +
          frame(CONTINUATION, END_HEADERS, 1, block[10:]))
    write(t, "goaway", PREFACE + settings + frame(HEADERS, END_HEADERS, 1, headers_block("POST", "/v1/chat/completions")) +
          frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0)))
    params = struct.pack(">HI", 4, 0) + struct.pack(">HI", 3, 10)  # INITIAL_WINDOW_SIZE 0, MAX_CONCURRENT_STREAMS 10
    write(t, "zero-window", PREFACE + frame(SETTINGS, 0, 0, params) +
          frame(HEADERS, END_HEADERS | END_STREAM, 1, headers_block("GET", "/v1/models")) +
          frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 100)) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1000)))
    write(t, "ping-ack-priority", PREFACE + settings + frame(SETTINGS, ACK, 0) + frame(PING, 0, 0, b"12345678") +
          frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15)) +
          frame(HEADERS, END_HEADERS | END_STREAM, 1, headers_block("GET", "/nothing")))
    write(t, "head-and-bad-header", PREFACE + settings +
          frame(HEADERS, END_HEADERS | END_STREAM, 1, headers_block("HEAD", "/v1/models")) +
          frame(HEADERS, END_HEADERS | END_STREAM, 3, headers_block("GET", "/v1/models", [("connection", "close")])))


# --- upstream responses -------------------------------------------------------------------
def upstream():
    t = "upstream_response"
    write(t, "chat-json", crlf("HTTP/1.1 200 OK\ncontent-type: application/json\nx-ratelimit-limit-requests: 500\n"
                               "x-ratelimit-remaining-requests: 499\nx-ratelimit-reset-requests: 120ms\n"
                               "content-length: %d\n\n" % len(CHAT_JSON)) + CHAT_JSON)
    write(t, "chat-sse-chunked", crlf("HTTP/1.1 200 OK\ncontent-type: text/event-stream\ntransfer-encoding: chunked\n\n") +
          chunked(CHAT_SSE, 70))
    write(t, "responses-sse", crlf("HTTP/1.1 200 OK\ncontent-type: text/event-stream\n"
                                   "content-length: %d\n\n" % len(RESPONSES_SSE)) + RESPONSES_SSE + "\x01")
    write(t, "anthropic-sse", crlf("HTTP/1.1 200 OK\ncontent-type: text/event-stream\n"
                                   "anthropic-ratelimit-requests-limit: 50\nanthropic-ratelimit-requests-remaining: 49\n"
                                   "anthropic-ratelimit-requests-reset: 2026-01-01T00:00:30Z\ntransfer-encoding: chunked\n\n") +
          chunked(ANTHROPIC_SSE, 100) + "\x02")
    write(t, "anthropic-json", crlf("HTTP/1.1 200 OK\ncontent-type: application/json\n"
                                    "content-length: %d\n\n" % len(ANTHROPIC_JSON)) + ANTHROPIC_JSON + "\x02")
    err = '{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'
    write(t, "429-retry-after", crlf("HTTP/1.1 429 Too Many Requests\ncontent-type: application/json\nretry-after: 2\n"
                                     "retry-after-ms: 1500\nx-ratelimit-remaining-requests: 0\n"
                                     "x-ratelimit-reset-requests: 6m0s\ncontent-length: %d\n\n" % len(err)) + err)
    write(t, "503-problem", crlf("HTTP/1.1 503 Service Unavailable\ncontent-type: application/problem+json\n"
                                 "content-length: %d\n\n" % len(PROBLEM)) + PROBLEM)
    write(t, "500-date", crlf("HTTP/1.1 500 Internal Server Error\nretry-after: Thu, 01 Jan 2026 00:00:05 GMT\n"
                              "ratelimit: \"default\";r=0;t=30\nratelimit-policy: \"default\";q=100;w=60\n"
                              "content-length: 5\n\noops\n"))
    write(t, "100-continue", crlf("HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\ncontent-type: application/json\n"
                                  "content-length: %d\n\n" % len(CHAT_JSON)) + CHAT_JSON)
    write(t, "close-delimited", crlf("HTTP/1.1 200 OK\ncontent-type: text/event-stream\nconnection: close\n\n") + CHAT_SSE)
    write(t, "head-response", crlf("HTTP/1.1 200 OK\ncontent-type: application/json\ncontent-length: 1234\n\n") + "\x03")
    write(t, "204", crlf("HTTP/1.1 204 No Content\nx-request-id: r1\n\n"))
    write(t, "truncated-chunked", crlf("HTTP/1.1 200 OK\ncontent-type: text/event-stream\ntransfer-encoding: chunked\n\n"
                                       "40\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"))
    write(t, "http10", crlf("HTTP/1.0 200 OK\ncontent-type: application/json\n\n") + CHAT_JSON + "\x04")


# --- SSE / usage bodies: first byte = kind | format << 2 | 429 << 3 | slice << 4 ---------------------
def sse():
    t = "sse_usage"
    write(t, "chat-sse", b"\x00" + CHAT_SSE.encode())
    write(t, "chat-sse-sliced", b"\x30" + CHAT_SSE.encode())
    write(t, "responses-sse", b"\x01" + RESPONSES_SSE.encode())
    write(t, "anthropic-sse-sliced", b"\x72" + ANTHROPIC_SSE.encode())
    write(t, "generic-sse", b"\x03" + b"\xef\xbb\xbfid: 7\nretry: 1000\ndata: a\ndata: b\r\n\r\nevent: x\rdata: c\r\r")
    write(t, "chat-json", b"\x04" + CHAT_JSON.encode())
    write(t, "anthropic-json", b"\x16" + ANTHROPIC_JSON.encode())
    write(t, "error-429", b"\x0c" + b'{"error":{"message":"slow down","type":"rate_limit"}}')


# --- header blocks --------------------------------------------------------------------------
def headers():
    t = "retry_after"
    write(t, "seconds", "retry-after: 120\n")
    write(t, "fractional", "retry-after: 1.5\n")
    write(t, "imf-fixdate", "retry-after: Thu, 01 Jan 2026 00:00:30 GMT\n")
    write(t, "rfc850", "retry-after: Thursday, 01-Jan-26 00:00:30 GMT\n")
    write(t, "asctime", "retry-after: Thu Jan  1 00:00:30 2026\n")
    write(t, "ms", "retry-after-ms: 1500\nretry-after: 2\n")
    write(t, "azure-ms", "x-ms-retry-after-ms: 12.5\n")
    write(t, "should-retry", "x-should-retry: true\nretry-after: 1\n")
    write(t, "problem", "content-type: application/problem+json\nretry-after: 3\n\n" + PROBLEM)
    write(t, "problem-retryable", 'content-type: application/problem+json; charset=utf-8\n\n{"status":503,"retryable":true}')
    write(t, "past-date", "retry-after: Sun, 06 Nov 1994 08:49:37 GMT\n")
    t = "quota_headers"
    write(t, "generic", "x-ratelimit-limit: 100\nx-ratelimit-remaining: 50\nx-ratelimit-reset: 30\n")
    write(t, "openai", "x-ratelimit-limit-requests: 500\nx-ratelimit-remaining-requests: 0\nx-ratelimit-reset-requests: 1m30.5s\n"
                       "x-ratelimit-limit-tokens: 30000\nx-ratelimit-remaining-tokens: 29000\nx-ratelimit-reset-tokens: 20ms\n")
    write(t, "anthropic", "anthropic-ratelimit-requests-limit: 50\nanthropic-ratelimit-requests-remaining: 0\n"
                          "anthropic-ratelimit-requests-reset: 2026-01-01T00:00:30Z\n"
                          "anthropic-ratelimit-input-tokens-limit: 40000\nanthropic-ratelimit-input-tokens-remaining: 100\n"
                          "anthropic-ratelimit-input-tokens-reset: 2026-01-01T00:00:01.5+00:00\n"
                          "anthropic-ratelimit-output-tokens-limit: 8000\nanthropic-ratelimit-output-tokens-remaining: 8000\n"
                          "anthropic-ratelimit-output-tokens-reset: 2026-01-01T01:00:00-01:00\n")
    write(t, "ietf-08", 'ratelimit: "default";r=0;t=30\nratelimit-policy: "default";q=100;w=60\n')
    write(t, "ietf-07", "ratelimit: limit=100, remaining=50, reset=5\n")
    write(t, "ietf-fields", "ratelimit-limit: 100\nratelimit-remaining: 0\nratelimit-reset: 1767225630\n")
    write(t, "epoch-ms", "x-ratelimit-remaining: 0\nx-ratelimit-reset: 1767225630000\n")
    write(t, "429-retry-after", "retry-after: 7\nx-ratelimit-remaining: 3\n")


def configs():
    t = "config_loader"
    ex = os.path.join(ROOT, "config", "examples")
    os.makedirs(os.path.join(HERE, t), exist_ok=True)
    for name in sorted(os.listdir(ex)):
        if name.endswith(".yaml"):
            shutil.copyfile(os.path.join(ex, name), os.path.join(HERE, t, name))
    write(t, "env-set.yaml", 'listen: 127.0.0.1:8080\nupstreams:\n  - name: a\n    url: https://api.openai.com\n'
                             '    headers: {authorization: "Bearer ${FUZZ_SET}"}\nroutes:\n  - {name: r, match: {path_prefix: /}, upstream: a}\n')
    write(t, "env-unset.yaml", 'listen: ${NOT_SET}\nupstreams: []\nroutes: []\n')
    write(t, "full.yaml", """version: 1
listen: [{address: "[::1]:8443"}, {address: 0.0.0.0:8080}]
admin: 127.0.0.1:9901
workers: 2
drain_timeout: 1m30s
upstreams:
  - name: openai
    url: http://127.0.0.1:9000/base/
    connect_timeout: 250ms
    http2: off
    rate_limit: {key: "header:authorization", reserve: 1, max_queue: 10}
    circuit_breaker:
      consecutive_failures: 5
      failure_rate: {threshold: 0.5, window: 10s, min_requests: 20}
      cooldown: 5s
      max_cooldown: 60s
      half_open_probes: 1
      failure_on: [5xx, connect_error, reset, timeout, 429]
      max_requests: 1000
      max_pending: 0
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST, get]}
    upstream: openai
    budget: {header: x-budget-ms, default: 120s, max: 600s, propagate: false}
    retry:
      attempts: 3
      on: [429, 500, 502, 503, 504, connect_error, reset, timeout]
      backoff: {base: 250ms, max: 8s}
      respect_retry_after: true
      idempotent: auto
      budget_percent: 20
      max_body: 1.5KiB
    first_byte_timeout: 0s
    idle_timeout: 30s
    on_client_disconnect: finish
    finish_grace: 30s
pricing:
  - {model: "gpt-4o*", input: 2.50, output: 10.00}
  - {model: "*", input: 0, output: 0}
""")
    write(t, "bad-duration.yaml", "listen: 127.0.0.1:1\nupstreams:\n  - {name: a, url: http://x, connect_timeout: 5}\nroutes: []\n")
    write(t, "anchors.yaml", "x: &a {name: a, url: 'http://h:1'}\nlisten: 127.0.0.1:1\nupstreams: [*a]\nroutes: [{name: r, match: {path_prefix: /}, upstream: a}]\n")


# --- JSON bodies for the top-level member scan -----------------------------------------------
def json_fields():
    t = "json_fields"
    write(t, "chat-request.json", CHAT_REQ)
    write(t, "chat-response.json", CHAT_JSON)
    write(t, "anthropic-response.json", ANTHROPIC_JSON)
    write(t, "problem.json", PROBLEM)
    write(t, "empty-object.json", " { } ")
    write(t, "escapes.json", '{"model":"gpt-\\"4o\\\\","max_tokens":16,"n":[1,{"a":"}"}],"k\\u0041":null}')
    write(t, "nested.json", '{"a":{"b":[[],{}],"c":"]"},"usage":{"prompt_tokens":1},"x":-1.5e3,"t":true}')


if __name__ == "__main__":
    http1()
    http2()
    upstream()
    sse()
    headers()
    configs()
    json_fields()
