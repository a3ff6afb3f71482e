#!/usr/bin/env python3
"""Measures the dashboard in headless Chromium against a running daemon
(docs/benchmarks.md, Dashboard). Standard library only; needs chromedriver
(scripts/browser-env.sh).

  ui-bench.py render URL TOKEN_FILE [ROUNDS]
      time to first render of the overview and of the task list (50 rows),
      each in a fresh browser: performance.now() when the view's data is
      in the DOM, median and max over ROUNDS (default 5).
  ui-bench.py hold URL TOKEN_FILE VIEW SECONDS
      keeps one dashboard open on VIEW (`#/tasks`, `#/overview`) for
      SECONDS, e.g. while swarmd-bench measures the daemon's CPU per task,
      and prints the CPU seconds the browser (chromedriver and every
      Chromium process) spent over those SECONDS, the data frames the
      page's event feed received over them and what the feed follows.
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

CAPS = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
    "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}}}}
VIEWS = {
    "overview": ("#/overview", "document.getElementById('ov-running')"),
    "tasks": ("#/tasks", "document.querySelectorAll('#task-rows tr').length >= 50"),
}


def session_cpu_secs(sid):
    """CPU seconds (user + system, reaped children included) of every
    live process in session `sid`."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state is fields[0], session fields[3], utime
        # fields[11], stime, cutime, cstime.
        if int(fields[3]) == sid:
            total += sum(int(x) for x in fields[11:15])
    return total / tick


class Driver:
    def __init__(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        # A session of its own, which Chromium joins: killed whole at the end.
        self.proc = subprocess.Popen(["chromedriver", f"--port={port}"], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(self.base + "/status")
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("chromedriver did not start")

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, method=method, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            return json.load(urllib.request.urlopen(req))["value"]
        except urllib.error.HTTPError as error:
            raise SystemExit(f"{method} {path}: {error.read()[:300]!r}")

    def open(self, url, token, hash_):
        """A fresh browser signed in (token in sessionStorage) on a view."""
        sid = self.call("POST", "/session", CAPS)["sessionId"]
        self.call("POST", f"/session/{sid}/url", {"url": url + "/ui"})
        self.call("POST", f"/session/{sid}/execute/sync", {
            "script": "sessionStorage.setItem('swarmd.token', arguments[0])", "args": [token]})
        self.call("POST", f"/session/{sid}/url", {"url": url + "/ui?fresh=1" + hash_})
        return sid

    def frames(self, sid):
        """The data frames the page's feed has received (`#live`'s `data-frames`)."""
        return int(self.call("POST", f"/session/{sid}/execute/sync", {
            "script": "return Number(document.getElementById('live').dataset.frames || 0)",
            "args": []}))

    def first_render_ms(self, sid, check):
        return self.call("POST", f"/session/{sid}/execute/async", {"script": """
            const done = arguments[arguments.length - 1];
            const tick = () => { if (%s) done(performance.now()); else setTimeout(tick, 5); };
            tick();""" % check, "args": []})


def main():
    mode, url, token = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().strip()
    driver = Driver()
    try:
        if mode == "render":
            rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
            out = {}
            for view, (hash_, check) in VIEWS.items():
                times = []
                for _ in range(rounds):
                    sid = driver.open(url, token, hash_)
                    times.append(driver.first_render_ms(sid, check))
                    driver.call("DELETE", f"/session/{sid}")
                out[view] = {"median_ms": round(statistics.median(times), 1),
                             "max_ms": round(max(times), 1)}
            print(json.dumps(out))
        elif mode == "hold":
            sid = driver.open(url, token, sys.argv[4])
            before = session_cpu_secs(driver.proc.pid)
            frames_before = driver.frames(sid)
            time.sleep(float(sys.argv[5]))
            spent = session_cpu_secs(driver.proc.pid) - before
            frames = driver.frames(sid) - frames_before
            feed = driver.call("POST", f"/session/{sid}/execute/sync", {
                "script": "return document.getElementById('live').title", "args": []})
            driver.call("DELETE", f"/session/{sid}")
            print(json.dumps({"view": sys.argv[4], "seconds": float(sys.argv[5]),
                              "browser_cpu_secs": round(spent, 2),
                              "feed_frames": frames, "feed": feed}))
        else:
            raise SystemExit(__doc__)
    finally:
        os.killpg(driver.proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
