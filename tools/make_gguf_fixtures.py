#!/usr/bin/env python3
"""Writes the GGUF test fixtures of tests/fixtures/gguf/ with the `gguf` package's writer.

  .venv/bin/python tools/make_gguf_fixtures.py [--out tests/fixtures/gguf]

reader.gguf: every key-value type and a few tensor types, read back by tests/io/gguf_test.cpp.

MODEL-TYPE.gguf: the tiny checkpoints of tests/fixtures/models/*-f32 converted as llama.cpp's
convert_hf_to_gguf.py does (its key-values, the gguf package's tensor-name tables, routed experts
stacked into [n_expert, rows, cols], the llama architecture's Q/K rows permuted, norms and routers
f32, the tokenizer through tools/gguf_vocab.py; deepseek2: kv_b_proj split per head into attn_k_b
and attn_v_b, MTP layers left out). The f32 files hold the checkpoint's own values;
the f16 and block-typed ones hold the bytes `chronos pack --cluster none --expert-type T
--dense-type T` writes for the same checkpoint (Chronos's own quantizer, GGUF's block layouts), so
a test can compare them with that pack exactly. `--chronos` names the binary that makes those packs.

mixtral-q4_k_m.gguf mixes types per tensor in the manner of llama.cpp's Q4_K_M: Q4_K everywhere,
Q6_K for the LM head and for attn_v and ffn_down_exps in the layers llama.cpp's use_more_bits
picks (of 3 layers: the last). On the fixture's 64- and 32-wide rows the K types take their
32-weight fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0), so the routed experts' down projections are Q5_0
in layers 0-1 and Q8_0 in layer 2: a file whose experts mix types.

deepseek_v3-f32.gguf, deepseek_v2-f32.gguf (architecture deepseek2) equal
llama.cpp's converter's output for their folders (conversion/deepseek.py's DeepseekV2Model, run with
this vocabulary; general.* aside) but for one key: deepseek2.expert_gating_func, which the converter
takes from config.json's scoring_func. transformers 5 does not save scoring_func, DeepSeek's published
configs have it (V3 sigmoid, V2 softmax), so it is written as for those (DEEPSEEK_SCORING).

qwen3_next-f32.gguf and qwen3_5_moe-f32.gguf are llama.cpp's own converter's output
(convert_hf_to_gguf.py --outtype f32 --no-mtp, from a llama.cpp source tree given as --llama-cpp,
e.g. the one scripts/build_peers.sh unpacks), run with the fixture vocabulary taken as Qwen2's
pre-tokenizer (the converter knows vocabularies by a hash of their output; the fixture's trained one
is not among them). Its Gated DeltaNet layouts are intricate enough that the file is taken as it
writes it, not rebuilt here.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import gguf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gguf_vocab  # noqa: E402
import make_quant_fixtures  # noqa: E402


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


# (block elements, block bytes) of the types a pack can write; the float types per element.
BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q5_0": (32, 22), "Q2_K": (256, 84), "Q3_K": (256, 110),
          "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "Q4_1": (32, 20),
          "Q5_1": (32, 24), "IQ4_NL": (32, 18), "IQ4_XS": (256, 136), "MXFP4": (32, 17), "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2)}
ARCHS = {"mixtral": gguf.MODEL_ARCH.LLAMA, "qwen2_moe": gguf.MODEL_ARCH.QWEN2MOE,
         "qwen3_moe": gguf.MODEL_ARCH.QWEN3MOE, "olmoe": gguf.MODEL_ARCH.OLMOE,
         "glm4_moe": gguf.MODEL_ARCH.GLM4_MOE, "minimax_m2": gguf.MODEL_ARCH.MINIMAXM2,
         "deepseek_v2": gguf.MODEL_ARCH.DEEPSEEK2, "deepseek_v3": gguf.MODEL_ARCH.DEEPSEEK2,
         "glm4_moe_lite": gguf.MODEL_ARCH.DEEPSEEK2, "gpt_oss": gguf.MODEL_ARCH.GPT_OSS}
# The fixtures: (checkpoint: models/NAME-f32, type), written to NAME-TYPE.gguf. About 10 MB in all.
MODEL_FIXTURES = [("mixtral", "f32"), ("qwen2_moe", "f32"), ("mixtral", "q8_0"), ("qwen2_moe", "q8_0"),
                  ("qwen3_moe", "q8_0"), ("olmoe", "q8_0"), ("qwen3_moe", "f16"), ("olmoe", "q4_k"),
                  ("mixtral", "q4_k_m"), ("glm4_moe", "f32"), ("minimax_m2", "f32"),
                  ("deepseek_v3", "f32"), ("deepseek_v2", "f32"), ("glm4_moe_lite", "f32"), ("gpt_oss", "mxfp4")]
FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_k": 15, "q4_k_m": 15, "bf16": 32, "mixed": 19, "mxfp4": 38}
# llama_ftype (15: MOSTLY_Q4_K_M, 32: MOSTLY_BF16, 19: MOSTLY_IQ2_XXS, the type of most expert bytes of mixed-types.gguf)


def use_more_bits(layer: int, n_layer: int) -> bool:
    """The layers whose attn_v and ffn_down llama.cpp's Q4_K_M mix stores in Q6_K."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def q6_k_in_q4_k_m(name: str, n_layer: int) -> bool:
    if name == "lm_head.weight":
        return True
    parts = name.split(".")
    if len(parts) < 3 or parts[1] != "layers" or not use_more_bits(int(parts[2]), n_layer):
        return False
    return name.endswith("v_proj.weight") or name.endswith(".w2.weight") or name.endswith("down_proj.weight")


