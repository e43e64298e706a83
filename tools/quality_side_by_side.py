#!/usr/bin/env python3
"""Quality of llama.cpp's GGUF weight types on the demo model, measured by Chronos and by llama.cpp.

From the demo checkpoint this writes a BF16 GGUF file (tools/make_gguf_fixtures.py's writer), an
importance matrix on the train prompts (llama-imatrix), and one file per type (llama-quantize);
then it scores every file on the held-out prompts with both engines:

- Chronos: `chronos perplexity -m FILE --ref MODEL -f TEST_TEXT --windows W -c CTX`, once with
  CHRONOS_BLOCK_ACTIVATIONS=f32 (exact products) and once without (the default 8-bit activations);
  a file Chronos refuses gets its message in the table.
- llama.cpp: `llama-perplexity -c CTX --chunks W` on the BF16 file with --kl-divergence-base, then on
  each quantized file with --kl-divergence (perplexity change, mean KLD, "same top p").

Both cut the token stream into the same windows of CTX tokens and score their second halves
(Chronos scores CTX/2 tokens per window, llama.cpp CTX/2 - 1: it does not score the first token of
the half). The script checks that llama.cpp's tokens (read back from its KL base file) equal
`chronos tokenize`'s. It prints a markdown table; every run's output is kept under --work/logs.
Steps whose output exists are skipped, so an interrupted run resumes.

Building llama.cpp (the source llama-cpp-python vendors; no network needed beyond PyPI):

    pip download --no-deps --no-binary :all: llama-cpp-python   # then unpack the sdist
    cd llama_cpp_python-*/vendor/llama.cpp
    cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \\
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
    cmake --build build --target llama-quantize llama-imatrix llama-perplexity

Then, with a Python that has the `gguf` package (pip install gguf numpy):

    python tools/quality_side_by_side.py --llama-bin LLAMA_CPP/build/bin \\
        --chronos build/release/chronos --work /tmp/quality
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gguf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import make_gguf_fixtures as fixtures  # noqa: E402
# llama-quantize type names; IQ3 and below get the importance matrix (IQ2/IQ1 refuse to run without one).
TYPES = ["Q4_1", "Q5_1", "IQ4_NL", "IQ4_XS", "MXFP4_MOE", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS",
         "IQ1_M", "IQ1_S"]
NEEDS_IMATRIX = {"IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S"}
EXPERT_TENSOR = re.compile(r"blk\.\d+\.ffn_(gate|up|down)_exps\.weight")


def run(cmd, log: Path, env=None) -> subprocess.CompletedProcess:
    """Runs cmd with its stdout and stderr together in log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print("+ " + " ".join(map(str, cmd)), file=sys.stderr)
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    log.write_text(f"$ {' '.join(map(str, cmd))}\n{out.stdout}{out.stderr}exit {out.returncode}\n")
    return out


def run_or_exit(cmd, log: Path) -> subprocess.CompletedProcess:
    out = run(cmd, log)
    if out.returncode != 0:
        sys.exit(f"quality_side_by_side: failed (exit {out.returncode}), see {log}")
    return out


def join_prompts(jsonl: Path, out: Path) -> None:
    """The prompts of a .jsonl joined by blank lines: the text chronos perplexity reads from it."""
    prompts = [json.loads(line)["prompt"] for line in jsonl.read_text().splitlines() if line.strip()]
    out.write_text("\n\n".join(prompts))


def write_base_file(model: Path, out: Path) -> None:
    """The checkpoint's BF16 weights as GGUF, as tools/pack_to_gguf.py writes them, plus output.weight:
    llama.cpp's qwen2moe requires that tensor (it has no tied-embedding fallback), so a model with
    tie_word_embeddings stores its embedding a second time under that name."""
    config = json.loads((model / "config.json").read_text())
    tensors = fixtures.Checkpoint(model)
    if config.get("tie_word_embeddings") and "lm_head.weight" not in tensors.tensors:
        tensors.tensors["lm_head.weight"] = tensors.tensors["model.embed_tokens.weight"]
    fixtures.write_model_fixture(model, tensors, out, "bf16")


