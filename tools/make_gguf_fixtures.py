#!/usr/bin/env python3
"""Writes the GGUF test fixtures of tests/fixtures/gguf/ with the `gguf` package's writer.

  .venv/bin/python tools/make_gguf_fixtures.py [--out tests/fixtures/gguf]

reader.gguf: every key-value type and a few tensor types, read back by tests/io/gguf_test.cpp.
"""
import argparse
import pathlib

import numpy as np
import gguf


def write_reader_fixture(path: pathlib.Path) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")  # general.architecture = llama
    writer.add_name("reader-fixture")
    writer.add_custom_alignment(32)  # the default, written out so that tests can change it
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60000)
    writer.add_int16("test.i16", -30000)
    writer.add_uint32("test.u32", 4000000000)
    writer.add_int32("test.i32", -2000000000)
    writer.add_uint64("test.u64", 1 << 40)
    writer.add_int64("test.i64", -(1 << 40))
    writer.add_float32("test.f32", 0.15625)
    writer.add_float64("test.f64", 1e-300)
    writer.add_bool("test.true", True)
    writer.add_bool("test.false", False)
    writer.add_string("test.string", "héllo")
    writer.add_array("test.strings", ["a", "", "ccc"])
    writer.add_key_value("test.i32s", [1, -2, 3], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
    writer.add_key_value("test.f32s", [0.5, -1.25], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT32)
    writer.add_array("test.nested", [[1, 2], [3]])

    matrix = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 4  # [3, 4]
    writer.add_tensor("matrix", matrix)
    vector = np.linspace(-1, 1, 7, dtype=np.float32)  # [7]
    writer.add_tensor("vector", vector)
    half = (np.arange(64, dtype=np.float32).reshape(2, 32) / 16 - 2).astype(np.float16)  # [2, 32]
    writer.add_tensor("half", half)
    weights = np.sin(np.arange(2 * 3 * 64, dtype=np.float32)).reshape(2, 3, 64)  # [2, 3, 64]
    q8 = gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("stacked_q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = pathlib.Path(__file__).resolve().parent.parent
    parser.add_argument("--out", type=pathlib.Path, default=root / "tests" / "fixtures" / "gguf")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write_reader_fixture(args.out / "reader.gguf")


if __name__ == "__main__":
    main()
