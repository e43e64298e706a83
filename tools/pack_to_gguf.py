#!/usr/bin/env python3
"""Writes a GGUF file holding exactly the weights of a Chronos pack, with the `gguf` package's writer.

  .venv/bin/python tools/pack_to_gguf.py --checkpoint /tmp/synthetic-3g --pack /tmp/synth-q4_k \\
      --out /tmp/synth-q4_k.gguf

For benchmarks of `-m FILE.gguf`: a pack made with `chronos pack -m CHECKPOINT --cluster none
--expert-type T --dense-type T` becomes a GGUF file laid out as llama.cpp's converter lays out that
checkpoint (its key-values and tensor names, routed experts stacked per layer, the llama
architecture's Q/K rows permuted), holding the pack's bytes. The conversion is
tools/make_gguf_fixtures.py's. The whole pack is held in memory (about twice its size).
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_gguf_fixtures as fixtures  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=pathlib.Path, required=True,
                        help="the Hugging Face folder the pack was made from (config and tokenizer)")
    parser.add_argument("--pack", type=pathlib.Path, required=True, help="a pack of it (--cluster none)")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the GGUF file to write")
    args = parser.parse_args()
    config = json.loads((args.checkpoint / "config.json").read_text())
    manifest = json.loads((args.pack / "cluster_manifest.json").read_text())
    file_type = manifest["model"]["dtype"].lower()
    if file_type not in fixtures.FILE_TYPES:
        sys.exit(f"{args.pack}: expert type {manifest['model']['dtype']} has no file type here "
                 f"(one of {', '.join(fixtures.FILE_TYPES)})")
    tensors = fixtures.Checkpoint.from_pack(args.pack, fixtures.expert_names_of(config["model_type"]))
    fixtures.write_model_fixture(args.checkpoint, tensors, args.out, file_type)


if __name__ == "__main__":
    main()