def expert_summary(path: Path) -> tuple[str, float, str]:
    """(types of the routed-expert tensors, their bits per weight, type counts of the other tensors)."""
    reader = gguf.GGUFReader(str(path))
    kinds: dict[str, set] = {}
    bits = elements = 0
    others = Counter()
    for t in reader.tensors:
        m = EXPERT_TENSOR.fullmatch(t.name)
        if m is None:
            others[t.tensor_type.name] += 1
            continue
        kinds.setdefault("down" if m.group(1) == "down" else "gate/up", set()).add(t.tensor_type.name)
        bits += int(t.n_bytes) * 8
        elements += int(t.n_elements)
    types = ", ".join(f"{k} {'+'.join(sorted(v))}" for k, v in sorted(kinds.items(), reverse=True))
    return types, bits / elements, ", ".join(f"{k} {n}" for k, n in others.most_common())


def kld_base_tokens(path: Path) -> list[int]:
    """The evaluation tokens llama-perplexity stored in its KL base file (after "_logits_" and n_ctx,
    n_vocab, n_chunk)."""
    with path.open("rb") as f:
        assert f.read(8) == b"_logits_", path
        n_ctx, _, n_chunk = struct.unpack("<Iii", f.read(12))
        return list(struct.unpack(f"<{n_ctx * n_chunk}i", f.read(4 * n_ctx * n_chunk)))


def llama_figures(text: str) -> dict:
    def number(pattern):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else None
    return {"ppl": number(r"Mean PPL\(Q\)\s*:\s*([\d.]+)"), "ppl_base": number(r"Mean PPL\(base\)\s*:\s*([\d.]+)"),
            "kld": number(r"Mean\s+KLD:\s*([\d.]+)"), "same_top_p": number(r"Same top p:\s*([\d.]+)")}


