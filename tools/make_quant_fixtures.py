#!/usr/bin/env python3
"""Builds tests/fixtures/quant/<type>.bin: input rows, Chronos's quantized bytes, and the gguf
package's numpy dequantization of those bytes (an implementation independent of Chronos's).

The bytes come from Chronos's own quantizer, through the disabled QuantFixtureTool test of the
kernel test binary. tests/kernels/test_quant_fixtures.cpp then requires that quantizing the input
again gives the same bytes and that Chronos's dequantization gives gguf's floats bit for bit.

    python3 -m venv .venv && .venv/bin/pip install gguf numpy
    cmake --build build/release --target chronos_test_kernels
    .venv/bin/python tools/make_quant_fixtures.py --test-binary build/release/tests/chronos_test_kernels

Rows: random normal; zeros, one outlier among small values, constant and negative-only blocks; a
real expert row of the demo model (models/default, BF16) when it is there, else a uniform one. The 32-block types get
128-wide rows (the demo model's down_proj rows), the K types 256-wide ones. Also checks that gguf's
own quantizer gives Chronos's bytes for Q8_0, Q4_0, Q5_0, Q4_1, Q5_1 and MXFP4 (their rounding is
fully specified). Also random_<type>.bin for the newer 32/256-weight types: random valid blocks
(every grid index, scale code and high bit used; MXFP4 every E8M0 byte) as gguf decodes them.
The IQ grid types (IQ2_XXS ... IQ1_M) are read only: they have random-block fixtures alone, with
every index of their grid written somewhere (tools/make_iq_grids.py writes the grids themselves).
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

ROOT = Path(__file__).resolve().parent.parent
TYPES = ["q8_0", "q4_0", "q5_0", "q2_k", "q3_k", "q4_k", "q6_k", "q5_k",
         "q4_1", "q5_1", "iq4_nl", "iq4_xs", "mxfp4"]  # new types last: TYPES.index seeds the rows
BLOCK_BYTES = {"q8_0": (32, 34), "q4_0": (32, 18), "q5_0": (32, 22), "q2_k": (256, 84),
               "q3_k": (256, 110), "q4_k": (256, 144), "q6_k": (256, 210), "q5_k": (256, 176),
               "q4_1": (32, 20), "q5_1": (32, 24), "iq4_nl": (32, 18), "iq4_xs": (256, 136), "mxfp4": (32, 17)}
# gguf's numpy quantizer must give Chronos's bytes for these (their rounding is fully specified).
# gguf 0.19 has none for IQ4_NL and IQ4_XS (llama.cpp's C search, which Chronos follows).
SAME_BYTES_AS_GGUF = ("q8_0", "q4_0", "q5_0", "q4_1", "q5_1", "mxfp4")
# Random valid blocks (every byte random but the scales, which are finite) decoded by gguf: each
# grid index, scale code and fifth bit occurs, not only those Chronos's quantizer writes.
RANDOM_BLOCK_TYPES = ("q4_1", "q5_1", "iq4_nl", "iq4_xs", "mxfp4")
# The read-only IQ grid types: (block bytes, grid size, grid indices per 256-weight block).
IQ_GRID_TYPES = {"iq2_xxs": (66, 256, 32), "iq2_xs": (74, 512, 32), "iq2_s": (82, 1024, 32),
                 "iq3_xxs": (98, 256, 64), "iq3_s": (110, 512, 64), "iq1_s": (50, 2048, 32),
                 "iq1_m": (56, 2048, 32)}


def read_safetensors_rows(path: Path, name: str, rows: list[int]) -> np.ndarray:
    """Rows of one BF16 tensor as f32 (exact), without a safetensors or torch dependency."""
    with open(path, "rb") as f:
        header_size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_size))
        entry = header[name]
        assert entry["dtype"] == "BF16", entry
        begin, end = entry["data_offsets"]
        f.seek(8 + header_size + begin)
        data = np.frombuffer(f.read(end - begin), dtype="<u2").reshape(entry["shape"])
    return (data[rows].astype(np.uint32) << 16).view(np.float32)


def input_rows(type_name: str, model: Path | None) -> np.ndarray:
    """The edge cases take one block each: a whole row for the K types, a quarter row for the rest."""
    block = BLOCK_BYTES[type_name][0]
    cols = 128 if block == 32 else 256
    rng = np.random.default_rng(1000 + TYPES.index(type_name))
    outlier = rng.normal(0.0, 0.01, block)
    outlier[block // 3] = 4.0
    edges = [np.zeros(block), outlier, np.full(block, 0.3125), -np.abs(rng.normal(0.0, 0.2, block))]
    rows = [rng.normal(0.0, 0.05, cols)]
    rows.extend([np.concatenate(edges)] if block == 32 else edges)
    if model is not None:
        tensor = "model.layers.2.mlp.experts.5.down_proj.weight" if cols == 128 else \
                 "model.layers.2.mlp.experts.5.gate_proj.weight"
        rows.extend(read_safetensors_rows(model, tensor, [7]))
    else:
        rows.append(rng.uniform(-1.0, 1.0, cols))
    return np.stack(rows).astype(np.float32)


def header(type_name: str, x: np.ndarray) -> bytes:
    name = type_name.upper().encode()
    return b"CQF1" + struct.pack("<III", x.shape[0], x.shape[1], len(name)) + name


def chronos_quantize(binary: Path, type_name: str, x: np.ndarray) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        in_path, out_path = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        in_path.write_bytes(header(type_name, x) + x.astype("<f4").tobytes())
        env = dict(os.environ, CHRONOS_QUANT_TOOL_IN=str(in_path), CHRONOS_QUANT_TOOL_OUT=str(out_path))
        subprocess.run([str(binary), "--gtest_also_run_disabled_tests", "--gtest_filter=QuantFixtureTool.*"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        block, block_bytes = BLOCK_BYTES[type_name]
        quantized = np.frombuffer(out_path.read_bytes(), dtype=np.uint8)
        return quantized.reshape(x.shape[0], x.shape[1] // block * block_bytes)


# Byte offsets of the f16 fields (scales, Q4_1/Q5_1's m, the K types' d and dmin) in one block.
F16_FIELDS = {"q8_0": (0,), "q4_0": (0,), "q5_0": (0,), "q4_1": (0, 2), "q5_1": (0, 2), "iq4_nl": (0,),
              "iq4_xs": (0,), "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}


def random_valid_blocks(type_name: str, rng: np.random.Generator, n_blocks: int, scale_sd: float = 0.01) -> np.ndarray:
    """[n_blocks, block bytes] of random valid blocks of a non-IQ-grid type: its f16 fields finite
    (normal, sd scale_sd), every other byte random (quants, packed sub-block scales, high bits)."""
    block_bytes = BLOCK_BYTES[type_name][1]
    q = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    fields = F16_FIELDS[type_name]
    scales = rng.normal(0.0, scale_sd, (n_blocks, len(fields))).astype(np.float16).view(np.uint8)
    for k, at in enumerate(fields):
        q[:, at:at + 2] = scales[:, 2 * k:2 * k + 2]
    return q


def random_blocks(type_name: str) -> np.ndarray:
    """[rows, row bytes] of random valid blocks: MXFP4 takes every E8M0 byte 0..255 once (256 blocks);
    the others finite f16 scales (normal, sd 0.01; Q4_1/Q5_1's m too) and random bytes elsewhere."""
    block, block_bytes = BLOCK_BYTES[type_name]
    rng = np.random.default_rng(2000 + TYPES.index(type_name))
    n_blocks = 256 if type_name == "mxfp4" else 32
    if type_name == "mxfp4":
        q = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        q[:, 0] = rng.permutation(256).astype(np.uint8)
    else:
        q = random_valid_blocks(type_name, rng, n_blocks)
    rows = 8
    return q.reshape(rows, n_blocks // rows * block_bytes)


def random_iq_blocks(type_name: str) -> np.ndarray:
    """[8 rows, row bytes] of random IQ blocks whose grid indices, shuffled, cover the whole grid;
    f16 d finite (normal, sd 0.01), every other bit random."""
    grid_size, per_block = IQ_GRID_TYPES[type_name][1:]
    rng = np.random.default_rng(3000 + sorted(IQ_GRID_TYPES).index(type_name))
    n_blocks = max(8, grid_size // per_block)
    return random_valid_iq_blocks(type_name, rng, n_blocks).reshape(8, -1)


def random_valid_iq_blocks(type_name: str, rng: np.random.Generator, n_blocks: int, d_sd: float = 0.01) -> np.ndarray:
    """[n_blocks, block bytes] of random blocks of an IQ grid type: the grid indices, shuffled, cover
    the grid as far as n_blocks allow; f16 d finite (normal, sd d_sd); every other bit random."""
    block_bytes, grid_size, per_block = IQ_GRID_TYPES[type_name]
    q = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    index = rng.permutation(np.resize(np.arange(grid_size), n_blocks * per_block)).reshape(n_blocks, per_block)
    d = rng.normal(0.0, d_sd, (n_blocks, 1)).astype(np.float16).view(np.uint16)[:, 0]
    if type_name == "iq1_m":  # d's four nibbles are the top nibbles of the four u16 scale words
        words = q[:, 48:56].copy().view("<u2")
        for k in range(4):
            words[:, k] = (words[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        q[:, 48:56] = words.view(np.uint8)
    else:
        q[:, 0:2] = d.reshape(-1, 1).view(np.uint8)
    if type_name in ("iq2_xxs",):  # 4 grid bytes at the start of each 8-byte sub-block
        for g in range(32):
            q[:, 2 + 8 * (g // 4) + g % 4] = index[:, g]
    elif type_name == "iq2_xs":  # u16: 9-bit index, 7 sign bits
        words = q[:, 2:66].copy().view("<u2")
        words[:] = (words & 0xFE00) | index
        q[:, 2:66] = words.view(np.uint8)
    elif type_name == "iq2_s":  # low 8 bits in qs, 2 high bits in qh
        q[:, 2:34] = index & 0xFF
        qh = np.zeros((n_blocks, 8), dtype=np.uint8)
        for g in range(32):
            qh[:, g // 4] |= ((index[:, g] >> 8) & 3).astype(np.uint8) << (2 * (g % 4))
        q[:, 66:74] = qh
    elif type_name == "iq3_xxs":
        q[:, 2:66] = index
    elif type_name == "iq3_s":  # low 8 bits in qs, high bit in qh
        q[:, 2:66] = index & 0xFF
        qh = np.zeros((n_blocks, 8), dtype=np.uint8)
        for m in range(64):
            qh[:, m // 8] |= ((index[:, m] >> 8) & 1).astype(np.uint8) << (m % 8)
        q[:, 66:74] = qh
    elif type_name == "iq1_s":  # low 8 bits in qs, 3 high bits per group in the u16 qh words
        q[:, 2:34] = index & 0xFF
        words = q[:, 34:50].copy().view("<u2")
        for g in range(32):
            shift = 3 * (g % 4)
            words[:, g // 4] = (words[:, g // 4] & ~np.uint16(7 << shift)) | ((index[:, g] >> 8) << shift)
        q[:, 34:50] = words.view(np.uint8)
    else:  # iq1_m: low 8 bits in qs, 3 high bits in each nibble of qh
        q[:, 0:32] = index & 0xFF
        for g in range(32):
            shift = 4 * (g % 2)
            q[:, 32 + g // 2] = (q[:, 32 + g // 2] & ~np.uint8(7 << shift)) | ((index[:, g] >> 8) << shift).astype(np.uint8)
    return q


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test-binary", type=Path, default=ROOT / "build/release/tests/chronos_test_kernels")
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/quant")
    parser.add_argument("--random-only", action="store_true",
                        help="write only the random_<type>.bin fixtures (no test binary needed)")
    args = parser.parse_args()
    model = ROOT / "models/default/model.safetensors"
    if not model.exists():
        print(f"{model} not found: fixtures without real rows", file=sys.stderr)
        model = None
    args.out.mkdir(parents=True, exist_ok=True)
    for type_name in TYPES if not args.random_only else ():
        qtype = GGMLQuantizationType[type_name.upper()]
        x = input_rows(type_name, model)
        q = chronos_quantize(args.test_binary, type_name, x)
        expected = dequantize(q, qtype).astype(np.float32)
        assert expected.shape == x.shape, (expected.shape, x.shape)
        if type_name in SAME_BYTES_AS_GGUF:
            theirs = quantize(x, qtype)
            if not np.array_equal(theirs, q):
                raise SystemExit(f"{type_name}: gguf's quantizer gives other bytes than Chronos's")
        error = np.sqrt(np.mean((expected - x) ** 2, axis=1)) / np.maximum(np.sqrt(np.mean(x ** 2, axis=1)), 1e-30)
        path = args.out / f"{type_name}.bin"
        path.write_bytes(header(type_name, x) + x.astype("<f4").tobytes() + q.tobytes() +
                         expected.astype("<f4").tobytes())
        print(f"{path.relative_to(ROOT)}: {x.shape[0]} x {x.shape[1]}, {path.stat().st_size} bytes, "
              f"relative RMS error per row {np.array2string(error, precision=4)}")
    for type_name in RANDOM_BLOCK_TYPES + tuple(IQ_GRID_TYPES):
        qtype = GGMLQuantizationType[type_name.upper()]
        q = random_iq_blocks(type_name) if type_name in IQ_GRID_TYPES else random_blocks(type_name)
        block, block_bytes = BLOCK_BYTES[type_name] if type_name in BLOCK_BYTES else (256, IQ_GRID_TYPES[type_name][0])
        with np.errstate(over="ignore", invalid="ignore"):  # MXFP4's largest scales times 12 overflow to inf
            expected = dequantize(q, qtype).astype(np.float32)
        assert expected.shape == (q.shape[0], q.shape[1] // block_bytes * block)
        path = args.out / f"random_{type_name}.bin"
        # The input field holds gguf's values too: these blocks are decoded, never quantized.
        path.write_bytes(header(type_name, expected) + expected.astype("<f4").tobytes() + q.tobytes() +
                         expected.astype("<f4").tobytes())
        print(f"{path.relative_to(ROOT)}: {expected.shape[0]} x {expected.shape[1]}, {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
