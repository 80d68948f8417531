#!/usr/bin/env bash
# Runs Scripts/console-browser.py (the admin console in headless Chromium, Selenium) against a running console:
#   Scripts/console-browser.sh URL CREDENTIAL SCREENSHOT_DIR
# Installs Debian's chromium and chromium-driver and Selenium from PyPI when missing. ConsoleBrowserTests calls it
# with a store it prepared; `KIOSK_CONSOLE_SCREENSHOTS=docs/console swift test --filter ConsoleBrowserTests`
# refreshes the screenshots in docs/console/.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "console-browser: installing chromium and chromium-driver" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y chromium chromium-driver >/dev/null ||
    { $sudo apt-get update >/dev/null && $sudo apt-get install -y chromium chromium-driver >/dev/null; }
fi
if ! python3 -c "import selenium" 2>/dev/null; then
  echo "console-browser: installing selenium" >&2
  python3 -m pip install --quiet selenium 2>/dev/null || python3 -m pip install --quiet --break-system-packages selenium
fi
exec python3 "$(dirname "$0")/console-browser.py" "$@"