def chronos_figures(args, model: Path, text: Path, activations: str, log: Path) -> dict:
    """chronos perplexity's JSON, or {"refused": its last line of stderr}."""
    out_json = log.with_suffix(".json")
    if not out_json.exists():
        env = dict(os.environ)
        env.pop("CHRONOS_BLOCK_ACTIVATIONS", None)
        if activations == "f32":
            env["CHRONOS_BLOCK_ACTIVATIONS"] = "f32"
        cmd = [args.chronos, "perplexity", "-m", model, "--ref", args.model, "-f", text, "--windows", args.windows,
               "-c", args.ctx_size, "--json", out_json]
        if args.threads:
            cmd += ["-t", args.threads]
        out = run(cmd, log, env)
        if out.returncode != 0:
            lines = out.stderr.strip().splitlines() or [f"exit {out.returncode}"]
            return {"refused": lines[-1]}
    return json.loads(out_json.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's build/bin")
    parser.add_argument("--chronos", type=Path, default=REPO / "build" / "release" / "chronos")
    parser.add_argument("--model", type=Path, default=REPO / "models" / "default", help="the demo checkpoint")
    parser.add_argument("--work", type=Path, required=True, help="folder for the files, figures and logs")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--ctx-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="threads of both engines (0: their defaults)")
    parser.add_argument("--types", default=",".join(TYPES), help="llama-quantize types, comma-separated")
    args = parser.parse_args()
    work, logs = args.work, args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    llama = {name: args.llama_bin / f"llama-{name}" for name in ("quantize", "imatrix", "perplexity")}
    threads = ["-t", str(args.threads)] if args.threads else []
    # --no-repack: llama.cpp's plain CPU kernels. With its extra buffer types (AMX, repacked
    # layouts) llama-perplexity crashed on an AMX CPU loading the Q4_1 file (build 0c1e570).
    plain = ["--no-repack"]

    # Texts: the held-out prompts (what chronos perplexity scores by default) and the train prompts.
    test_text, train_text = work / "test.txt", work / "train.txt"
    join_prompts(args.model / "prompts" / "test.jsonl", test_text)
    join_prompts(args.model / "prompts" / "train.jsonl", train_text)

    base = work / "demo-BF16.gguf"
    if not base.exists():
        write_base_file(args.model, base)

    imatrix = work / "imatrix.gguf"
    if not imatrix.exists():
        run_or_exit([llama["imatrix"], "-m", base, "-f", train_text, "-o", imatrix, "-c", args.ctx_size, *plain,
                     *threads], logs / "imatrix.log")

    types = [t for t in args.types.split(",") if t]
    files = {"BF16": base}
    for t in types:
        files[t] = work / f"demo-{t}.gguf"
        if not files[t].exists():
            with_imatrix = ["--imatrix", imatrix] if t in NEEDS_IMATRIX else []
            nthreads = [str(args.threads)] if args.threads else []  # llama-quantize: its last positional
            run_or_exit([llama["quantize"], *with_imatrix, base, files[t], t, *nthreads], logs / f"quantize-{t}.log")

    # llama.cpp: the BF16 file's logits are the base of every KL figure.
    kld_base = work / "base.kld"
    ctx = ["-c", args.ctx_size, "--chunks", args.windows]
    if not kld_base.exists():
        run_or_exit([llama["perplexity"], "-m", base, "-f", test_text, *ctx, "--kl-divergence-base", kld_base, *plain,
                     *threads], logs / "llama-BF16.log")
    m = re.search(r"Final estimate: PPL = ([\d.]+)", (logs / "llama-BF16.log").read_text())
    llama_base_ppl = float(m.group(1)) if m else None

    ours = json.loads(run_or_exit([args.chronos, "tokenize", "-m", args.model, "-f", test_text, "--ids",
                                   "--no-special"], logs / "tokenize.log").stdout)
    theirs = kld_base_tokens(kld_base)
    same_tokens = ours[:len(theirs)] == theirs

    rows = {}
    for t, path in files.items():
        row = {"file": str(path), "bytes": path.stat().st_size}
        row["expert_types"], row["expert_bpw"], row["other_tensors"] = expert_summary(path)
        for activations in ("f32", "int8"):
            row[f"chronos_{activations}"] = chronos_figures(args, path, test_text, activations,
                                                            logs / f"chronos-{t}-{activations}.log")
        if t != "BF16":
            log = logs / f"llama-{t}.log"
            if not log.exists() or llama_figures(log.read_text())["kld"] is None:
                run([llama["perplexity"], "-m", path, *ctx, "--kl-divergence-base", kld_base, "--kl-divergence",
                     *plain, *threads], log)
            row["llama"] = llama_figures(log.read_text())
        rows[t] = row
    (work / "figures.json").write_text(json.dumps(rows, indent=2) + "\n")

    def chronos_cells(f: dict) -> list[str]:
        if "refused" in f:
            return [f"refused: {f['refused']}", "", ""]
        return [f"{100 * f['perplexity_change']:+.3f}%", f"{f['mean_kl']:.5f}", f"{100 * f['top1_agreement']:.1f}%"]

    def llama_cells(f: dict | None) -> list[str]:
        if f is None:
            return ["(base)", "", ""]
        if f["kld"] is None:
            return ["failed", "", ""]
        return [f"{100 * (f['ppl'] / f['ppl_base'] - 1):+.3f}%", f"{f['kld']:.5f}", f"{f['same_top_p']:.1f}%"]

    print("| type | expert tensors | expert bpw | file MB | Chronos exact: Δppl | KL | top-1 "
          "| Chronos 8-bit: Δppl | KL | top-1 | llama.cpp: Δppl | KLD | same top p |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t, row in rows.items():
        cells = [t, row["expert_types"], f"{row['expert_bpw']:.2f}", f"{row['bytes'] / 1e6:.1f}",
                 *chronos_cells(row["chronos_f32"]), *chronos_cells(row["chronos_int8"]),
                 *llama_cells(row.get("llama"))]
        print("| " + " | ".join(cells) + " |")
    ref = rows["BF16"]["chronos_f32"]
    print(f"\nReference perplexity: Chronos {ref.get('reference_perplexity', float('nan')):.4f} over "
          f"{ref.get('tokens')} tokens; llama.cpp {llama_base_ppl} over {args.windows} chunks of {args.ctx_size}. "
          f"Tokens identical in both engines: {'yes' if same_tokens else 'NO'}.")
    print("\nOther tensors of each file (type: count):")
    for t, row in rows.items():
        print(f"- {t}: {row['other_tensors']}")


if __name__ == "__main__":
    main()
