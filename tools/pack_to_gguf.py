#!/usr/bin/env python3
"""Writes a GGUF file holding exactly the weights of a Chronos pack, with the `gguf` package's writer.

  .venv/bin/python tools/pack_to_gguf.py --checkpoint /tmp/synthetic-3g --pack /tmp/synth-q4_k \\
      --out /tmp/synth-q4_k.gguf

For benchmarks of `-m FILE.gguf`: a pack made with `chronos pack -m CHECKPOINT --cluster none
--expert-type T --dense-type T` becomes a GGUF file laid out as llama.cpp's converter lays out that
checkpoint (its key-values and tensor names, routed experts stacked per layer, the llama
architecture's Q/K rows permuted), holding the pack's bytes. The conversion is
tools/make_gguf_fixtures.py's. The whole pack is held in memory (about twice its size).

DeepSeek-V2/V3 (deepseek2): kv_b_proj is split per head as the converter splits it. attn_v_b keeps
the pack's rows (its bytes); attn_k_b is kv_b_proj's columns, so a block-typed kv_b_proj is
dequantized, transposed and quantized again (gguf's quantizers): in kv_b_proj's type where the block
divides qk_nope_head_dim, else in llama.cpp's fallback for such rows (Q4_K -> Q5_0, Q6_K -> Q8_0, ...;
a 256-weight type gguf cannot quantize takes the same fallback), else F16; --k-b-type picks another
(F32 keeps the dequantized values). llama.cpp's loader requires deepseek2.attention.q_lora_rank
(which the converter writes only for a low-rank query) unless the model has 26 or 27 layers:
--zero-q-lora-rank writes 0 for a plain q_proj.
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_gguf_fixtures as fixtures  # noqa: E402


# attn_k_b's types on request: those the gguf package quantizes (and the float types).
K_B_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=pathlib.Path, required=True,
                        help="the Hugging Face folder the pack was made from (config and tokenizer)")
    parser.add_argument("--pack", type=pathlib.Path, required=True, help="a pack of it (--cluster none)")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the GGUF file to write")
    parser.add_argument("--k-b-type", type=str.upper, choices=K_B_TYPES,
                        help="deepseek2: attn_k_b's type (default: kv_b_proj's, or its fallback for short rows)")
    parser.add_argument("--zero-q-lora-rank", action="store_true",
                        help="deepseek2 without a low-rank query: write attention.q_lora_rank = 0 (for llama.cpp)")
    args = parser.parse_args()
    config = json.loads((args.checkpoint / "config.json").read_text())
    manifest = json.loads((args.pack / "cluster_manifest.json").read_text())
    file_type = manifest["model"]["dtype"].lower()
    if file_type not in fixtures.FILE_TYPES:
        sys.exit(f"{args.pack}: expert type {manifest['model']['dtype']} has no file type here "
                 f"(one of {', '.join(fixtures.FILE_TYPES)})")
    if config["model_type"] not in fixtures.ARCHS:
        sys.exit(f"{args.checkpoint}: model_type {config['model_type']} is not one of {', '.join(fixtures.ARCHS)}")
    tensors = fixtures.Checkpoint.from_pack(args.pack, fixtures.expert_names_of(config["model_type"]))
    fixtures.write_model_fixture(args.checkpoint, tensors, args.out, file_type, k_b_type=args.k_b_type,
                                 zero_q_lora_rank=args.zero_q_lora_rank)


if __name__ == "__main__":
    main()
