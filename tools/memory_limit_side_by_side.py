#!/usr/bin/env python3
"""A model that does not fit, side by side: Chronos streaming a GGUF file in place, Chronos on its
pack, and llama.cpp mapping the same GGUF file, each under the same cgroup memory limit.

For every share of the expert bytes (--shares 25,50) the limit is the file's dense bytes plus that
share of its expert bytes plus --overhead (KV store, scratch, code: the same for every engine).
Each run starts with the page cache dropped, in a fresh memory cgroup (v1 or v2) holding only it,
and reports decode tok/s, time to first token (load + prefill, as a user waits for it), bytes read
from storage (the process's block input, getrusage) per generated token, the cgroup's peak and
whether the kernel killed it. Chronos runs with --expert-cache auto, so it sizes its cache from
the limit it finds; llama.cpp maps the file (its default) and leaves the rest to the page cache.
Rounds interleave the engines; the table gives medians. Needs root (cgroups, drop_caches).

    tools/memory_limit_side_by_side.py --chronos build/release/chronos \\
        --llama-completion peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-completion \\
        --gguf /tmp/synth-Q4_K_M.gguf --pack /tmp/synth-Q4_K_M-pack --shares 25,50 --rounds 2 \\
        --json out.json

Only the standard library.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = ("The history of the river valley begins with the mills that lined its banks, each one "
          "turning grain into flour for the villages upstream, and")


class Cgroup:
    """One memory cgroup with a limit; v2 when the unified hierarchy has the memory controller."""

    def __init__(self, name, limit):
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        self.v2 = v2.exists() and "memory" in v2.read_text().split()
        root = Path("/sys/fs/cgroup") if self.v2 else Path("/sys/fs/cgroup/memory")
        self.path = root / name
        if self.path.exists():
            self.path.rmdir()
        self.path.mkdir()
        if self.v2:
            (self.path / "memory.max").write_text(str(limit))
            (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def enter(self):  # runs in the child before exec
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self):
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        f = self.path / name
        return int(f.read_text()) if f.exists() else None

    def oom_kills(self):
        if self.v2:
            text = (self.path / "memory.events").read_text()
        else:
            text = (self.path / "memory.oom_control").read_text()
        m = re.search(r"oom_kill (\d+)", text)
        return int(m.group(1)) if m else 0

    def remove(self):
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def run_limited(cmd, limit):
    """Runs cmd in a fresh cgroup at `limit` bytes; returns (rc, stdout, stderr, rusage, peak, oom)."""
    drop_caches()
    group = Cgroup(f"chronos_side_by_side_{os.getpid()}", limit)
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=group.enter)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            return (proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                    usage, group.peak(), group.oom_kills())
    finally:
        group.remove()


def measured(cmd, limit):
    """What every engine's run reports, and its stderr."""
    rc, _, err, usage, peak, oom = run_limited(cmd, limit)
    row = {"rc": rc, "peak_bytes": peak, "oom_kills": oom, "read_bytes": usage.ru_inblock * 512,
           "command": " ".join(cmd)}
    if rc < 0:
        row["error"] = f"killed by signal {-rc}" + (" (the cgroup's OOM killer)" if oom else "")
    elif rc != 0:
        row["error"] = (err.strip().splitlines() or ["no message"])[-1]
    return row, err


def chronos_run(binary, model, n, threads, limit):
    with tempfile.NamedTemporaryFile(suffix=".json") as stats:
        cmd = [binary, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0", "--ignore-eos",
               "-t", str(threads), "-c", "512", "--expert-cache", "auto", "--stats-json", stats.name]
        row, err = measured(cmd, limit)
        if row["rc"] != 0:
            return row
        s = json.loads(Path(stats.name).read_text())
    budget = re.search(r"--expert-cache auto: (.*)", err)
    row.update({"decode_tps": s["decode_tokens_per_second"],
                "ttft_s": s["load_seconds"] + s["time_to_first_token_seconds"],
                "generated": s["generated_tokens"],
                "expert_bytes_read": s.get("experts", {}).get("bytes_read"),
                "auto": budget.group(1) if budget else None})
    return row


