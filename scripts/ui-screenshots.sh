#!/usr/bin/env bash
# Regenerates the dashboard's screenshots in docs/img/ (shown in the README
# and docs/dashboard.md): runs the black-box test that renders every view
# with real data in headless Chromium, with SWARMD_UI_SCREENSHOTS pointing
# there. Needs what the browser tests need (scripts/browser-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/browser-env.sh >/dev/null
SWARMD_UI_SCREENSHOTS="$PWD/docs/img" cargo test -p swarmd-server --test blackbox \
    ui::screenshots -- --exact ui::screenshots::every_view_renders_with_real_data_and_is_captured
ls -l docs/img/dashboard-*.png
