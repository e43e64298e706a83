#!/usr/bin/env python3
"""Builds the fixtures of MXFP4 weights stored as Hugging Face checkpoints store them (gpt-oss: a
weight X as the U8 pair X_blocks [..., rows, cols/32, 16] and X_scales [..., rows, cols/32]).

tests/fixtures/io/hf_mxfp4.safetensors
    gpt-oss-shaped pairs of random bytes (every nibble, every scale byte but 255, E8M0's NaN code),
    one of them with its blocks flattened to [..., rows, cols/2], and a BF16 bias beside them.
tests/fixtures/io/hf_mxfp4_dequantized.safetensors
    each pair's X as transformers dequantizes it (integrations/mxfp4.py, convert_moe_packed_tensors,
    dtype float32), in nn.Linear's [..., rows, cols] order (transformers' own result, transposed
    back), for a bit-exact comparison.
tests/fixtures/hf_mxfp4/mixtral-mxfp4/
    tests/fixtures/models/mixtral-f32 with every routed expert matrix quantized to MXFP4 by gguf-py
    (the bytes llama.cpp's converter writes) and stored as a *_blocks / *_scales pair; every other
    tensor as in mixtral-f32. reference.json holds transformers' logits of the model whose experts
    are those pairs dequantized by transformers.

Checked here before anything is written: transformers' dequantization of each pair equals gguf-py's
dequantization of the GGUF block it was made from, bit for bit.

Usage: python3 tools/make_hf_mxfp4_fixtures.py   (needs torch, transformers, safetensors, gguf)
"""
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from safetensors.torch import load_file, save_file
from transformers import MixtralForCausalLM
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SOURCE_MODEL = FIXTURES / "models" / "mixtral-f32"
MXFP4 = GGMLQuantizationType.MXFP4


def hf_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """transformers' dequantization of one pair, as [..., rows, cols] f32."""
    b = torch.from_numpy(blocks)
    s = torch.from_numpy(scales)
    squeeze = b.dim() == 3  # convert_moe_packed_tensors transposes dims 1, 2: give it an expert axis
    if squeeze:
        b, s = b[None], s[None]
    out = convert_moe_packed_tensors(b, s, dtype=torch.float32).transpose(1, 2).contiguous()
    return (out[0] if squeeze else out).numpy()


def gguf_to_hf(gguf_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGUF MXFP4 rows [rows, groups * 17] -> HF blocks [rows, groups, 16], scales [rows, groups]."""
    rows = gguf_rows.shape[0]
    b = gguf_rows.reshape(rows, -1, 17)
    scales = b[:, :, 0].copy()
    qs = b[:, :, 1:]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # GGUF: weight j low, j + 16 high
    blocks = (values[:, :, 0::2] | (values[:, :, 1::2] << 4)).astype(np.uint8)  # HF: 2j low, 2j+1 high
    return blocks, scales


def random_pair(rng: np.random.Generator, prefix: tuple, groups: int) -> tuple[np.ndarray, np.ndarray]:
    blocks = rng.integers(0, 256, size=prefix + (groups, 16), dtype=np.uint8)
    scales = rng.integers(0, 255, size=prefix + (groups,), dtype=np.uint8)
    flat = scales.reshape(-1)
    flat[:4] = [0, 1, 127, 254]  # subnormal, smallest normal, 1, largest finite power
    return blocks, scales


def write_tensor_fixtures(rng: np.random.Generator) -> None:
    experts = "model.layers.0.mlp.experts."
    pairs = {
        experts + "gate_up_proj": random_pair(rng, (2, 6), 3),  # [E, 2I, H/32, 16]
        experts + "down_proj": random_pair(rng, (2, 5), 2),     # [E, H, I/32, 16]
        "model.layers.0.self_attn.o_proj.weight": random_pair(rng, (4,), 1),  # a plain 2-D matrix
    }
    stored, dequantized = {}, {}
    for name, (blocks, scales) in pairs.items():
        values = hf_dequantize(blocks, scales)
        if name.endswith("down_proj"):  # stored flattened: [..., rows, cols / 2]
            blocks = blocks.reshape(blocks.shape[:-2] + (-1,))
        stored[name + "_blocks"] = torch.from_numpy(blocks)
        stored[name + "_scales"] = torch.from_numpy(scales)
        dequantized[name] = torch.from_numpy(values)
    stored[experts + "gate_up_proj_bias"] = torch.from_numpy(rng.standard_normal((2, 6)).astype(np.float32)).to(
        torch.bfloat16)
    save_file(stored, FIXTURES / "io" / "hf_mxfp4.safetensors", metadata={"format": "pt"})
    save_file(dequantized, FIXTURES / "io" / "hf_mxfp4_dequantized.safetensors", metadata={"format": "pt"})


def is_expert_matrix(name: str) -> bool:
    return ".block_sparse_moe.experts." in name and name.endswith(".weight")


def write_model_fixture() -> None:
    out = FIXTURES / "hf_mxfp4" / "mixtral-mxfp4"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(SOURCE_MODEL / "config.json", out / "config.json")
    source = load_file(SOURCE_MODEL / "model.safetensors")
    stored, dequantized = {}, {}
    for name, tensor in source.items():
        if not is_expert_matrix(name):
            stored[name] = tensor
            dequantized[name] = tensor
            continue
        gguf_rows = quantize(tensor.numpy(), MXFP4)  # [rows, cols / 32 * 17]
        blocks, scales = gguf_to_hf(gguf_rows)
        values = hf_dequantize(blocks, scales)
        expected = dequantize(gguf_rows, MXFP4)
        assert values.tobytes() == expected.astype(np.float32).tobytes(), f"{name}: HF and GGUF values differ"
        stored[name + "_blocks"] = torch.from_numpy(blocks)
        stored[name + "_scales"] = torch.from_numpy(scales)
        dequantized[name] = torch.from_numpy(values)
    save_file(stored, out / "model.safetensors", metadata={"format": "pt"})

    # The reference: transformers on the model whose experts are the dequantized pairs.
    reference_cases = json.loads((SOURCE_MODEL / "reference.json").read_text())["cases"][:2]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(SOURCE_MODEL / "config.json", Path(tmp) / "config.json")
        save_file(dequantized, Path(tmp) / "model.safetensors", metadata={"format": "pt"})
        model = MixtralForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
        cases = []
        with torch.no_grad():
            for case in reference_cases:
                ids = case["ids"]
                logits = model(torch.tensor([ids])).logits[0]
                cases.append({"ids": ids, "logits": logits.tolist()})
    reference = {"dtype": "float32", "transformers_version": transformers.__version__,
                 "torch_version": torch.__version__, "cases": cases}
    (out / "reference.json").write_text(json.dumps(reference) + "\n")


def main() -> None:
    torch.manual_seed(0)
    write_tensor_fixtures(np.random.default_rng(39))
    write_model_fixture()


if __name__ == "__main__":
    main()