def read_safetensors(path: pathlib.Path) -> tuple[dict, dict, bytes]:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, data[8 + n:]


def tensor_bytes(header: dict, buffer: bytes, name: str) -> bytes:
    begin, end = header[name]["data_offsets"]
    return buffer[begin:end]


def as_array(raw: bytes, dtype: str, shape: list[int]) -> np.ndarray:
    """A tensor as numpy: float types as their values, block types as uint8 [rows, row_bytes]."""
    if dtype == "F32":
        return np.frombuffer(raw, dtype=np.float32).reshape(shape).copy()
    if dtype == "F16":
        return np.frombuffer(raw, dtype=np.float16).reshape(shape).copy()
    elements, block_bytes = BLOCKS[dtype]
    assert shape[-1] % elements == 0, (dtype, shape)
    return np.frombuffer(raw, dtype=np.uint8).reshape(*shape[:-1], shape[-1] // elements * block_bytes).copy()


def as_f32(array: np.ndarray, type_name: str) -> np.ndarray:
    """A float tensor's values as float32 (BF16 arrives as its bytes, two per value)."""
    if type_name == "BF16":
        bits = np.frombuffer(array.tobytes(), dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(*array.shape[:-1], array.shape[-1] // 2)
    return array.astype(np.float32)


class Checkpoint:
    """The tensors of a checkpoint folder, or of a pack of it: name -> (array, type name)."""

    def __init__(self, folder: pathlib.Path):
        header, _, buffer = read_safetensors(folder / "model.safetensors")
        self.tensors = {name: (as_array(tensor_bytes(header, buffer, name), entry["dtype"], entry["shape"]),
                               entry["dtype"]) for name, entry in header.items()}

    @staticmethod
    def from_pack(pack: pathlib.Path, expert_names) -> "Checkpoint":
        self = Checkpoint.__new__(Checkpoint)
        self.tensors = {}
        header, metadata, buffer = read_safetensors(pack / "dense.safetensors")
        quantized = json.loads(metadata.get("chronos.quantized_tensors", "{}"))
        for name, entry in header.items():
            raw = tensor_bytes(header, buffer, name)
            if name in quantized:
                self.tensors[name] = (as_array(raw, quantized[name]["dtype"], quantized[name]["shape"]),
                                      quantized[name]["dtype"])
            else:
                self.tensors[name] = (as_array(raw, entry["dtype"], entry["shape"]), entry["dtype"])
        manifest = json.loads((pack / "cluster_manifest.json").read_text())
        files = {c["id"]: read_safetensors(pack / c["file"]) for c in manifest["clusters"]}
        for key, expert in manifest["experts"].items():
            layer, index = map(int, key.split("."))
            file_header, _, file_buffer = files[expert["cluster"]]
            for proj in ("gate", "up", "down"):
                info = expert["tensors"][proj]
                raw = tensor_bytes(file_header, file_buffer, f"layers.{layer}.experts.{index}.{proj}")
                self.tensors[expert_names(layer, index, proj)] = (as_array(raw, info["dtype"], info["shape"]),
                                                                  info["dtype"])
        return self


def expert_names_of(model_type: str):
    if model_type in ("mixtral", "minimax_m2"):
        names = {"gate": "w1", "up": "w3", "down": "w2"}
        return lambda l, e, p: f"model.layers.{l}.block_sparse_moe.experts.{e}.{names[p]}.weight"
    return lambda l, e, p: f"model.layers.{l}.mlp.experts.{e}.{p}_proj.weight"


def permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute, on whole rows (float values or a block row's bytes)."""
    return (rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:])
            .swapaxes(1, 2).reshape(rows.shape))


def ggml_type(type_name: str):
    return getattr(gguf.GGMLQuantizationType, type_name)


def add_rope_scaling(writer: gguf.GGUFWriter, cfg: dict) -> None:
    """TextModel.set_gguf_parameters' rope scaling keys (linear and yarn; a default rope writes none).
    config.json's rope_parameters (transformers 5) or rope_scaling (older files, "type" for "rope_type")."""
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rope_type = params.get("rope_type", params.get("type"))
    factor = params.get("factor")
    if rope_type == "linear" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    elif rope_type == "yarn" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        writer.add_rope_scaling_orig_ctx_len(params.get("original_max_position_embeddings",
                                                        cfg.get("original_max_position_embeddings")))
        if (ext_factor := params.get("extrapolation_factor")) is not None:
            writer.add_rope_scaling_yarn_ext_factor(ext_factor)
        if (attn_factor := params.get("attention_factor", params.get("attn_factor"))) is not None:
            writer.add_rope_scaling_yarn_attn_factor(attn_factor)
        if (beta_fast := params.get("beta_fast")) is not None:
            writer.add_rope_scaling_yarn_beta_fast(beta_fast)
        if (beta_slow := params.get("beta_slow")) is not None:
            writer.add_rope_scaling_yarn_beta_slow(beta_slow)
    elif rope_type in ("su", "longrope"):
        writer.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)


# config.json's scoring_func where a checkpoint leaves it out: transformers 5 does not save it (its
# DeepSeek configs have no such field), DeepSeek's published configs have it (V2 softmax, V3 sigmoid).
DEEPSEEK_SCORING = {"deepseek_v2": "softmax", "deepseek_v3": "sigmoid", "glm4_moe_lite": "sigmoid"}


def add_deepseek2_keys(writer: gguf.GGUFWriter, cfg: dict, zero_q_lora_rank: bool = False) -> None:
    """DeepseekV2Model.set_gguf_parameters' keys beyond the common ones (written by the caller, with
    head_count_kv 1), and TextModel's group counts and gating function. zero_q_lora_rank: write
    q_lora_rank 0 for a plain q_proj, which the converter leaves out and llama.cpp's loader requires
    (but of 26- or 27-layer models, DeepSeek-V2-Lite's)."""
    if cfg.get("n_group") is not None:  # TextModel: whenever the config has them (any topk_method)
        writer.add_expert_group_count(cfg["n_group"])
    if cfg.get("topk_group") is not None:
        writer.add_expert_group_used_count(cfg["topk_group"])
    scoring = cfg.get("scoring_func") or DEEPSEEK_SCORING[cfg["model_type"]]
    writer.add_expert_gating_func({"softmax": gguf.ExpertGatingFuncType.SOFTMAX,
                                   "sigmoid": gguf.ExpertGatingFuncType.SIGMOID}[scoring])
    first_dense = cfg.get("first_k_dense_replace")
    if first_dense is None and cfg.get("mlp_layer_types"):  # glm4_moe_lite
        types = cfg["mlp_layer_types"]
        first_dense = next((i for i, t in enumerate(types) if t != "dense"), len(types))
    writer.add_leading_dense_block_count(first_dense if first_dense is not None else 0)
    writer.add_vocab_size(cfg["vocab_size"])
    if cfg.get("q_lora_rank") is not None:
        writer.add_q_lora_rank(cfg["q_lora_rank"])
    elif zero_q_lora_rank:
        writer.add_q_lora_rank(0)
    rank, rope = cfg.get("kv_lora_rank", 512), cfg["qk_rope_head_dim"]
    writer.add_kv_lora_rank(rank)
    writer.add_key_length(rank + rope)  # the latent cache's rows: MQA over [latent, rotary key]
    writer.add_value_length(rank)
    writer.add_key_length_mla(cfg["qk_nope_head_dim"] + rope)  # the heads' sizes once decompressed
    writer.add_value_length_mla(cfg["v_head_dim"])
    writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_expert_shared_count(cfg.get("n_shared_experts", 0))
    if cfg.get("routed_scaling_factor") is not None:
        writer.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg.get("norm_topk_prob"):  # only when true
        writer.add_expert_weights_norm(True)
    writer.add_rope_dimension_count(rope)
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if params.get("mscale_all_dim") is not None:
        # 0.1 x mscale_all_dim, the converter's legacy form; `mscale` itself is not written
        # (llama.cpp takes it equal to mscale_all_dim).
        writer.add_rope_scaling_yarn_log_mul(0.1 * params["mscale_all_dim"])


# llama.cpp's tensor_type_fallback (llama-quant.cpp): the type a 256-weight block type becomes on rows
# whose length it does not divide.
FALLBACK_32 = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0",
               "IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL",
               "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL"}


