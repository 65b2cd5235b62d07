#!/usr/bin/env bash
# Install the Node tools the test suite drives (the MCP Inspector CLI) into tests/node/node_modules,
# pinned by package-lock.json. Used by .ci/run; run it by hand to enable tests/test_mcp_inspector.py.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: skipping the Node test tools (tests/test_mcp_inspector.py will be skipped)" >&2
  exit 0
fi
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
test -x node_modules/.bin/mcp-inspector
echo "mcp-inspector $(node -p "require('@modelcontextprotocol/inspector/package.json').version") installed in $(pwd)/node_modules"
