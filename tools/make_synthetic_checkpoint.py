#!/usr/bin/env python3
"""Writes a Mixtral-, GLM-4-MoE-, DeepSeek-V2-, gpt-oss- or Qwen3-Next-shaped random checkpoint for benchmarks, with numpy only.

The folder looks like a Hugging Face Mixtral checkpoint: config.json, generation_config.json,
sharded model-XXXXX-of-YYYYY.safetensors + model.safetensors.index.json, tokenizer.json and
tokenizer_config.json. Tensors are generated and written one chunk at a time, so memory use stays
small whatever the size. The weights are random: the output text is meaningless, but every byte
is read at the rates a real model of this shape would need. Never commit the output.

Default shape (about 3.0 GB): hidden 1024, 16 layers, 8 experts, top-2, expert FFN 3584,
vocab 32000, 16 heads, 4 kv heads.

  python3 tools/make_synthetic_checkpoint.py --out /tmp/synthetic-3g
  python3 tools/make_synthetic_checkpoint.py --out /tmp/s --layers 4 --dry-run
  python3 tools/make_synthetic_checkpoint.py --out /tmp/glm --arch glm4_moe --experts 32 --top-k 4
  python3 tools/make_synthetic_checkpoint.py --out /tmp/dsv2-lite --arch deepseek_v2 --hidden 2048 \
      --layers 6 --heads 16 --experts 64 --top-k 6 --ffn 1408 --shared 2 --dense-layers 1 \
      --dense-ffn 10944 --groups 1 --vocab 102400

--arch glm4_moe writes GLM-4.5's pieces on the same sizes: the sigmoid router with its correction
bias, --groups groups of which --topk-group are kept, routed scaling 2.5, --shared shared experts,
the first --dense-layers layers dense (FFN --dense-ffn), q/k/v biases, half-rotary heads.

--arch deepseek_v2 writes DeepSeek-V2's (DeepseekV2ForCausalLM): multi-head latent attention with a
--kv-lora-rank latent, --qk-nope + --qk-rope query/key heads (the rotary key shared by the heads),
--v-head value heads, and a low-rank query path when --q-lora-rank is set (0: a plain q_proj); the
softmax router, "greedy" with --groups 1 and "group_limited_greedy" keeping --topk-group of
--groups groups otherwise, no renormalization, routed scaling 1.0; --shared ungated shared experts
as one FFN of --shared x --ffn; the first --dense-layers layers dense (FFN --dense-ffn). --kv-heads
does not apply (every head has its own key and value). The command above is DeepSeek-V2-Lite with 6
of its 27 layers (6.85 GB, 3.4 B parameters).

--arch gpt_oss writes gpt-oss as released: the experts fused per layer in MXFP4 (gate_up_proj and
down_proj as *_blocks / *_scales, random codes under scales around 2^-7, with bf16 biases),
everything else bf16: q/k/v/o biases, sinks, the router's bias, heads of --head-dim, every other
layer sliding (window 128), YaRN x32 from 4096 untruncated, the SwiGLU limit 7. gpt-oss-20b's
shapes with 4 of its 24 layers:

  python3 tools/make_synthetic_checkpoint.py --out /tmp/oss20b-4l --arch gpt_oss --hidden 2880 \
      --layers 4 --heads 64 --kv-heads 8 --head-dim 64 --experts 32 --top-k 4 --ffn 2880 --vocab 201088 \
      --tokenizer tests/fixtures/tokenizers/gpt_oss

--arch qwen3_next writes Qwen3-Next: every fourth layer full attention (q_proj with its output gate,
per-head q/k norms, heads of --head-dim, a quarter rotary), the others Gated DeltaNet
(in_proj_qkvz, in_proj_ba, the convolution, A_log, dt_bias, the gated norm, out_proj) with
--linear-k-heads key heads and --linear-v-heads value heads of --linear-dim; every layer MoE with a
sigmoid-gated shared expert of --shared-ffn; (1 + w) norms drawn around w = 0. Qwen3-Next-80B-A3B's
shapes with 4 of its 48 layers:

  python3 tools/make_synthetic_checkpoint.py --out /tmp/qwen3next-4l --arch qwen3_next --hidden 2048 \
      --layers 4 --heads 16 --kv-heads 2 --head-dim 256 --experts 512 --top-k 10 --ffn 512 \
      --shared-ffn 512 --vocab 151936
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER = REPO / "tests" / "fixtures" / "models" / "mixtral-f32"
CHUNK_ELEMENTS = 1 << 22  # 4M values (16 MB of float32 scratch) per generated chunk
BF16_BYTES = 2


def gpt_oss_layer(a, p):
    """One gpt-oss layer as released, `p` = "model.layers.{i}.": std None marks MXFP4 bytes (U8)."""
    H, I, E, hd = a.hidden, a.ffn, a.experts, a.head_dim
    q, kv = a.heads * hd, a.kv_heads * hd
    return [(p + "input_layernorm.weight", (H,), 0.0, "dense"),
            (p + "post_attention_layernorm.weight", (H,), 0.0, "dense"),
            (p + "self_attn.q_proj.weight", (q, H), H ** -0.5, "dense"),
            (p + "self_attn.k_proj.weight", (kv, H), H ** -0.5, "dense"),
            (p + "self_attn.v_proj.weight", (kv, H), H ** -0.5, "dense"),
            (p + "self_attn.o_proj.weight", (H, q), q ** -0.5, "dense"),
            (p + "self_attn.q_proj.bias", (q,), 0.02, "dense"),
            (p + "self_attn.k_proj.bias", (kv,), 0.02, "dense"),
            (p + "self_attn.v_proj.bias", (kv,), 0.02, "dense"),
            (p + "self_attn.o_proj.bias", (H,), 0.02, "dense"),
            (p + "self_attn.sinks", (a.heads,), 1.0, "dense"),
            (p + "mlp.router.weight", (E, H), 2.0 * H ** -0.5, "dense"),
            (p + "mlp.router.bias", (E,), 0.05, "dense"),
            (p + "mlp.experts.gate_up_proj_blocks", (E, 2 * I, H // 32, 16), None, "expert"),
            (p + "mlp.experts.gate_up_proj_scales", (E, 2 * I, H // 32), None, "expert"),
            (p + "mlp.experts.gate_up_proj_bias", (E, 2 * I), 0.02, "dense"),
            (p + "mlp.experts.down_proj_blocks", (E, H, I // 32, 16), None, "expert"),
            (p + "mlp.experts.down_proj_scales", (E, H, I // 32), None, "expert"),
            (p + "mlp.experts.down_proj_bias", (E, H), 0.02, "dense")]


ZERO_CENTERED = -0.1  # std < 0: values around 0 with |std| spread ((1 + w) norms)


def qwen3_next_layer(a, i, p):
    """One Qwen3-Next layer, `p` = "model.layers.{i}.": Gated DeltaNet, or full attention every fourth."""
    H, I, E, hd = a.hidden, a.ffn, a.experts, a.head_dim
    plan = [(p + "input_layernorm.weight", (H,), ZERO_CENTERED, "dense"),
            (p + "post_attention_layernorm.weight", (H,), ZERO_CENTERED, "dense")]
    if (i + 1) % 4 == 0:
        q, kv = a.heads * hd, a.kv_heads * hd
        plan += [(p + "self_attn.q_proj.weight", (2 * q, H), H ** -0.5, "dense"),
                 (p + "self_attn.k_proj.weight", (kv, H), H ** -0.5, "dense"),
                 (p + "self_attn.v_proj.weight", (kv, H), H ** -0.5, "dense"),
                 (p + "self_attn.o_proj.weight", (H, q), q ** -0.5, "dense"),
                 (p + "self_attn.q_norm.weight", (hd,), ZERO_CENTERED, "dense"),
                 (p + "self_attn.k_norm.weight", (hd,), ZERO_CENTERED, "dense")]
    else:
        nk, nv, d = a.linear_k_heads, a.linear_v_heads, a.linear_dim
        conv = 2 * nk * d + nv * d
        plan += [(p + "linear_attn.in_proj_qkvz.weight", (2 * nk * d + 2 * nv * d, H), H ** -0.5, "dense"),
                 (p + "linear_attn.in_proj_ba.weight", (2 * nv, H), H ** -0.5, "dense"),
                 (p + "linear_attn.conv1d.weight", (conv, 1, 4), 0.5, "dense"),
                 (p + "linear_attn.A_log", (nv,), 0.5, "dense"),
                 (p + "linear_attn.dt_bias", (nv,), 0.5, "dense"),
                 (p + "linear_attn.norm.weight", (d,), 0.0, "dense"),
                 (p + "linear_attn.out_proj.weight", (H, nv * d), (nv * d) ** -0.5, "dense")]
    S = a.shared_ffn
    plan += [(p + "mlp.gate.weight", (E, H), 2.0 * H ** -0.5, "dense"),
             (p + "mlp.shared_expert_gate.weight", (1, H), H ** -0.5, "dense"),
             (p + "mlp.shared_expert.gate_proj.weight", (S, H), H ** -0.5, "dense"),
             (p + "mlp.shared_expert.up_proj.weight", (S, H), H ** -0.5, "dense"),
             (p + "mlp.shared_expert.down_proj.weight", (H, S), S ** -0.5, "dense")]
    for j in range(E):
        q = f"{p}mlp.experts.{j}."
        plan += [(q + "gate_proj.weight", (I, H), H ** -0.5, "expert"),
                 (q + "up_proj.weight", (I, H), H ** -0.5, "expert"),
                 (q + "down_proj.weight", (H, I), I ** -0.5, "expert")]
    return plan


def tensor_plan(a):
    """(name, shape, std, kind) for every tensor, kind = dense | expert | embed | head."""
    H, I, V, E = a.hidden, a.ffn, a.vocab, a.experts
    hd = H // a.heads
    plan = [("model.embed_tokens.weight", (V, H), 1.0, "embed")]
    if a.arch == "qwen3_next":
        for i in range(a.layers):
            plan += qwen3_next_layer(a, i, f"model.layers.{i}.")
        return plan + [("model.norm.weight", (H,), ZERO_CENTERED, "dense"),
                       ("lm_head.weight", (V, H), 3.0 * H ** -0.5, "head")]
    if a.arch == "gpt_oss":
        for i in range(a.layers):
            plan += gpt_oss_layer(a, f"model.layers.{i}.")
        return plan + [("model.norm.weight", (H,), 0.0, "dense"), ("lm_head.weight", (V, H), 3.0 * H ** -0.5, "head")]
    glm = a.arch == "glm4_moe"
    ds = a.arch == "deepseek_v2"
    for i in range(a.layers):
        p = f"model.layers.{i}."
        if ds:
            plan += [(p + "input_layernorm.weight", (H,), 0.0, "dense"),
                     (p + "post_attention_layernorm.weight", (H,), 0.0, "dense")]
            plan += mla_plan(a, p + "self_attn.")
        if glm:
            plan += [(p + "self_attn.q_proj.bias", (a.heads * hd,), 0.02, "dense"),
                     (p + "self_attn.k_proj.bias", (a.kv_heads * hd,), 0.02, "dense"),
                     (p + "self_attn.v_proj.bias", (a.kv_heads * hd,), 0.02, "dense")]
        if not ds:
            plan += [
                (p + "input_layernorm.weight", (H,), 0.0, "dense"),
                (p + "post_attention_layernorm.weight", (H,), 0.0, "dense"),
                (p + "self_attn.q_proj.weight", (a.heads * hd, H), H ** -0.5, "dense"),
                (p + "self_attn.k_proj.weight", (a.kv_heads * hd, H), H ** -0.5, "dense"),
                (p + "self_attn.v_proj.weight", (a.kv_heads * hd, H), H ** -0.5, "dense"),
                (p + "self_attn.o_proj.weight", (H, a.heads * hd), (a.heads * hd) ** -0.5, "dense"),
            ]
        if (glm or ds) and i < a.dense_layers:
            plan += [(p + "mlp.gate_proj.weight", (a.dense_ffn, H), H ** -0.5, "dense"),
                     (p + "mlp.up_proj.weight", (a.dense_ffn, H), H ** -0.5, "dense"),
                     (p + "mlp.down_proj.weight", (H, a.dense_ffn), a.dense_ffn ** -0.5, "dense")]
            continue
        moe = "mlp" if glm or ds else "block_sparse_moe"
        names = ("gate_proj", "up_proj", "down_proj") if glm or ds else ("w1", "w3", "w2")
        plan.append((p + moe + ".gate.weight", (E, H), 2.0 * H ** -0.5, "dense"))
        if glm:
            plan.append((p + "mlp.gate.e_score_correction_bias", (E,), 0.05, "dense"))
        if glm or ds:  # the shared experts: one ungated FFN of --shared x --ffn
            S = I * a.shared
            plan += [(p + "mlp.shared_experts.gate_proj.weight", (S, H), H ** -0.5, "dense"),
                     (p + "mlp.shared_experts.up_proj.weight", (S, H), H ** -0.5, "dense"),
                     (p + "mlp.shared_experts.down_proj.weight", (H, S), S ** -0.5, "dense")]
        for j in range(E):
            q = f"{p}{moe}.experts.{j}."
            plan += [(q + names[0] + ".weight", (I, H), H ** -0.5, "expert"),
                     (q + names[1] + ".weight", (I, H), H ** -0.5, "expert"),
                     (q + names[2] + ".weight", (H, I), I ** -0.5, "expert")]
    plan.append(("model.norm.weight", (H,), 0.0, "dense"))
    plan.append(("lm_head.weight", (V, H), 3.0 * H ** -0.5, "head"))
    return plan


def mla_plan(a, p):
    """DeepSeek-V2's multi-head latent attention of one layer, `p` = "model.layers.{i}.self_attn."."""
    H, n = a.hidden, a.heads
    qk = a.qk_nope + a.qk_rope
    if a.q_lora_rank:
        R = a.q_lora_rank
        plan = [(p + "q_a_proj.weight", (R, H), H ** -0.5, "dense"),
                (p + "q_a_layernorm.weight", (R,), 0.0, "dense"),
                (p + "q_b_proj.weight", (n * qk, R), R ** -0.5, "dense")]
    else:
        plan = [(p + "q_proj.weight", (n * qk, H), H ** -0.5, "dense")]
    L = a.kv_lora_rank
    return plan + [(p + "kv_a_proj_with_mqa.weight", (L + a.qk_rope, H), H ** -0.5, "dense"),
                   (p + "kv_a_layernorm.weight", (L,), 0.0, "dense"),
                   (p + "kv_b_proj.weight", (n * (a.qk_nope + a.v_head), L), L ** -0.5, "dense"),
                   (p + "o_proj.weight", (H, n * a.v_head), (n * a.v_head) ** -0.5, "dense")]


