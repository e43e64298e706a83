"""A bounded load on `chronos serve` over loopback: 8 clients for a few seconds through
tools/serve_load.py, then it stops. No request fails, and the server's resident memory after the
load is what it was after a warm-up (no growth per request).

    python3 tests/server/load_test.py --chronos build/release/chronos --model tests/fixtures/gguf/mixtral-f32.gguf
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LOAD = os.path.join(HERE, "..", "..", "tools", "serve_load.py")


def load(port, pid, seconds):
    out = subprocess.run([sys.executable, LOAD, "--url", f"http://127.0.0.1:{port}", "--clients", "8", "--seconds",
                          str(seconds), "--max-tokens", "24", "--pid", str(pid), "--json"],
                         capture_output=True, text=True, timeout=seconds + 120)
    print(out.stdout.strip(), out.stderr.strip())
    return json.loads(out.stdout), out.returncode


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chronos", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args()
    # Under AddressSanitizer freed memory waits in a quarantine (256 MiB by default) that would read
    # as growth; it is turned off for this run, so the check means the same in both builds.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=0"]))
    proc = subprocess.Popen([args.chronos, "serve", "-m", args.model, "--port", "0", "--parallel", "4",
                             "--max-queue", "8", "-c", "256"], stderr=subprocess.PIPE, text=True, env=env)
    port = None
    deadline = time.time() + 60
    while time.time() < deadline and port is None:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else None
    if port is None:
        proc.kill()
        print("chronos serve did not start", file=sys.stderr)
        return 1
    failures = []
    try:
        warm, rc_warm = load(port, proc.pid, 1.5)
        run, rc = load(port, proc.pid, args.seconds)
        if rc_warm or rc or warm["errors"] or run["errors"]:
            failures.append(f"errors under load: {warm['errors']} + {run['errors']}")
        if run["requests"] < 8:
            failures.append(f"only {run['requests']} requests ran")
        growth = run["rss_after_mib"] - warm["rss_after_mib"]
        if growth > 16:
            failures.append(f"RSS grew {growth:.1f} MiB over {run['requests']} requests")
    finally:
        proc.send_signal(2)
        try:
            if proc.wait(timeout=30) != 0:
                failures.append(f"serve exited {proc.returncode}")
        except subprocess.TimeoutExpired:
            proc.kill()
            failures.append("serve did not stop within 30 s of SIGINT")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
