#!/usr/bin/env bash
# End-to-end tests: the official MCP TypeScript SDK (@modelcontextprotocol/sdk)
# client and a stateless Streamable HTTP server, then two session-ful ones,
# through sluice (mcp.test.mjs); then the MCP conformance suite's server
# scenarios against a session-ful SDK server, direct and through sluice, with
# the results compared (conformance.test.mjs).
# Needs Node >= 20, npm, and a C++ build with `sluice` (default
# ../../../build; override with SLUICE_BUILD_DIR). Extra arguments go to
# `node --test`. Reuses the openai-sdk tests' harness (starting sluice, metrics).
set -euo pipefail

if [[ -n "${SLUICE_BUILD_DIR:-}" ]]; then
  SLUICE_BUILD_DIR="$(cd "$SLUICE_BUILD_DIR" && pwd)"
  export SLUICE_BUILD_DIR
fi

cd "$(dirname "${BASH_SOURCE[0]}")"

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if (( node_major < 20 )); then
  echo "run.sh: Node >= 20 required, found $(node --version)" >&2
  exit 1
fi

if [[ ! node_modules/.package-lock.json -nt package-lock.json ||
      ! node_modules/.package-lock.json -nt package.json ]]; then
  npm ci --no-audit --no-fund
fi

exec node --test --test-concurrency=1 "$@" mcp.test.mjs conformance.test.mjs
