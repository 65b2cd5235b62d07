#!/usr/bin/env bash
# Install the real agent CLIs the end-to-end tests drive (Claude Code, Gemini CLI, Codex CLI) at the
# versions pinned in node/package-lock.json, into tests/e2e/node/node_modules (where conftest.py looks).
# Idempotent: skips the install when node_modules already matches the lock (a stamp holds its hash).
set -euo pipefail
cd "$(dirname "$0")/node"

if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the agent CLIs are not installed and the e2e tests will skip" >&2
  exit 0
fi

stamp=node_modules/.exo-lock-sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ -x node_modules/.bin/claude ] && [ -x node_modules/.bin/gemini ] && [ -x node_modules/.bin/codex ]; then
  echo "agent CLIs already installed (lock unchanged)"
  exit 0
fi

npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
node_modules/.bin/claude --version
node_modules/.bin/gemini --version
node_modules/.bin/codex --version
