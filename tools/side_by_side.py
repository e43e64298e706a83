#!/usr/bin/env python3
"""Decode and prefill of Chronos and its peers, side by side, in interleaved rounds.

Each round runs, for every pair, every peer's `llama-bench` on the GGUF file (llama.cpp,
ik_llama.cpp: any build of llama-bench, each with its own flags) and then `chronos_bench_decode`
on the Chronos model (a pack folder, a checkpoint or the same GGUF file), at every thread count
and prompt length; the table gives the medians over the rounds and Chronos' ratio to each peer.
Every figure of every round is kept in the JSON output.

    tools/side_by_side.py --chronos-bench build/release/bench/chronos_bench_decode \
        --peer llama.cpp=peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench \
        --peer-args "llama.cpp=--repack 0" \
        --peer ik=peers/ik_llama_cpp_python-0.1.5/vendor/ik_llama.cpp/build/bin/llama-bench \
        --peer-args "ik=-rtr 1" \
        --pair q8_0=/tmp/synth-Q8_0.gguf:/tmp/synth-Q8_0.gguf --prompt 128,512 --rounds 3 --json out.json

(scripts/build_peers.sh builds both peers.) Only the standard library: it runs the benchmark
binaries and reads their JSON.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_peer(binary, gguf, prompts, gen, threads, extra):
    cmd = [binary, "-m", gguf, "-p", ",".join(map(str, prompts)), "-n", str(gen),
           "-t", ",".join(map(str, threads)), "-r", "1", "-o", "json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"side_by_side: {shlex.join(cmd)} failed: {last}")
    figures = {}
    for entry in json.loads(out.stdout):
        kind = f"prefill{entry['n_prompt']}" if entry["n_prompt"] > 0 else "decode"
        figures[f"{kind}/{int(entry['n_threads'])}"] = float(entry["avg_ts"])
    return figures


def run_chronos(binary, model, prompts, gen, threads, batch):
    figures = {}
    for prompt in prompts:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "out.json"
            b = min(batch, prompt)
            cmd = [binary, "-m", model, "-n", str(gen), "--threads", ",".join(map(str, threads)),
                   "--prompt", str(prompt), "--batches", str(b), "--json", str(path)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"side_by_side: {shlex.join(cmd)} failed: {out.stderr.strip()}")
            for entry in json.loads(path.read_text()):
                t = int(entry["threads"])
                figures.setdefault(f"decode/{t}", entry["decode_tokens_per_second"])
                figures[f"prefill{prompt}/{t}"] = entry["prefill_tokens_per_second_by_batch"][str(b)]
    return figures


def parse_named(specs, what):
    named = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            sys.exit(f"side_by_side: {what} {spec!r}: expected NAME=VALUE")
        named[name] = value
    return named


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chronos-bench", required=True)
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=LLAMA_BENCH",
                        help="a peer's llama-bench (repeat for more peers)")
    parser.add_argument("--peer-args", action="append", default=[], metavar="NAME=FLAGS",
                        help="more llama-bench flags for that peer, for example 'ik=-rtr 1'")
    parser.add_argument("--llama-bench", help="the same as --peer llama.cpp=PATH")
    parser.add_argument("--llama-args", default="", help="the same as --peer-args 'llama.cpp=FLAGS'")
    parser.add_argument("--pair", action="append", required=True, metavar="NAME=CHRONOS_MODEL:GGUF")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", default="128", help="prompt lengths, comma-separated")
    parser.add_argument("--gen", type=int, default=32)
    parser.add_argument("--batch", type=int, default=512,
                        help="Chronos' largest prefill batch (a prompt goes in batches of min(batch, prompt))")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write every round's figures here")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    prompts = [int(p) for p in args.prompt.split(",")]
    peers = parse_named(args.peer, "--peer")
    if args.llama_bench:
        peers["llama.cpp"] = args.llama_bench
    peer_args = {name: shlex.split(flags) for name, flags in parse_named(args.peer_args, "--peer-args").items()}
    if args.llama_args:
        peer_args["llama.cpp"] = shlex.split(args.llama_args)
    if not peers:
        sys.exit("side_by_side: no peer (--peer NAME=LLAMA_BENCH or --llama-bench)")
    for name, binary in peers.items():
        if not Path(binary).exists():
            sys.exit(f"side_by_side: --peer {name}: {binary} does not exist")
    for name in peer_args:
        if name not in peers:
            sys.exit(f"side_by_side: --peer-args {name}: no --peer of that name")
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
            this_round[name] = {peer: run_peer(binary, gguf, prompts, args.gen, threads, peer_args.get(peer, []))
                                for peer, binary in peers.items()}
            this_round[name]["chronos"] = run_chronos(args.chronos_bench, model, prompts, args.gen, threads,
                                                      args.batch)
            print(f"round {r + 1} {name}: " + json.dumps(this_round[name]), file=sys.stderr)
        rounds.append(this_round)

    def median(name, engine, key):
        return statistics.median(rnd[name][engine][key] for rnd in rounds)

    slash = " / ".join
    kinds = ["decode"] + [f"prefill{p}" for p in prompts]
    print("| pair | engine | decode | " + " | ".join(f"prefill {p}" for p in prompts) + " |")
    print("|---|---|---" + "|---" * len(prompts) + "|")
    for name, _, _ in pairs:
        ours = {k: [median(name, "chronos", f"{k}/{t}") for t in threads] for k in kinds}
        print(f"| {name} | Chronos | " + " | ".join(slash(f"{v:.1f}" for v in ours[k]) for k in kinds) + " |")
        for peer in peers:
            label = shlex.join([peer] + peer_args.get(peer, []))
            theirs = {k: [median(name, peer, f"{k}/{t}") for t in threads] for k in kinds}
            print(f"| {name} | {label} | " + " | ".join(slash(f"{v:.1f}" for v in theirs[k]) for k in kinds) + " |")
            print(f"| {name} | **Chronos / {peer}** | "
                  + " | ".join(slash(f"{a / b:.2f}" for a, b in zip(ours[k], theirs[k])) for k in kinds) + " |")
    print(f"(tok/s at {slash(map(str, threads))} threads, medians of {args.rounds} interleaved rounds; "
          f"decode {args.gen} tokens; Chronos prefill in batches of up to {args.batch})")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "prompts": prompts, "gen": args.gen,
                                               "batch": args.batch, "pairs": pairs, "peers": peers,
                                               "peer_args": peer_args, "rounds": rounds}, indent=2) + "\n")


if __name__ == "__main__":
    main()
