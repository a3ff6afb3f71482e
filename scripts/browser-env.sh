#!/usr/bin/env bash
# Installs what the dashboard's browser tests (tests/blackbox/ui) drive:
# Debian's headless `chromium` and its WebDriver server `chromium-driver`,
# with apt-get when either is missing (the CI machine is root; `apt-get
# update` runs first, as a fresh machine's package lists may be empty).
# The tests speak WebDriver to chromedriver through the `fantoccini` crate,
# so nothing else is needed. Idempotent and instant when installed; prints
# the chromedriver path on stdout (everything else goes to stderr).
set -euo pipefail

fail() {
    echo "browser-env: $*" >&2
    exit 1
}

driver() {
    command -v chromedriver 2>/dev/null || { [ -x /usr/bin/chromedriver ] && echo /usr/bin/chromedriver; }
}

installed() {
    command -v chromium >/dev/null 2>&1 && [ -n "$(driver)" ]
}

if ! installed; then
    command -v apt-get >/dev/null 2>&1 || fail "chromium and chromium-driver are missing and apt-get is not available to install them"
    [ "$(id -u)" -eq 0 ] || fail "chromium and chromium-driver are missing; installing them with apt-get needs root"
    # One installer at a time: test processes may call this at once.
    exec 9>/tmp/swarmd-browser-env.lock
    command -v flock >/dev/null 2>&1 && flock 9
    if ! installed; then
        echo "browser-env: installing chromium and chromium-driver with apt-get" >&2
        started=$(date +%s)
        apt-get update >&2 || fail "apt-get update failed (output above)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            chromium chromium-driver fonts-dejavu-core >&2 ||
            fail "apt-get install chromium chromium-driver failed (output above)"
        installed || fail "chromium or chromedriver is still missing after the install"
        echo "browser-env: installed in $(($(date +%s) - started)) s" >&2
    fi
fi
driver