def n_bytes(shape, std=0.0):
    """bf16 values, or (std None) MXFP4 blocks and scales: one byte each."""
    return int(np.prod(shape, dtype=np.int64)) * (1 if std is None else BF16_BYTES)


def to_bf16_bits(values):
    """float32 -> bfloat16 bit patterns, round to nearest even (values are finite)."""
    bits = values.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def write_tensor_data(out, shape, std, rng, scales=False):
    remaining = int(np.prod(shape, dtype=np.int64))
    while remaining > 0:
        count = min(remaining, CHUNK_ELEMENTS)
        if std is None:  # MXFP4: random E2M1 code pairs, or E8M0 scales of 2^-8 .. 2^-6
            data = rng.integers(127 - 8, 127 - 5, count, dtype=np.uint8) if scales else \
                rng.integers(0, 256, count, dtype=np.uint8)
            out.write(data.tobytes())
            remaining -= count
            continue
        if std == 0.0:  # norms: around 1 with a little noise
            values = 1.0 + 0.1 * rng.standard_normal(count, dtype=np.float32)
        elif std < 0.0:  # (1 + w) norms: w around 0
            values = rng.standard_normal(count, dtype=np.float32) * np.float32(-std)
        else:
            values = rng.standard_normal(count, dtype=np.float32) * np.float32(std)
        out.write(to_bf16_bits(values.astype(np.float32)).tobytes())
        remaining -= count


