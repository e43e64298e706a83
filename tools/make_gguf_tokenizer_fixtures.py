#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/tokenizer-<name>.gguf: key-value-only GGUF files holding the tokenizer.*
key-values of tokenizer fixtures (tests/fixtures/tokenizers/<name>), as tools/gguf_vocab.py writes them.

    .venv/bin/python tools/make_gguf_tokenizer_fixtures.py

The qwen2 fixture is not written by default: its GGUF form is 5.9 MB (151669 tokens, 151387 merges).
Pass --with-qwen2 to write it anyway (tests use it when present).
"""

import argparse
import sys
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_vocab  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# fixture folder -> (general.architecture, tokenizer.ggml.pre override)
FIXTURES = {
    "synth_bytelevel": ("olmoe", None),  # GPT-NeoX style: NFC, GPT-2 regex, add_prefix_space
    "mistral": ("llama", None),  # Mixtral's SentencePiece vocabulary
}


def write(name: str, arch: str, pre, out_dir: Path) -> Path:
    path = out_dir / f"tokenizer-{name}.gguf"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tokenizer fixture {name}")
    gguf_vocab.add_vocab(writer, ROOT / "tests/fixtures/tokenizers" / name, pre=pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/gguf")
    parser.add_argument("--with-qwen2", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fixtures = dict(FIXTURES)
    if args.with_qwen2:
        fixtures["qwen2"] = ("qwen2moe", None)
    for name, (arch, pre) in fixtures.items():
        path = write(name, arch, pre, args.out)
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