def llama_run(binary, gguf, n, threads, limit):
    cmd = [binary, "-m", gguf, "-p", PROMPT, "-n", str(n), "-t", str(threads), "-c", "512", "--temp", "0",
           "--ignore-eos", "-no-cnv"]
    row, err = measured(cmd, limit)
    if row["rc"] != 0:
        return row

    def ms(label):
        m = re.search(label + r"\s*=\s*([0-9.]+) ms(?: /\s*(\d+))?", err)
        if not m:
            sys.exit(f"memory_limit_side_by_side: no '{label}' in llama.cpp's output")
        return float(m.group(1)), int(m.group(2) or 0)

    load, _ = ms("load time")
    prompt, _ = ms("prompt eval time")
    decode, runs = ms(r"(?<!prompt )eval time")
    row.update({"decode_tps": runs / (decode / 1e3) if decode > 0 else None,
                "ttft_s": (load + prompt) / 1e3, "generated": runs + 1})
    return row


def inspect_sizes(binary, gguf):
    out = subprocess.run([binary, "inspect", gguf, "--json"], capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    return j["dense_bytes"], j["expert_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chronos", required=True)
    ap.add_argument("--llama-completion", help="llama.cpp's llama-completion (omit to run Chronos only)")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--pack", help="Chronos' pack of the same file (omit to skip)")
    ap.add_argument("--shares", default="25,50", help="percent of the expert bytes the limit leaves")
    ap.add_argument("--overhead", type=int, default=256, help="MiB beside dense and experts (default 256)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("memory_limit_side_by_side: needs root (memory cgroups, drop_caches)")
    dense, experts = inspect_sizes(args.chronos, args.gguf)
    engines = [("chronos gguf", lambda lim: chronos_run(args.chronos, args.gguf, args.n, args.threads, lim))]
    if args.pack:
        engines.append(("chronos pack", lambda lim: chronos_run(args.chronos, args.pack, args.n, args.threads, lim)))
    if args.llama_completion:
        engines.append(("llama.cpp mmap",
                        lambda lim: llama_run(args.llama_completion, args.gguf, args.n, args.threads, lim)))
    results = []
    print(f"{args.gguf}: dense {dense / 2**20:.0f} MiB, experts {experts / 2**20:.0f} MiB", flush=True)
    for share in [int(s) for s in args.shares.split(",")]:
        limit = dense + experts * share // 100 + (args.overhead << 20)
        for r in range(args.rounds):
            for name, run in engines:
                row = run(limit)
                row.update({"engine": name, "share": share, "limit_bytes": limit, "round": r})
                results.append(row)
                print(json.dumps(row), flush=True)
    print()
    print("| limit | engine | decode tok/s | first token s | read MB per token | peak MiB | killed |")
    print("|---|---|---|---|---|---|---|")
    for share in [int(s) for s in args.shares.split(",")]:
        for name, _ in engines:
            rows = [x for x in results if x["share"] == share and x["engine"] == name]
            ok = [x for x in rows if x["rc"] == 0]
            limit = rows[0]["limit_bytes"]
            label = f"{share}% ({limit / 2**20:.0f} MiB)"
            if not ok:
                print(f"| {label} | {name} | failed: {rows[0].get('error')} | | | | "
                      f"{sum(x['oom_kills'] for x in rows)} of {len(rows)} |")
                continue
            med = lambda key: statistics.median(x[key] for x in ok)
            per_token = statistics.median(x["read_bytes"] / max(1, x["generated"]) for x in ok) / 1e6
            peak = max(x["peak_bytes"] or 0 for x in ok) / 2**20
            print(f"| {label} | {name} | {med('decode_tps'):.2f} | {med('ttft_s'):.2f} | {per_token:.1f} | "
                  f"{peak:.0f} | {sum(x['oom_kills'] for x in rows)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