def k_b_type_for(type_name: str, cols: int) -> str:
    """attn_k_b's type when kv_b_proj is block-typed: kv_b_proj's own, with llama.cpp's fallback
    where the block does not divide the row (qk_nope_head_dim), F16 where no fallback does; a
    256-weight type the gguf package cannot quantize (the K and IQ types) takes its 32-weight
    fallback (IQ4_NL, which it cannot quantize either: F16)."""
    block = BLOCKS.get(type_name, (256, None))[0]
    if cols % block != 0 or type_name in FALLBACK_32:
        type_name = FALLBACK_32.get(type_name, type_name)
    if type_name not in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4") or cols % BLOCKS[type_name][0] != 0:
        return "F16"
    return type_name


def split_kv_b(array: np.ndarray, type_name: str, cfg: dict, k_b_type: str | None = None):
    """DeepseekV2Model.modify_tensors' kv_b_proj split: ((k_b, type), (v_b, type)), k_b [heads, rank,
    nope] and v_b [heads, v, rank]. v_b keeps kv_b_proj's rows (a block type's bytes unchanged). k_b's
    rows are kv_b_proj's columns: float types are transposed exactly, a block type is dequantized,
    transposed and quantized again, in k_b_type (default: k_b_type_for's choice)."""
    n_head = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]  # as the converter (= heads)
    nope, v_dim = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    assert array.shape[0] == n_head * (nope + v_dim), (array.shape, n_head, nope, v_dim)
    per_head = array.reshape(n_head, nope + v_dim, array.shape[-1])
    v_b = (np.ascontiguousarray(per_head[:, nope:]), type_name)
    k_rows = per_head[:, :nope]
    if type_name in ("F32", "F16") and k_b_type in (None, type_name):
        return (np.ascontiguousarray(k_rows.transpose(0, 2, 1)), type_name), v_b
    if type_name == "BF16" and k_b_type in (None, "BF16"):  # 2 bytes per value: transposed as uint16
        bits = k_rows.view(np.uint16).transpose(0, 2, 1)
        return (np.ascontiguousarray(bits).view(np.uint8), "BF16"), v_b
    if type_name in ("F32", "F16"):
        values = k_rows.astype(np.float32)
    elif type_name == "BF16":
        values = (k_rows.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        values = gguf.quants.dequantize(k_rows, ggml_type(type_name))
    values = np.ascontiguousarray(values.transpose(0, 2, 1))  # [heads, rank, nope]
    target = k_b_type or (k_b_type_for(type_name, nope) if type_name not in ("F32", "F16", "BF16") else type_name)
    if target == "F32":
        return (values, "F32"), v_b
    if target == "F16":
        return (values.astype(np.float16), "F16"), v_b
    return (gguf.quants.quantize(values, ggml_type(target)), target), v_b


def write_model_fixture(source: pathlib.Path, tensors: Checkpoint, path: pathlib.Path, file_type: str,
                        k_b_type: str | None = None, zero_q_lora_rank: bool = False) -> None:
    """k_b_type and zero_q_lora_rank: split_kv_b's and add_deepseek2_keys' (deepseek2 only)."""
    cfg = json.loads((source / "config.json").read_text())
    model_type = cfg["model_type"]
    arch = ARCHS[model_type]
    deepseek = model_type in ("deepseek_v2", "deepseek_v3", "glm4_moe_lite")
    n_layer = cfg["num_hidden_layers"]
    n_head, n_head_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    if deepseek:  # DeepseekV2Model: MLA is written as MQA, one KV head of the latent
        n_head_kv = 1
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    n_expert = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    # glm4moe: llama.cpp's converter counts the NextN (multi-token prediction) blocks after the layers.
    # GLM-4.7-Flash (glm4_moe_lite, llama.cpp's Glm4MoeLiteModel: a DeepseekV2Model) exports its one
    # NextN block the same way.
    n_nextn = cfg.get("num_nextn_predict_layers", 0) if model_type == "glm4_moe" else 0
    if model_type == "glm4_moe_lite":
        n_nextn = cfg.get("num_nextn_predict_layers", 1)
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(f"{source.name} {file_type}")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(n_layer + n_nextn)
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_freq_base(cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_file_type(FILE_TYPES[file_type])
    if model_type == "mixtral":
        writer.add_vocab_size(cfg["vocab_size"])
        writer.add_rope_dimension_count(head_dim)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if model_type == "qwen2_moe":
        writer.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if (model_type == "qwen3_moe" or cfg.get("head_dim")) and not deepseek:  # a head size other than hidden / heads
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    add_rope_scaling(writer, cfg)
    rotary = cfg.get("rope_parameters", {}).get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if model_type == "glm4_moe":  # Glm4MoeModel.set_gguf_parameters
        writer.add_rope_dimension_count(int(head_dim * rotary))
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_expert_shared_count(cfg["n_shared_experts"])
        writer.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_expert_weights_scale(cfg["routed_scaling_factor"])
        writer.add_expert_weights_norm(cfg["norm_topk_prob"])
        writer.add_nextn_predict_layers(n_nextn)
        if cfg.get("n_group", 1) > 1:  # not in llama.cpp's GLM converter (GLM-4.5 has one group)
            writer.add_expert_group_count(cfg["n_group"])
            writer.add_expert_group_used_count(cfg["topk_group"])
    if model_type == "minimax_m2":  # MiniMaxM2Model.set_gguf_parameters: rotary_dim
        writer.add_expert_feed_forward_length(cfg["intermediate_size"])
        writer.add_rope_dimension_count(int(head_dim * rotary))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if model_type == "gpt_oss":  # GptOssModel.set_gguf_parameters
        writer.add_expert_feed_forward_length(cfg["intermediate_size"])
        writer.add_sliding_window(cfg["sliding_window"])
        if cfg.get("swiglu_limit", 7.0) != 7.0:  # llama.cpp assumes the released 7; the fixture's is lower
            writer.add_swiglu_clamp_exp([cfg["swiglu_limit"]] * n_layer)
    if model_type == "olmoe" and cfg.get("clip_qkv"):
        writer.add_clamp_kqv(cfg["clip_qkv"])
    if deepseek:
        add_deepseek2_keys(writer, cfg, zero_q_lora_rank)
    if model_type == "glm4_moe_lite":
        writer.add_nextn_predict_layers(n_nextn)
    gguf_vocab.add_vocab(writer, source)

    names = gguf.get_tensor_name_map(arch, n_layer + n_nextn)
    stacked: dict[str, list] = {}
    for name in sorted(tensors.tensors, key=lambda n: (n.count("."), n)):
        array, type_name = tensors.tensors[name]
        if deepseek and name.startswith("model.layers.") and int(name.split(".")[2]) >= n_layer:
            continue  # DeepseekV2Model.skip_mtp: the multi-token prediction layers are left out
        if deepseek and name.endswith("self_attn.kv_b_proj.weight"):
            # DeepseekV2Model: kv_b_proj [heads * (nope + v), rank] split per head into attn_k_b
            # [heads, rank, nope] (the key rows, transposed) and attn_v_b [heads, v, rank].
            k_b, v_b = split_kv_b(array, type_name, cfg, k_b_type)
            for part, (part_array, part_type) in (("k_b_proj", k_b), ("v_b_proj", v_b)):
                part_name = names.get_name(name.replace("kv_b_proj", part), try_suffixes=(".weight",))
                writer.add_tensor(part_name, part_array,
                                  raw_dtype=ggml_type(part_type) if part_type not in ("F32", "F16") else None)
            continue
        if ".experts." in name and name.endswith("_proj_bias"):  # gpt-oss: [experts, rows] per projection
            layer, kind = int(name.split(".")[2]), name.split(".")[-1].replace("_proj_bias", "")
            writer.add_tensor(f"blk.{layer}.ffn_{kind}_exps.bias", as_f32(array, type_name))
            continue
        if name.endswith("self_attn.sinks"):  # GptOssModel: the sinks get the .weight suffix
            writer.add_tensor(f"blk.{name.split('.')[2]}.attn_sinks.weight", as_f32(array, type_name))
            continue
        if ".experts." in name:  # routed experts: stacked per layer and projection
            parts = name.split(".")
            layer, index = int(parts[2]), int(parts[parts.index("experts") + 1])
            proj = parts[parts.index("experts") + 2]
            kind = {"w1": "gate", "w3": "up", "w2": "down"}.get(proj, proj.replace("_proj", ""))
            stacked.setdefault(f"blk.{layer}.ffn_{kind}_exps.weight", [None] * n_expert)[index] = (array, type_name)
            continue
        # The converter's rename of the sigmoid router's bias, so that the table's .bias suffix applies.
        gguf_name = names.get_name(name.replace("e_score_correction_bias", "e_score_correction.bias"),
                                   try_suffixes=(".weight", ".bias"))
        if gguf_name is None and ".mlp." in name and name.endswith("_proj.weight"):
            # A dense layer of Qwen's mlp_only_layers: llama.cpp's qwen2moe/qwen3moe tables have no
            # such tensors; they take the dense FFN names every other architecture uses.
            layer, proj = name.split(".")[2], name.split(".")[-2].replace("_proj", "")
            gguf_name = f"blk.{layer}.ffn_{proj}.weight"
        assert gguf_name is not None, name
        if model_type == "mixtral" and (name.endswith("q_proj.weight") or name.endswith("k_proj.weight")):
            array = permute(array, n_head if "q_proj" in name else n_head_kv)
        if type_name == "BF16" and array.ndim == 1:
            # Norm weights as F32, as llama.cpp's converter writes every 1-D tensor (its element-wise
            # ops do not take BF16 operands).
            array = (np.frombuffer(array.tobytes(), dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
            type_name = "F32"
        writer.add_tensor(gguf_name, array, raw_dtype=ggml_type(type_name) if type_name not in ("F32", "F16") else None)
    for k in range(n_nextn):  # a NextN block as GLM's files carry it (a few of its tensors), never decoded
        block = n_layer + k
        rng = np.random.default_rng(block)
        for suffix, shape in [("attn_norm.weight", [cfg["hidden_size"]]),
                              ("nextn.eh_proj.weight", [cfg["hidden_size"], 2 * cfg["hidden_size"]]),
                              ("nextn.enorm.weight", [cfg["hidden_size"]]),
                              ("ffn_gate_inp.weight", [n_expert, cfg["hidden_size"]]),
                              ("exp_probs_b.bias", [n_expert])]:
            writer.add_tensor(f"blk.{block}.{suffix}", rng.standard_normal(shape).astype(np.float32))
    for gguf_name in sorted(stacked, key=lambda n: (int(n.split(".")[1]), n)):
        experts = stacked[gguf_name]
        type_name = experts[0][1]
        assert all(t == type_name for _, t in experts), gguf_name
        array = np.stack([a for a, _ in experts])
        writer.add_tensor(gguf_name, array, raw_dtype=ggml_type(type_name) if type_name not in ("F32", "F16") else None)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def packed_tensors(chronos: pathlib.Path, source: pathlib.Path, work: str, model_type: str, type_name: str):
    """The checkpoint's tensors as `chronos pack --expert-type T --dense-type T` writes them."""
    pack = pathlib.Path(work) / f"{model_type}-{type_name}"
    subprocess.run([str(chronos), "pack", "-m", str(source), "-o", str(pack), "--cluster", "none",
                    "--expert-type", type_name, "--dense-type", type_name], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tensors = Checkpoint.from_pack(pack, expert_names_of(model_type))
    shutil.rmtree(pack)
    return tensors


def write_model_fixtures(out: pathlib.Path, chronos: pathlib.Path, only=None) -> None:
    models = out.parent / "models"
    with tempfile.TemporaryDirectory() as work:
        for model_type, file_type in MODEL_FIXTURES:
            if only and f"{model_type}-{file_type}" not in only:
                continue
            source = models / f"{model_type}-f32"
            if file_type == "mxfp4":  # the released checkpoint's MXFP4 experts as a pack keeps them
                source = models / f"{model_type}-mxfp4"
                pack = pathlib.Path(work) / f"{model_type}-{file_type}"
                subprocess.run([str(chronos), "pack", "-m", str(source), "-o", str(pack), "--cluster", "none"],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                tensors = Checkpoint.from_pack(pack, expert_names_of(model_type))
                shutil.rmtree(pack)
            elif file_type == "f32":
                tensors = Checkpoint(source)
            elif file_type == "q4_k_m":
                tensors = packed_tensors(chronos, source, work, model_type, "q4_k")
                more_bits = packed_tensors(chronos, source, work, model_type, "q6_k")
                n_layer = json.loads((source / "config.json").read_text())["num_hidden_layers"]
                for name in tensors.tensors:
                    if q6_k_in_q4_k_m(name, n_layer):
                        tensors.tensors[name] = more_bits.tensors[name]
            else:
                tensors = packed_tensors(chronos, source, work, model_type, file_type)
            write_model_fixture(source, tensors, out / f"{model_type}-{file_type}.gguf", file_type)


# The mixed-type fixture: a Mixtral-architecture model wide enough (hidden 256) for the 256-weight
# types, each matrix in its own type, and every block type Chronos reads but Q4_0, Q5_0, Q2_K and
# Q3_K (which the other fixtures hold) used at least once. (HF name, type); experts per projection.
MIXED_CONFIG = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 256,
                "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                "num_local_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2, "vocab_size": 384,
                "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
                "tie_word_embeddings": False, "hidden_act": "silu", "eos_token_id": 0, "bos_token_id": None}
MIXED_TYPES = {
    "model.embed_tokens.weight": "Q6_K",  # [384, 256]
    "lm_head.weight": "Q8_0",  # [384, 256]
    # [64, 256], [32, 256], [32, 256], [256, 64]: q, k, v, o
    "model.layers.0.self_attn.q_proj.weight": "IQ3_S", "model.layers.0.self_attn.k_proj.weight": "IQ1_S",
    "model.layers.0.self_attn.v_proj.weight": "IQ1_M", "model.layers.0.self_attn.o_proj.weight": "IQ4_NL",
    "model.layers.1.self_attn.q_proj.weight": "IQ4_XS", "model.layers.1.self_attn.k_proj.weight": "Q4_K",
    "model.layers.1.self_attn.v_proj.weight": "Q5_K", "model.layers.1.self_attn.o_proj.weight": "Q4_1",
    # experts [32, 256] (w1 gate, w3 up) and [256, 32] (w2 down): three types in one expert
    "model.layers.0.block_sparse_moe.experts.w1": "IQ2_XXS", "model.layers.0.block_sparse_moe.experts.w3": "IQ2_XS",
    "model.layers.0.block_sparse_moe.experts.w2": "MXFP4",
    "model.layers.1.block_sparse_moe.experts.w1": "IQ2_S", "model.layers.1.block_sparse_moe.experts.w3": "IQ3_XXS",
    "model.layers.1.block_sparse_moe.experts.w2": "Q5_1",
}
# The types gguf's numpy code quantizes (normal values in, rounded as llama.cpp does); the others
# get random valid blocks (make_quant_fixtures.py), their scales sized for the same spread of values.
GGUF_QUANTIZES = ("Q8_0", "Q4_1", "Q5_1", "MXFP4")


def mixed_matrix(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """A [rows, cols] matrix of type_name whose values spread about 1/sqrt(cols) (activations keep
    their scale through the layers): float32 for F32, else uint8 [rows, row bytes]."""
    target = 1.0 / np.sqrt(cols)
    if type_name == "F32" or type_name in GGUF_QUANTIZES:
        values = np.random.default_rng(seed).normal(0.0, target, (rows, cols)).astype(np.float32)
        return values if type_name == "F32" else gguf.quants.quantize(values, ggml_type(type_name))
    block, block_bytes = BLOCKS.get(type_name, (256, None))
    lower = type_name.lower()

    def blocks(scale_sd: float) -> np.ndarray:
        rng = np.random.default_rng(seed)  # the same bytes but the scales, whatever the sd
        n_blocks = rows * cols // block
        q = (make_quant_fixtures.random_valid_iq_blocks(lower, rng, n_blocks, scale_sd)
             if lower in make_quant_fixtures.IQ_GRID_TYPES else
             make_quant_fixtures.random_valid_blocks(lower, rng, n_blocks, scale_sd))
        return q.reshape(rows, -1)

    # The values scale with the f16 scales: measure the spread at sd 1, then size them.
    spread = float(np.std(gguf.quants.dequantize(blocks(1.0), ggml_type(type_name))))
    return blocks(target / spread)


def write_mixed_fixtures(out: pathlib.Path) -> None:
    """mixed-types.gguf and mixed-types-f32.gguf, the same model with every tensor replaced by gguf's
    dequantization of it (gguf.quants.dequantize, independent of Chronos's decoders)."""
    c = MIXED_CONFIG
    n_embd, head_dim, n_ff, n_expert = c["hidden_size"], c["head_dim"], c["intermediate_size"], c["num_local_experts"]
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], n_embd), "lm_head.weight": (c["vocab_size"], n_embd)}
    vectors = ["model.norm.weight"]
    for layer in range(c["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        shapes[prefix + "self_attn.q_proj.weight"] = (c["num_attention_heads"] * head_dim, n_embd)
        shapes[prefix + "self_attn.k_proj.weight"] = (c["num_key_value_heads"] * head_dim, n_embd)
        shapes[prefix + "self_attn.v_proj.weight"] = (c["num_key_value_heads"] * head_dim, n_embd)
        shapes[prefix + "self_attn.o_proj.weight"] = (n_embd, c["num_attention_heads"] * head_dim)
        shapes[prefix + "block_sparse_moe.gate.weight"] = (n_expert, n_embd)  # the router: F32
        for expert in range(n_expert):
            for proj, shape in (("w1", (n_ff, n_embd)), ("w3", (n_ff, n_embd)), ("w2", (n_embd, n_ff))):
                shapes[f"{prefix}block_sparse_moe.experts.{expert}.{proj}.weight"] = shape
        vectors += [prefix + "input_layernorm.weight", prefix + "post_attention_layernorm.weight"]

    mixed, reference = Checkpoint.__new__(Checkpoint), Checkpoint.__new__(Checkpoint)
    mixed.tensors, reference.tensors = {}, {}
    for seed, (name, shape) in enumerate(sorted(shapes.items())):
        parts = name.split(".")
        key = ".".join(parts[:5] + parts[6:7]) if ".experts." in name else name
        type_name = MIXED_TYPES.get(key, "F32")
        array = mixed_matrix(type_name, *shape, seed=100 + seed)
        mixed.tensors[name] = (array, type_name)
        values = array if type_name == "F32" else gguf.quants.dequantize(array, ggml_type(type_name))
        assert values.shape == shape and np.all(np.isfinite(values)), (name, type_name)
        reference.tensors[name] = (values.astype(np.float32), "F32")
    rng = np.random.default_rng(99)
    for name in vectors:
        norm = (1.0 + rng.normal(0.0, 0.1, n_embd)).astype(np.float32)
        mixed.tensors[name] = reference.tensors[name] = (norm, "F32")
    assert set(MIXED_TYPES.values()) >= {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
                                         "IQ4_XS", "IQ4_NL", "MXFP4", "Q4_K", "Q5_K", "Q6_K", "Q4_1", "Q5_1", "Q8_0"}

    with tempfile.TemporaryDirectory() as work:
        source = pathlib.Path(work) / "mixtral-mixed-types"  # general.name comes from the folder
        source.mkdir()
        (source / "config.json").write_text(json.dumps(c, indent=2))
        for side in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(out.parent / "models" / "mixtral-f32" / side, source / side)
        write_model_fixture(source, mixed, out / "mixed-types.gguf", "mixed")
        write_model_fixture(source, reference, out / "mixed-types-f32.gguf", "f32")


RECURRENT_FIXTURES = ("qwen3_next", "qwen3_5_moe")
CONVERTER_RUNNER = """
import runpy, sys
source = sys.argv[1]
sys.path[:0] = [source + "/gguf-py", source]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = [source + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(source + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def write_converted_fixtures(out: pathlib.Path, llama_cpp: pathlib.Path, only=None) -> None:
    """The recurrent families' files, written by llama.cpp's converter (see the module docstring)."""
    models = out.parent / "models"
    for model_type in RECURRENT_FIXTURES:
        name = f"{model_type}-f32"
        if only and name not in only:
            continue
        subprocess.run([sys.executable, "-c", CONVERTER_RUNNER, str(llama_cpp), str(models / name), "--outtype", "f32",
                        "--no-mtp", "--outfile", str(out / f"{name}.gguf")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = pathlib.Path(__file__).resolve().parent.parent
    parser.add_argument("--out", type=pathlib.Path, default=root / "tests" / "fixtures" / "gguf")
    parser.add_argument("--chronos", type=pathlib.Path, default=root / "build" / "release" / "chronos",
                        help="the chronos binary that writes the quantized packs")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="write only these model fixtures (e.g. glm4_moe-f32), nothing else")
    parser.add_argument("--llama-cpp", type=pathlib.Path,
                        help="a llama.cpp source tree whose converter writes the qwen3next and qwen35moe fixtures "
                             "(without it they are left as they are)")
    parser.add_argument("--mixed-only", action="store_true",
                        help="write only mixed-types.gguf and mixed-types-f32.gguf (no chronos binary needed)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only:
        write_model_fixtures(args.out, args.chronos, args.only)
        if args.llama_cpp:
            write_converted_fixtures(args.out, args.llama_cpp, args.only)
        return
    write_mixed_fixtures(args.out)
    if args.mixed_only:
        return
    write_reader_fixture(args.out / "reader.gguf")
    write_model_fixtures(args.out, args.chronos)
    if args.llama_cpp:
        write_converted_fixtures(args.out, args.llama_cpp)


if __name__ == "__main__":
    main()
