#!/usr/bin/env python3
"""A bounded load on an OpenAI-compatible server (chronos serve, llama-server): N clients, each
sending streamed completions one after another for M seconds or R requests, then it stops.

Reports aggregate generated tokens per second over the run's wall time, the time per output token
(the gaps between a request's streamed tokens after its first) at p50 and p99, time to first token,
errors, and, when --pid is given, the server's resident memory before and after (a flat RSS under
load). Standard library only, so it runs against any server.

    tools/serve_load.py --url http://127.0.0.1:8080 --clients 4 --requests 3 --max-tokens 32
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "The history of the river begins",
    "Once upon a time in a village by the sea",
    "The old mill stood by the water and",
    "In the beginning there was",
    "A short story about a clockmaker who",
    "The rules of the game are simple:",
    "Dear friend, I write to tell you that",
    "The recipe calls for flour, water and",
]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one_request(url, prompt, max_tokens, key, timeout):
    """A streamed completion: (arrival times of its content chunks, error or None)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    start = time.perf_counter()
    times = []
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return start, times, f"HTTP {resp.status}: {resp.read()[:200]!r}"
        buf = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    return start, times, None
                obj = json.loads(data)
                if obj.get("choices") and obj["choices"][0].get("text"):
                    times.append(time.perf_counter())
        return start, times, "the stream ended without [DONE]"
    except Exception as e:  # noqa: BLE001 - any failure is an error of the run
        return start, times, repr(e)
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=0, help="requests per client (0: until --seconds)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--api-key", default="")
    p.add_argument("--pid", type=int, default=0, help="the server's pid, for its RSS")
    p.add_argument("--label", default="")
    p.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = p.parse_args()

    rss_before = rss_kib(args.pid) if args.pid else 0
    lock = threading.Lock()
    gaps, first, counts, errors = [], [], [], []
    deadline = time.perf_counter() + args.seconds

    def client(i):
        n = 0
        while (args.requests and n < args.requests) or (not args.requests and time.perf_counter() < deadline):
            prompt = PROMPTS[(i + n) % len(PROMPTS)] + f" ({i}.{n})"
            start, times, error = one_request(args.url, prompt, args.max_tokens, args.api_key, 600)
            with lock:
                if error:
                    errors.append(error)
                if times:
                    first.append(times[0] - start)
                    gaps.extend(b - a for a, b in zip(times, times[1:]))
                if not error:
                    # ignore_eos: every request generates max_tokens (a chunk may hold more than one
                    # token where a character spans tokens).
                    counts.append(args.max_tokens)
            n += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rss_after = rss_kib(args.pid) if args.pid else 0

    def pct(xs, q):
        if not xs:
            return float("nan")
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    out = {
        "label": args.label,
        "clients": args.clients,
        "requests": len(counts) + len(errors),
        "errors": len(errors),
        "tokens": sum(counts),
        "wall_s": wall,
        "tok_per_s": sum(counts) / wall if wall > 0 else 0.0,
        "tpot_p50_ms": pct(gaps, 0.5) * 1e3,
        "tpot_p99_ms": pct(gaps, 0.99) * 1e3,
        "ttft_p50_ms": (statistics.median(first) * 1e3) if first else float("nan"),
        "rss_before_mib": rss_before / 1024,
        "rss_after_mib": rss_after / 1024,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.label} clients {args.clients}: {out['requests']} requests, {out['errors']} errors, "
              f"{out['tokens']} tokens in {wall:.1f} s = {out['tok_per_s']:.1f} tok/s; time per output token "
              f"p50 {out['tpot_p50_ms']:.1f} ms, p99 {out['tpot_p99_ms']:.1f} ms; first token p50 "
              f"{out['ttft_p50_ms']:.0f} ms" + (f"; RSS {out['rss_before_mib']:.0f} -> {out['rss_after_mib']:.0f} MiB"
                                                 if args.pid else ""))
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
