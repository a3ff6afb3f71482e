#!/usr/bin/env python3
"""Plays a hostile client against a swarmd binary and prints what it held.

Usage: scripts/hostile-probe.py BINARY [--sockets N] [--logins N]

Starts BINARY on 127.0.0.1:0 with a temporary state directory and
`auth.loopback_login = true`, then, with no credential at all:

- opens one silent socket and times how long the daemon keeps it;
- opens N idle sockets (default 300) and counts those accepted and those
  refused, with the daemon's open descriptors and RSS before and during;
- logs in with a rebinding page's `Host: evil.example` and with a
  cross-site `text/plain` form post;
- makes M credential-less logins in a row (default 200) and counts the
  accepted ones.

Prints one `key: value` line per figure (docs/benchmarks.md, Hostile
clients). Only loopback is touched; every loop is bounded.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def start(binary, tmp):
    config = os.path.join(tmp, "swarmd.toml")
    with open(config, "w") as f:
        f.write(
            '[server]\nbind = "127.0.0.1:0"\n[store]\nbackend = "sqlite"\n'
            f'state_dir = "{tmp}/state"\n[auth]\nloopback_login = true\n'
        )
    proc = subprocess.Popen(
        [binary, "serve", "--config", config],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUST_LOG": "warn"},
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"listening on http://(\S+)", line)
        if match:
            host, port = match.group(1).rsplit(":", 1)
            return proc, (host, int(port))
    proc.kill()
    sys.exit("the daemon did not report its address")


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def request(addr, method, path, headers, body=b""):
    """One request on a fresh connection; the status (0 when refused)."""
    req = urllib.request.Request(
        f"http://{addr[0]}:{addr[1]}{path}", data=body, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0


def silent_socket_lifetime(addr, limit):
    sock = socket.create_connection(addr)
    sock.settimeout(limit)
    started = time.time()
    try:
        closed = sock.recv(1) == b""
    except socket.timeout:
        closed = False
    except OSError:
        closed = True
    sock.close()
    return time.time() - started if closed else None


def flood(addr, count, pid):
    before = (fds(pid), rss_kib(pid))
    sockets, refused = [], 0
    for _ in range(count):
        try:
            sockets.append(socket.create_connection(addr, timeout=5))
        except OSError:
            refused += 1
    time.sleep(1)
    for sock in sockets:
        sock.settimeout(0.05)
        try:
            data = sock.recv(256)
            if data == b"" or data.startswith(b"HTTP/1.1 503"):
                refused += 1
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            refused += 1
    during = (fds(pid), rss_kib(pid))
    for sock in sockets:
        sock.close()
    return count - refused, refused, before, during


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--idle-wait", type=float, default=45.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, addr = start(args.binary, tmp)
        try:
            lifetime = silent_socket_lifetime(addr, args.idle_wait)
            print(
                "silent_socket_closed_after_s:",
                "held" if lifetime is None else f"{lifetime:.1f}",
            )
            held, refused, before, during = flood(addr, args.sockets, proc.pid)
            print(f"flood_sockets: {args.sockets}")
            print(f"flood_held: {held}")
            print(f"flood_refused: {refused}")
            print(f"fds_before: {before[0]}")
            print(f"fds_during: {during[0]}")
            print(f"rss_kib_before: {before[1]}")
            print(f"rss_kib_during: {during[1]}")
            time.sleep(1)
            port = addr[1]
            json_headers = {"Content-Type": "application/json"}
            rebinding = request(
                addr, "POST", "/v1/operators", {**json_headers, "Host": f"evil.example:{port}"}, b"{}"
            )
            print(f"rebinding_login_status: {rebinding}")
            cross_site = request(
                addr,
                "POST",
                "/v1/operators",
                {"Origin": "https://evil.example", "Content-Type": "text/plain"},
                b"{}",
            )
            print(f"cross_site_login_status: {cross_site}")
            accepted = sum(
                request(addr, "POST", "/v1/operators", json_headers, b"{}") == 201
                for _ in range(args.logins)
            )
            print(f"login_flood: {args.logins}")
            print(f"login_flood_accepted: {accepted}")
            print(f"fds_after: {fds(proc.pid)}")
            print(f"rss_kib_after: {rss_kib(proc.pid)}")
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
