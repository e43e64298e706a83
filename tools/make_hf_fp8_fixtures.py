#!/usr/bin/env python3
"""Builds the fixtures of FP8 block-scaled checkpoints (DeepSeek-V3/R1, Kimi-K2, GLM-4.5, MiniMax-M2 ship
their linear weights so: X.weight as F8_E4M3 and X.weight_scale_inv, one scale per block of
quantization_config.weight_block_size).

tests/fixtures/hf_fp8/deepseek_v3-fp8/
    tests/fixtures/models/deepseek_v3-bf16 with every *_proj.weight (attention, dense MLP, routed and
    shared experts; as the V3 release, the router, embeddings, lm_head and norms stay BF16) quantized
    to F8_E4M3 per 4x8 block (absmax / 448), scales in F32, except layer 0's q_a_proj (BF16 scales)
    and layer 2's o_proj (F8_E8M0 power-of-two scales): every scale dtype a checkpoint may use.
tests/fixtures/hf_fp8/deepseek_v3-fp8-dequant/
    the same checkpoint with every FP8 weight dequantized to BF16 by transformers
    (integrations/finegrained_fp8.py, Fp8Dequantize, what from_pretrained does on a CPU) and no
    quantization_config. reference.json holds transformers' logits of that model (in bf16 and, as
    for every bf16 fixture, its weights loaded in f32).

tests/fixtures/hf_fp8/codes.safetensors
    every F8_E4M3 and F8_E8M0 code (e4m3, e8m0) beside torch's float32 value of each (e4m3_f32,
    e8m0_f32), NaN codes included.

Checked here before anything is written: transformers loading the FP8 folder (dequantizing it) gives
the same logits, bit for bit, as loading the dequantized folder.

Usage: python3 tools/make_hf_fp8_fixtures.py   (needs torch, transformers, accelerate, safetensors)
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer
from transformers.integrations.finegrained_fp8 import Fp8Dequantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_test_models  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SOURCE = FIXTURES / "models" / "deepseek_v3-bf16"
OUT = FIXTURES / "hf_fp8"
BLOCK = (4, 8)
FP8_MAX = 448.0


def quantize(w: torch.Tensor, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = w.shape
    br, bc = BLOCK
    blocks = w.float().reshape(rows // br, br, cols // bc, bc)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-8)
    if scale_dtype == torch.float8_e8m0fnu:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))  # a power of two at least absmax / 448
    scale = scale.to(scale_dtype)
    q = (blocks / scale.float()[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rows, cols), scale


def scale_dtype_of(name: str) -> torch.dtype:
    if name == "model.layers.0.self_attn.q_a_proj.weight":
        return torch.bfloat16
    if name == "model.layers.2.self_attn.o_proj.weight":
        return torch.float8_e8m0fnu
    return torch.float32


def main() -> None:
    source = load_file(SOURCE / "model.safetensors")
    fp8, dequant = {}, {}
    dequantizer = Fp8Dequantize(None)
    for name, w in source.items():
        if w.dim() == 2 and name.endswith("_proj.weight"):
            q, scale = quantize(w, scale_dtype_of(name))
            fp8[name] = q
            fp8[name + "_scale_inv"] = scale
            dequant[name] = dequantizer._dequantize_one(q, scale, output_dtype=torch.bfloat16)
        else:
            fp8[name] = w
            dequant[name] = w
    config = json.loads((SOURCE / "config.json").read_text())
    fp8_config = dict(config, quantization_config={
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": list(BLOCK)})

    if OUT.exists():
        shutil.rmtree(OUT)
    folders = {"deepseek_v3-fp8": (fp8, fp8_config), "deepseek_v3-fp8-dequant": (dequant, config)}
    for name, (tensors, cfg) in folders.items():
        folder = OUT / name
        folder.mkdir(parents=True)
        for side in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(SOURCE / side, folder / side)
        (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    # transformers' own loading of the FP8 folder is the dequantized model.
    ids = torch.tensor([[1, 5, 9, 200, 17, 42, 3, 300]])
    with torch.no_grad():
        logits = [make_test_models.load(OUT / name, torch.bfloat16)(ids).logits for name in folders]
    assert torch.equal(logits[0], logits[1]), "transformers' FP8 load differs from the dequantized folder"

    tokenizer = AutoTokenizer.from_pretrained(SOURCE)
    dequant_dir = OUT / "deepseek_v3-fp8-dequant"
    reference = make_test_models.make_reference(
        make_test_models.load(dequant_dir, torch.bfloat16), tokenizer, torch.bfloat16,
        make_test_models.load(dequant_dir, torch.float32))
    for name in folders:
        make_test_models.write_json(OUT / name / "reference.json", reference)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    e4m3, e8m0 = codes.clone().view(torch.float8_e4m3fn), codes.clone().view(torch.float8_e8m0fnu)
    save_file({"e4m3": e4m3, "e4m3_f32": e4m3.to(torch.float32), "e8m0": e8m0, "e8m0_f32": e8m0.to(torch.float32)},
              OUT / "codes.safetensors")
    n_fp8 = sum(1 for k in fp8 if k.endswith("_scale_inv"))
    print(f"{OUT}: {n_fp8} FP8 weights in {BLOCK[0]}x{BLOCK[1]} blocks")


if __name__ == "__main__":
    main()
