#!/usr/bin/env bash
# The browser that tests report.html (tests/e2e/test_report_browser.py): Debian's chromium, driven by the
# pip package playwright through executable_path (Playwright's own browser download is not used). Installed
# once per machine (about 40 s), a no-op afterwards. Elsewhere: say what to install; the test then skips
# locally and fails under CI=true.
set -euo pipefail
log() { echo "[ensure-chromium] $*" >&2; }

if [ -n "${ORCHESTRATOR_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1; then exit 0; fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "No chromium found: install it (Debian/Ubuntu: apt-get install chromium) or point ORCHESTRATOR_CHROMIUM"
  log "at a Chromium or Chrome binary; the browser test of report.html needs it."
  exit 0
fi

log "Installing Debian's chromium for the report's browser test (about 40 s)..."
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}
command -v chromium >/dev/null && log "chromium $(chromium --version 2>/dev/null | awk '{print $2}') is installed."