def split_shards(plan, max_shard_bytes):
    shards, current, size = [], [], 0
    for entry in plan:
        b = n_bytes(entry[1], entry[2])
        if current and size + b > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(entry)
        size += b
    if current:
        shards.append(current)
    return shards


def write_shard(path, entries, rng):
    entries = sorted(entries, key=lambda e: e[0])  # the safetensors writer's order for one dtype
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, std, _ in entries:
        size = n_bytes(shape, std)
        header[name] = {"dtype": "U8" if std is None else "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(len(text).to_bytes(8, "little"))
            out.write(text)
            for name, shape, std, _ in entries:
                write_tensor_data(out, shape, std, rng, scales=name.endswith("_scales"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def extend_tokenizer(tokenizer_json, vocab_size):
    """Grows a byte-level BPE tokenizer.json to `vocab_size` ids with synthetic merges of existing
    tokens, so that every id the random model can emit decodes to some bytes."""
    tok = json.loads(tokenizer_json)
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    n_added = max([a["id"] for a in tok.get("added_tokens", [])] + [-1]) + 1
    next_id = max(list(vocab.values()) + [n_added - 1]) + 1
    base = sorted((t for t in vocab if len(t) == 1), key=lambda t: vocab[t])
    pieces = list(base)
    i = 0
    while next_id < vocab_size:
        left = pieces[i // len(base)]
        right = base[i % len(base)]
        i += 1
        if left + right in vocab:
            continue
        vocab[left + right] = next_id
        merges.append([left, right] if merges and isinstance(merges[0], list) else f"{left} {right}")
        pieces.append(left + right)
        next_id += 1
    return json.dumps(tok, ensure_ascii=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--ffn", type=int, default=3584, help="expert intermediate size")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--max-position", type=int, default=4096)
    parser.add_argument("--max-shard-gb", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER,
                        help="folder with tokenizer.json + tokenizer_config.json (byte-level BPE)")
    parser.add_argument("--dry-run", action="store_true", help="print sizes, write nothing")
    parser.add_argument("--arch", choices=["mixtral", "glm4_moe", "deepseek_v2", "gpt_oss", "qwen3_next"],
                        default="mixtral")
    parser.add_argument("--head-dim", type=int, default=0, help="gpt_oss, qwen3_next: head width (0: hidden / heads)")
    parser.add_argument("--linear-k-heads", type=int, default=16, help="qwen3_next: Gated DeltaNet key heads")
    parser.add_argument("--linear-v-heads", type=int, default=32, help="qwen3_next: Gated DeltaNet value heads")
    parser.add_argument("--linear-dim", type=int, default=128, help="qwen3_next: key and value head width")
    parser.add_argument("--shared-ffn", type=int, default=512, help="qwen3_next: the shared expert's FFN size")
    parser.add_argument("--groups", type=int, default=4,
                        help="glm4_moe, deepseek_v2: expert groups (n_group; deepseek_v2: 1 = greedy top-k)")
    parser.add_argument("--topk-group", type=int, default=2,
                        help="glm4_moe, deepseek_v2: groups kept per token (deepseek_v2 with --groups 1: 1)")
    parser.add_argument("--shared", type=int, default=1, help="glm4_moe, deepseek_v2: shared experts")
    parser.add_argument("--dense-layers", type=int, default=1, help="glm4_moe, deepseek_v2: leading dense layers")
    parser.add_argument("--dense-ffn", type=int, default=0,
                        help="glm4_moe, deepseek_v2: dense FFN size (default 4 x --ffn)")
    parser.add_argument("--kv-lora-rank", type=int, default=512, help="deepseek_v2: latent KV width (kv_lora_rank)")
    parser.add_argument("--q-lora-rank", type=int, default=0,
                        help="deepseek_v2: low-rank query width (q_lora_rank; 0 = null, a plain q_proj)")
    parser.add_argument("--qk-nope", type=int, default=128, help="deepseek_v2: unrotated q/k head dim (qk_nope_head_dim)")
    parser.add_argument("--qk-rope", type=int, default=64, help="deepseek_v2: rotary q/k head dim (qk_rope_head_dim)")
    parser.add_argument("--v-head", type=int, default=128, help="deepseek_v2: value head dim (v_head_dim)")
    a = parser.parse_args()
    ds = a.arch == "deepseek_v2"
    if ds:
        a.kv_heads = a.heads  # MLA: every head has its own key and value
    a.head_dim = a.head_dim or a.hidden // a.heads
    if (a.hidden % a.heads and a.arch not in ("gpt_oss", "qwen3_next")) or a.heads % a.kv_heads:
        parser.error("hidden must divide by heads, heads by kv-heads")
    if a.arch == "gpt_oss" and (a.hidden % 32 or a.ffn % 32):
        parser.error("gpt_oss: --hidden and --ffn must be multiples of 32 (MXFP4 blocks)")
    if ds:
        if a.kv_lora_rank < 1 or a.q_lora_rank < 0 or a.qk_nope < 1 or a.v_head < 1:
            parser.error("--kv-lora-rank, --qk-nope and --v-head must be positive, --q-lora-rank >= 0")
        if a.qk_rope < 2 or a.qk_rope % 2:
            parser.error("--qk-rope must be even and at least 2")
        if a.groups <= 1:
            a.groups = a.topk_group = 1  # greedy: top-k over every expert
        if a.experts % a.groups or not 1 <= a.topk_group <= a.groups \
                or a.topk_group * (a.experts // a.groups) < a.top_k:
            parser.error("--groups must divide --experts, --topk-group be in [1, --groups], and the kept "
                         "groups hold at least --top-k experts")

    a.dense_ffn = a.dense_ffn or 4 * a.ffn
    if a.arch not in ("glm4_moe", "deepseek_v2"):
        a.dense_layers = 0
    a.dense_layers = min(a.dense_layers, a.layers)
    plan = tensor_plan(a)
    kind_bytes = {}
    for _, shape, std, kind in plan:
        kind_bytes[kind] = kind_bytes.get(kind, 0) + n_bytes(shape, std)
    total = sum(kind_bytes.values())
    expert_bytes = 3 * a.hidden * a.ffn * (17 / 32 if a.arch == "gpt_oss" else BF16_BYTES)
    # Bytes read per decoded token: all dense weights, K of E experts in every layer, the
    # lm_head, and one embedding row.
    per_token = kind_bytes["dense"] + (a.layers - a.dense_layers) * a.top_k * expert_bytes + kind_bytes["head"] + a.hidden * BF16_BYTES
    print(f"total {total / 1e9:.3f} GB: dense {kind_bytes['dense'] / 1e6:.1f} MB, "
          f"experts {kind_bytes['expert'] / 1e9:.3f} GB ({a.layers - a.dense_layers} x {a.experts} x {expert_bytes / 1e6:.1f} MB), "
          f"embed {kind_bytes['embed'] / 1e6:.1f} MB, lm_head {kind_bytes['head'] / 1e6:.1f} MB")
    print(f"bytes touched per decoded token: {per_token} ({per_token / 1e6:.1f} MB) = dense "
          f"{kind_bytes['dense'] / 1e6:.1f} MB + {a.layers - a.dense_layers} layers x {a.top_k} experts x "
          f"{expert_bytes / 1e6:.2f} MB + lm_head {kind_bytes['head'] / 1e6:.1f} MB + one embedding row")
    print(f"  bandwidth limit: tokens/s <= memory bandwidth / {per_token / 1e9:.4f} GB "
          f"(e.g. {20e9 / per_token:.1f} tok/s at 20 GB/s)")
    print(f"{a.arch}: {total // BF16_BYTES / 1e9:.3f} B parameters in {len(plan)} tensors; {a.layers} layers "
          f"({a.dense_layers} dense, FFN {a.dense_ffn}), hidden {a.hidden}, vocab {a.vocab}")
    if ds:
        attn = sum(n_bytes(e[1]) for e in mla_plan(a, ""))
        method = "greedy" if a.groups == 1 else f"group_limited_greedy ({a.topk_group} of {a.groups} groups)"
        print(f"  MLA: {a.heads} heads, q/k {a.qk_nope}+{a.qk_rope}, v {a.v_head}, kv_lora_rank {a.kv_lora_rank}, "
              f"q_lora_rank {a.q_lora_rank or 'null'}: {attn / 1e6:.1f} MB per layer; latent KV cache "
              f"{(a.kv_lora_rank + a.qk_rope) * a.layers * BF16_BYTES} bytes per token (bf16)")
        print(f"  MoE: softmax {method}, top-{a.top_k} of {a.experts} experts (FFN {a.ffn}), "
              f"{a.shared} shared (FFN {a.shared * a.ffn})")
    if a.dry_run:
        return 0

    a.out.mkdir(parents=True, exist_ok=True)
    tokenizer_json = (a.tokenizer / "tokenizer.json").read_text(encoding="utf-8")
    (a.out / "tokenizer.json").write_text(extend_tokenizer(tokenizer_json, a.vocab), encoding="utf-8")
    tokenizer_config = json.loads((a.tokenizer / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = a.max_position
    (a.out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    eos_id = 0  # <|endoftext|>, the first added token of the fixture tokenizer

    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "dtype": "bfloat16",
        "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads, "num_local_experts": a.experts, "num_experts_per_tok": a.top_k,
        "max_position_embeddings": a.max_position, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": eos_id, "pad_token_id": None,
        "sliding_window": None, "attention_dropout": 0.0, "router_jitter_noise": 0.0,
        "output_router_logits": False, "use_cache": True,
    }
    if a.arch == "glm4_moe":
        for key in ("num_local_experts", "sliding_window", "router_jitter_noise"):
            del config[key]
        config["rope_parameters"]["partial_rotary_factor"] = 0.5
        config.update({
            "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "intermediate_size": a.dense_ffn,
            "moe_intermediate_size": a.ffn, "n_routed_experts": a.experts, "n_shared_experts": a.shared,
            "n_group": a.groups, "topk_group": a.topk_group, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
            "first_k_dense_replace": a.dense_layers, "attention_bias": True, "use_qk_norm": False,
        })
    if ds:
        config = {
            "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "dtype": "bfloat16",
            "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.dense_ffn,
            "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.heads,
            "max_position_embeddings": a.max_position, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "q_lora_rank": a.q_lora_rank or None, "kv_lora_rank": a.kv_lora_rank,
            "qk_nope_head_dim": a.qk_nope, "qk_rope_head_dim": a.qk_rope, "v_head_dim": a.v_head,
            "n_routed_experts": a.experts, "num_experts_per_tok": a.top_k, "moe_intermediate_size": a.ffn,
            "n_shared_experts": a.shared, "first_k_dense_replace": a.dense_layers,
            "topk_method": "greedy" if a.groups == 1 else "group_limited_greedy",
            "n_group": a.groups, "topk_group": a.topk_group, "routed_scaling_factor": 1.0,
            "norm_topk_prob": False, "scoring_func": "softmax", "attention_bias": False,
            "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": eos_id, "pad_token_id": None,
            "attention_dropout": 0.0, "output_router_logits": False, "use_cache": True,
        }
    (a.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (a.out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id}, indent=2) + "\n")

    if a.arch == "qwen3_next":
        config = {
            "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "dtype": "bfloat16",
            "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": 4 * a.ffn,
            "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
            "head_dim": a.head_dim, "num_experts": a.experts, "num_experts_per_tok": a.top_k,
            "moe_intermediate_size": a.ffn, "shared_expert_intermediate_size": a.shared_ffn,
            "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": a.linear_dim,
            "linear_value_head_dim": a.linear_dim, "linear_num_key_heads": a.linear_k_heads,
            "linear_num_value_heads": a.linear_v_heads, "max_position_embeddings": a.max_position,
            "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": eos_id,
        }
        (a.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if a.arch == "gpt_oss":
        layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(a.layers)]
        config = {
            "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": a.vocab,
            "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
            "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
            "num_local_experts": a.experts, "num_experts_per_tok": a.top_k, "experts_per_token": a.top_k,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 4096},
            "rope_theta": 150000, "sliding_window": 128, "layer_types": layer_types, "swiglu_limit": 7.0,
            "attention_bias": True, "tie_word_embeddings": False, "eos_token_id": 200002, "pad_token_id": None,
            "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
        }
        (a.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (a.out / "generation_config.json").write_text(json.dumps({"eos_token_id": [200002, 199999, 200012]}) + "\n")
    shards = split_shards(plan, int(a.max_shard_gb * 1e9))
    rng = np.random.default_rng(a.seed)
    weight_map = {}
    for k, entries in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        write_shard(a.out / name, entries, rng)
        weight_map.update({e[0]: name for e in entries})
        print(f"wrote {name} ({sum(n_bytes(e[1], e[2]) for e in entries) / 1e9:.3f} GB)", file=sys.stderr)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (a.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
