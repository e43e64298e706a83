#!/usr/bin/env python3
"""Decode and prefill of Chronos and llama.cpp, side by side, in interleaved rounds.

Each round runs, for every pair, llama.cpp's `llama-bench` on the GGUF file and then
`chronos_bench_decode` on the Chronos model (a pack folder, a checkpoint or the same GGUF file),
at every thread count; the table gives the medians over the rounds and the ratio of the medians.
Every figure of every round is kept in the JSON output.

    tools/side_by_side.py --llama-bench LLAMA_BIN/llama-bench \
        --chronos-bench build/release/bench/chronos_bench_decode \
        --pair bf16=/tmp/synth-bf16:/tmp/synth-bf16.gguf \
        --pair q4_k=/tmp/synth-q4_k:/tmp/synth-Q4_K_M.gguf --rounds 3 --json out.json

Only the standard library: it runs the two benchmark binaries and reads their JSON.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_llama(binary, gguf, prompt, gen, threads, extra):
    cmd = [binary, "-m", gguf, "-p", str(prompt), "-n", str(gen), "-t", ",".join(map(str, threads)),
           "-r", "1", "-o", "json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"side_by_side: {' '.join(cmd)} failed: {last}")
    figures = {}
    for entry in json.loads(out.stdout):
        kind = "prefill" if entry["n_prompt"] > 0 else "decode"
        figures[(kind, int(entry["n_threads"]))] = float(entry["avg_ts"])
    return figures


def run_chronos(binary, model, prompt, gen, threads, batch):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.json"
        cmd = [binary, "-m", model, "-n", str(gen), "--threads", ",".join(map(str, threads)),
               "--prompt", str(prompt), "--batches", str(batch), "--json", str(path)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"side_by_side: {' '.join(cmd)} failed: {out.stderr.strip()}")
        figures = {}
        for entry in json.loads(path.read_text()):
            t = int(entry["threads"])
            figures[("decode", t)] = entry["decode_tokens_per_second"]
            figures[("prefill", t)] = entry["prefill_tokens_per_second_by_batch"][str(batch)]
            figures[("read_gb_s", t)] = entry["read_bandwidth_bytes_per_second"] / 1e9
        return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-bench", required=True)
    parser.add_argument("--chronos-bench", required=True)
    parser.add_argument("--pair", action="append", required=True, metavar="NAME=CHRONOS_MODEL:GGUF")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=32)
    parser.add_argument("--batch", type=int, default=128, help="Chronos prefill batch (llama.cpp: its default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llama-args", default="", help="more llama-bench flags, for example '--repack 0'")
    parser.add_argument("--json", help="write every round's figures here")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    pairs = []
    for spec in args.pair:
        name, sep, rest = spec.partition("=")
        model, sep2, gguf = rest.rpartition(":")
        if not sep or not sep2 or not name or not model or not gguf:
            sys.exit(f"side_by_side: --pair {spec!r}: expected NAME=CHRONOS_MODEL:GGUF")
        for p in (model, gguf):
            if not Path(p).exists():
                sys.exit(f"side_by_side: --pair {name}: {p} does not exist")
        pairs.append((name, model, gguf))

    rounds = []
    for r in range(args.rounds):
        this_round = {}
        for name, model, gguf in pairs:
            llama = run_llama(args.llama_bench, gguf, args.prompt, args.gen, threads, args.llama_args.split())
            chronos = run_chronos(args.chronos_bench, model, args.prompt, args.gen, threads, args.batch)
            this_round[name] = {"llama.cpp": {f"{k}/{t}": v for (k, t), v in llama.items()},
                                "chronos": {f"{k}/{t}": v for (k, t), v in chronos.items()}}
            print(f"round {r + 1} {name}: " + json.dumps(this_round[name]), file=sys.stderr)
        rounds.append(this_round)

    def median(name, engine, key):
        return statistics.median(rnd[name][engine][key] for rnd in rounds)

    slash = " / ".join
    print("| pair | decode, Chronos | decode, llama.cpp | ratio | prefill, Chronos | prefill, llama.cpp | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, _, _ in pairs:
        cells = []
        for kind in ("decode", "prefill"):
            ours = [median(name, "chronos", f"{kind}/{t}") for t in threads]
            theirs = [median(name, "llama.cpp", f"{kind}/{t}") for t in threads]
            cells += [slash(f"{v:.1f}" for v in ours), slash(f"{v:.1f}" for v in theirs),
                      slash(f"{a / b:.2f}" for a, b in zip(ours, theirs))]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"(tok/s at {slash(map(str, threads))} threads, medians of {args.rounds} interleaved rounds; "
          f"decode {args.gen} tokens, prefill {args.prompt} tokens, Chronos at -b {args.batch})")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "prompt": args.prompt, "gen": args.gen,
                                               "batch": args.batch, "pairs": pairs, "rounds": rounds}, indent=2) + "\n")


if __name__ == "__main__":
    main()
