#!/usr/bin/env bash
# End-to-end tests: the official `openai` and `@anthropic-ai/sdk` npm SDKs
# through sluice to mock-llm (sdk.test.mjs, errors.test.mjs).
# Needs Node >= 20, npm, and a C++ build with `sluice` and `tools/mock-llm`
# (default ../../../build; override with SLUICE_BUILD_DIR). Extra arguments
# go to `node --test` (e.g. --test-name-pattern=abort). The files run one
# after the other: the abort tests measure propagation in milliseconds.
set -euo pipefail

# A relative SLUICE_BUILD_DIR means relative to where the caller stands.
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

# npm writes node_modules/.package-lock.json on every install; if it is newer
# than the lockfile and package.json, node_modules is what `npm ci` would give.
if [[ ! node_modules/.package-lock.json -nt package-lock.json ||
      ! node_modules/.package-lock.json -nt package.json ]]; then
  npm ci --no-audit --no-fund
fi

exec node --test --test-concurrency=1 "$@" sdk.test.mjs errors.test.mjs runs.test.mjs
