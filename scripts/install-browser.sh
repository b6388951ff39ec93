#!/usr/bin/env bash
# Installs Debian's chromium, the headless browser of the HTML report's real-browser test
# (tests/test_html_report.cpp, [report][browser]) and of scripts/make-report-screenshot.sh.
# Best effort, like scripts/install-ort.sh: `make test` turns a failure into a warning and the
# browser test skips with a message. Idempotent: with chromium installed it needs no network.
# Measured on a Debian 12 machine with a warm apt mirror: see docs/cli.md (fusectl report).
set -euo pipefail
# --no-install-recommends keeps out the desktop extras; fonts-dejavu-core gives the headless
# renderer one known font, so screenshots look the same from machine to machine.
bash "$(dirname "${BASH_SOURCE[0]}")/apt-install-missing.sh" install-browser \
  chromium fonts-dejavu-core
command -v chromium >/dev/null || { echo "install-browser: chromium not on PATH" >&2; exit 1; }
echo "install-browser: $(chromium --version 2>/dev/null || echo chromium)"
