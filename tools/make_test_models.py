#!/usr/bin/env python3
"""Builds the tiny reference checkpoints in tests/fixtures/models with Hugging Face transformers.

Each model folder is exactly what `save_pretrained` writes (config.json, generation_config.json,
safetensors weights, tokenizer.json, tokenizer_config.json) plus reference.json: logits for every
position of three fixed token-id prompts, their 32-token greedy continuations, and one text case.
See tests/fixtures/README.md for the layout and the regeneration command.

Usage:
  python3 tools/make_test_models.py                 # regenerate everything, then verify
  python3 tools/make_test_models.py --verify-only   # reload each folder, check reference.json
"""
import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

import tokenizers
import transformers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, MixtralConfig, MixtralForCausalLM,
                          DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          Glm4MoeConfig, Glm4MoeForCausalLM, Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM,
                          GptOssConfig, GptOssForCausalLM,
                          MiniMaxM2Config, MiniMaxM2ForCausalLM,
                          OlmoeConfig, OlmoeForCausalLM,
                          PreTrainedTokenizerFast, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3NextConfig,
                          Qwen3NextForCausalLM, Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "models"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 384
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Qwen2's pre-tokenizer split pattern (tokenizer.json of Qwen/Qwen1.5-MoE-A2.7B).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")

N_NEW_TOKENS = 32
PROMPT_LENGTHS = (5, 12, 40)
# Models with a chunked prefill (Gated DeltaNet: transformers' chunks of 64) add one longer prompt,
# and each prompt's logits in float64, one token at a time (logits_f64).
LONG_PROMPT_LENGTHS = PROMPT_LENGTHS + (150,)
TEXT_PROMPT = "The river keeps its own time, and the"
CHAT_MESSAGES = [{"role": "user", "content": "Tell me about the old mill."}]

# A few KB of plain text to train the byte-level BPE on. Varied on purpose: prose, numbers,
# code, punctuation and some non-ASCII so multi-byte UTF-8 sequences appear in the merges.
CORPUS = """
The river keeps its own time. In spring it runs high and brown with snowmelt from the hills,
and the old mill by the bridge turns faster than it has all year. By late summer the water is
low and clear, and children wade out to the flat stones to look for crayfish under the weeds.
The miller's daughter kept a ledger of the river's height for forty years: 1.2 metres in April,
0.4 metres in August, and once, in the flood of 1968, nearly 3 metres over the lower steps.
Nobody in the village reads the ledger now, but it sits on a shelf in the library, next to a
book of photographs and a map of the county drawn by hand in 1902.

A good engineer measures before changing anything. She writes down what she expects to see,
runs the experiment, and compares the numbers with the prediction. When they disagree, the
disagreement is the interesting part: either the model of the system was wrong, or the
measurement was. Both happen often. The habit that matters is to keep the records honest and
to say plainly what was not measured.

def mean(values):
    total = 0.0
    for value in values:
        total += value
    return total / len(values)

for (int i = 0; i < n; ++i) { sum += x[i] * w[i]; }
print("hello, world")  # 42 == 6 * 7

The café on the corner serves crêpes and a naïve little cake called the "señor". Über-fresh
bread arrives at 6:30 every morning. Prices: 3,50 € for coffee, 2 £ in the English shop, and
¥300 at the station kiosk. 日本語のテキストも少し。Ελληνικά και русский текст тоже.

Questions people ask at the mill: How old is the wheel? Who built the bridge? Why does the
water sound different at night? The answers are written on a board by the door: the wheel is
from 1887, the bridge was built by the county in 1911, and the water sounds different at night
because the wind drops and the road is quiet, so you hear the weir from the whole valley.

Mixture-of-experts models route each token to a few experts out of many. The router is a
small linear layer followed by a softmax; the top-k experts are evaluated and their outputs
are mixed with the routing weights. Most parameters sit in the experts, yet each token only
touches a small fraction of them, which is why memory bandwidth, not arithmetic, sets the
speed of decoding on a single machine.

Weather report: cloudy, 14 degrees, wind from the west at 20 km/h; rain later in the evening.
Tomorrow: sunny spells, 17 degrees. The weekend looks dry. Sunrise 06:12, sunset 20:47.
"""

# name, architecture, dtype, options. Every architecture in float32 and bfloat16 (same weights),
# plus a tied-embedding Mixtral and a sharded copy of the float32 Qwen2-MoE.
VARIANTS = [
    ("mixtral-f32", "mixtral", torch.float32, {}),
    ("mixtral-bf16", "mixtral", torch.bfloat16, {}),
    ("mixtral-tied-f32", "mixtral", torch.float32, {"tie": True}),
    ("qwen2_moe-f32", "qwen2_moe", torch.float32, {}),
    ("qwen2_moe-bf16", "qwen2_moe", torch.bfloat16, {}),
    ("qwen2_moe-sharded-f32", "qwen2_moe", torch.float32, {"shard": "200KB"}),
    ("qwen3_moe-f32", "qwen3_moe", torch.float32, {}),
    ("qwen3_moe-bf16", "qwen3_moe", torch.bfloat16, {}),
    ("olmoe-f32", "olmoe", torch.float32, {}),
    ("olmoe-bf16", "olmoe", torch.bfloat16, {}),
    ("glm4_moe-f32", "glm4_moe", torch.float32, {}),
    ("glm4_moe-bf16", "glm4_moe", torch.bfloat16, {}),
    ("glm4_moe-plain-f32", "glm4_moe", torch.float32, {"plain": True}),
    ("minimax_m2-f32", "minimax_m2", torch.float32, {}),
    ("minimax_m2-bf16", "minimax_m2", torch.bfloat16, {}),
    ("deepseek_v3-f32", "deepseek_v3", torch.float32, {}),
    ("deepseek_v3-bf16", "deepseek_v3", torch.bfloat16, {}),
    ("deepseek_v3-plain-f32", "deepseek_v3", torch.float32, {"plain": True}),
    ("deepseek_v2-f32", "deepseek_v2", torch.float32, {}),
    ("deepseek_v2-greedy-f32", "deepseek_v2", torch.float32, {"plain": True}),
    ("glm4_moe_lite-f32", "glm4_moe_lite", torch.float32, {}),
    ("gpt_oss-f32", "gpt_oss", torch.float32, {}),
    ("gpt_oss-bf16", "gpt_oss", torch.bfloat16, {}),
    ("gpt_oss-mxfp4", "gpt_oss", torch.float32, {"mxfp4": True}),
    ("qwen3_next-f32", "qwen3_next", torch.float32, {"long": True}),
    ("qwen3_next-bf16", "qwen3_next", torch.bfloat16, {"long": True}),
    ("qwen3_5_moe-f32", "qwen3_5_moe", torch.float32, {"long": True}),
    ("qwen3_5_moe-bf16", "qwen3_5_moe", torch.bfloat16, {"long": True}),
]
ARCH_SEEDS = {"mixtral": 11, "qwen2_moe": 22, "qwen3_moe": 33, "olmoe": 44, "glm4_moe": 55, "minimax_m2": 66,
              "deepseek_v3": 77, "deepseek_v2": 88, "glm4_moe_lite": 99, "gpt_oss": 110,
              "qwen3_next": 123, "qwen3_5_moe": 132}

# DeepSeek's YaRN with both mscales present and different, so the rotary attention factor
# (mscale / mscale_all_dim) and the softmax scale (mscale_all_dim squared) both differ from 1.
# factor 4 on purpose differs from max_position_embeddings / original (256 / 32 = 8): transformers
# warns once and uses the explicit factor.
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                 "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                 "mscale": 0.9, "mscale_all_dim": 0.7}


def train_tokenizer():
    """A Qwen2-style byte-level BPE trained on CORPUS, wrapped as a fast HF tokenizer."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([CORPUS], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", bos_token=None, unk_token=None,
                                   chat_template=CHATML_TEMPLATE, model_max_length=256)


def build_config(arch, vocab_size, eos_id, tie, plain=False):
    common = dict(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, num_experts_per_tok=2, max_position_embeddings=256,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  tie_word_embeddings=tie, bos_token_id=None, eos_token_id=eos_id,
                  pad_token_id=eos_id, rms_norm_eps=1e-6)
    if arch == "mixtral":
        return MixtralConfig(**common, intermediate_size=32, num_local_experts=8), MixtralForCausalLM
    if arch == "qwen2_moe":
        # Layer 1 is a dense MLP (mlp_only_layers), so both MLP paths are exercised.
        return Qwen2MoeConfig(**common, intermediate_size=48, moe_intermediate_size=32,
                              shared_expert_intermediate_size=40, num_experts=8,
                              decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=False,
                              qkv_bias=True), Qwen2MoeForCausalLM
    if arch == "qwen3_moe":
        # head_dim 32 != hidden/heads = 16: q_proj is [128, 64], o_proj [64, 128].
        return Qwen3MoeConfig(**common, head_dim=32, intermediate_size=48, moe_intermediate_size=32,
                              num_experts=8, decoder_sparse_step=1, mlp_only_layers=[],
                              norm_topk_prob=True), Qwen3MoeForCausalLM
    if arch == "olmoe":
        return OlmoeConfig(**common, intermediate_size=32, num_experts=8, norm_topk_prob=False,
                           clip_qkv=None), OlmoeForCausalLM
    if arch == "glm4_moe":
        # Everything distinctive on: 4 groups of 4 experts, the best 2 groups, 3 experts per token,
        # a nonzero correction bias (reinitialize), renormalized and scaled by 2.5, per-head q/k norm,
        # q/k/v biases, half-rotary heads of 32, layer 0 dense, one shared expert. "plain": one group,
        # no renormalization, scale 1, no norm or bias, no dense layer, two shared experts.
        glm = dict(common, num_experts_per_tok=3, head_dim=32, partial_rotary_factor=0.5,
                   intermediate_size=48, moe_intermediate_size=32, n_routed_experts=16)
        if plain:
            glm.update(n_group=1, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0,
                       use_qk_norm=False, attention_bias=False, first_k_dense_replace=0, n_shared_experts=2)
        else:
            glm.update(n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                       use_qk_norm=True, attention_bias=True, first_k_dense_replace=1, n_shared_experts=1)
        return Glm4MoeConfig(**glm), Glm4MoeForCausalLM
    if arch == "minimax_m2":
        # 16 experts, 3 per token, the sigmoid router's correction bias nonzero (reinitialize),
        # full-width q/k norm, a quarter of each 32-wide head rotary (the checkpoints' rotary_dim 8).
        mm = dict(common, num_experts_per_tok=3, head_dim=32, intermediate_size=32, num_local_experts=16)
        mm["rope_parameters"] = dict(common["rope_parameters"], partial_rotary_factor=0.25)
        return MiniMaxM2Config(**mm), MiniMaxM2ForCausalLM
    if arch in ("deepseek_v3", "deepseek_v2"):
        # MLA: q through a rank-24 LoRA (q_a_proj, q_a_layernorm, q_b_proj), k/v through a rank-32
        # latent plus one shared 8-wide rotary key; q/k heads 16 + 8 wide, v heads 12 (not 16, on
        # purpose); as many KV heads as heads (MLA expands the latent per head). 8 experts of 32,
        # layer 0 dense (FFN 96), YaRN with both mscales. V3: top-2, sigmoid router with a nonzero
        # correction bias (reinitialize), 4 groups of which 2, renormalized, scaled by 2.5, one shared
        # expert, interleaved rope. V2: top-3, softmax router, group_limited_greedy (4 groups, best 2
        # by their max), no renormalization, scaled by 1.5, two shared experts, complex-pair rope.
        # "plain": q_proj without LoRA, default rope, scale 1, no dense layer; V3 without groups,
        # V2 with the plain greedy top-k.
        ds = dict(common, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16,
                  qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8, moe_intermediate_size=32,
                  intermediate_size=96, first_k_dense_replace=1, rope_parameters=dict(DEEPSEEK_YARN))
        if arch == "deepseek_v3":
            ds.update(n_group=4, topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5,
                      norm_topk_prob=True, rope_interleave=True)
            if plain:
                ds.update(q_lora_rank=None, n_group=1, topk_group=1, routed_scaling_factor=1.0,
                          first_k_dense_replace=0, rope_parameters=dict(common["rope_parameters"]))
            return DeepseekV3Config(**ds), DeepseekV3ForCausalLM
        # Top-3, not 2: with a group's score its best expert, 2 groups always hold the best 2
        # experts, so the limit would never bind; the third expert is sometimes masked out.
        ds.update(topk_method="group_limited_greedy", n_group=4, topk_group=2, num_experts_per_tok=3,
                  n_shared_experts=2, routed_scaling_factor=1.5, norm_topk_prob=False)
        if plain:
            ds.update(topk_method="greedy", q_lora_rank=None, routed_scaling_factor=1.0,
                      first_k_dense_replace=0, rope_parameters=dict(common["rope_parameters"]))
        return DeepseekV2Config(**ds), DeepseekV2ForCausalLM
    if arch == "glm4_moe_lite":
        # GLM-4.7-Flash: DeepSeek-V3's MLA (q rank 24, latent 32, heads 16 + 8, v 12) with GLM's
        # keys: the dense layer named by mlp_layer_types, default rope at theta 1e6 on adjacent
        # pairs, 8 experts in 2 groups of which 1, top-2, renormalized, scaled by 1.8, one shared.
        lite = dict(common, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16,
                    qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8, moe_intermediate_size=32,
                    intermediate_size=96, mlp_layer_types=["dense", "sparse", "sparse"], n_group=2,
                    topk_group=1, n_shared_experts=1, routed_scaling_factor=1.8, norm_topk_prob=True,
                    rope_interleave=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        return Glm4MoeLiteConfig(**lite), Glm4MoeLiteForCausalLM
    if arch == "gpt_oss":
        # Sinks, a sliding window of 8 on layers 0 and 2 (the 12- and 40-token prompts outgrow it),
        # q/k/v/o biases, heads of 32 (q_dim 128 != hidden 64), YaRN without truncation (factor 4 from
        # 64), top-2 of 8 experts with the router's bias, and a SwiGLU limit of 2 that the gate and up
        # projections cross often (their spread is about 2).
        oss = dict(common, head_dim=32, intermediate_size=32, num_local_experts=8, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   swiglu_limit=2.0, attention_bias=True,
                   rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                    "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                    "beta_slow": 1.0, "truncate": False})
        return GptOssConfig(**oss), GptOssForCausalLM
    if arch == "qwen3_next":
        # Gated DeltaNet on layers 0, 2 and 3 (2 key heads of 16 for 4 value heads of 24: two value
        # heads per key head, widths that differ so a mixed-up axis shows), full attention on layer 1
        # with the output gate, per-head q/k norm and a quarter of its 32-wide heads rotary; 16
        # experts, top-4, renormalized, a gated shared expert on every layer (as released: llama.cpp's
        # converter has no names for a dense layer of this family). Every norm random (the
        # (1 + w) ones around w = 0); A_log near -2.5 so the state decays slowly enough to carry
        # across the 150-token prompt's two chunks of 64.
        nxt = dict(common, num_hidden_layers=4, head_dim=32, num_experts_per_tok=4, num_experts=16,
                   moe_intermediate_size=32, shared_expert_intermediate_size=40, intermediate_size=48,
                   mlp_only_layers=[], decoder_sparse_step=1, norm_topk_prob=True,
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                   linear_value_head_dim=24, linear_conv_kernel_dim=4,
                   layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])
        nxt["rope_parameters"] = dict(common["rope_parameters"], partial_rotary_factor=0.25)
        return Qwen3NextConfig(**nxt), Qwen3NextForCausalLM
    if arch == "qwen3_5_moe":
        # Qwen3.5/3.6 as released: the vision-language wrapper (a one-block vision encoder, not
        # loaded by Chronos) around the text model, whose config nests in text_config and tensors
        # sit under model.language_model.; Gated DeltaNet with separate in_proj_qkv/z/b/a, every layer
        # MoE, the interleaved multimodal rotary (the same position on its three axes for text).
        text = dict(common, num_hidden_layers=4, head_dim=32, num_experts_per_tok=4, num_experts=16,
                    moe_intermediate_size=32, shared_expert_intermediate_size=40,
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                    linear_value_head_dim=24, linear_conv_kernel_dim=4,
                    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])
        text["rope_parameters"] = dict(common["rope_parameters"], partial_rotary_factor=0.25,
                                       mrope_section=[2, 1, 1], mrope_interleaved=True)
        for key in ("tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"):
            text.pop(key)
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=4, num_position_embeddings=16)
        return (Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie,
                                 bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id),
                Qwen3_5MoeForConditionalGeneration)
    raise ValueError(arch)


@torch.no_grad()
def reinitialize(model, seed, unit_offset_norms=False):
    """Weights large enough that logits are spread, routing is uneven and greedy text varies
    (the default std 0.02 gives near-uniform logits and degenerate continuations).
    unit_offset_norms: the model's RMSNorms scale by (1 + w) (Qwen3-Next, Qwen3.5; not the gated
    norm of its linear attention), so w is drawn around 0 for the same effective scale."""
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        noise = torch.randn(param.shape, generator=gen)
        if "norm" in name and unit_offset_norms and not name.endswith("linear_attn.norm.weight"):
            value = 0.15 * noise
        elif "norm" in name:
            value = 1.0 + 0.15 * noise
        elif name.endswith(".bias"):
            value = 0.2 * noise
        elif "embed_tokens" in name:
            value = 0.6 * noise
        elif name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight"):  # routers
            value = 0.6 * noise
        elif name.endswith("linear_attn.A_log"):  # Gated DeltaNet: decays exp(-exp(A_log) ...) near 1
            value = -2.5 + 1.0 * noise
        elif name.endswith("self_attn.sinks"):  # gpt-oss: one logit per head, as large as the scores
            value = 1.5 + 1.0 * noise
        elif "lm_head" in name:
            value = 0.35 * noise
        else:
            value = 0.25 * noise
        param.copy_(value.to(param.dtype))
    for name, buf in model.named_buffers():
        if name.endswith("e_score_correction_bias"):  # sigmoid routers: a bias that changes choices
            buf.copy_((0.3 * torch.randn(buf.shape, generator=gen)).to(buf.dtype))


def fixed_prompts(vocab_size, n_special, lengths=PROMPT_LENGTHS):
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(n_special, vocab_size, (n,), generator=gen).tolist() for n in lengths]


def compact(values):
    """float32 values as the shortest decimal strings that round-trip, to keep JSON small."""
    return [float(np.format_float_positional(v, unique=True, trim="-")) for v in
            np.asarray(values, dtype=np.float32).ravel()]


@torch.no_grad()
def greedy(model, ids):
    """32 greedy tokens; eos neither stops nor is suppressed (generation eos is unset)."""
    out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N_NEW_TOKENS,
                         min_new_tokens=N_NEW_TOKENS, eos_token_id=None, pad_token_id=0,
                         attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


@torch.no_grad()
def full_logits(model, ids):
    return model(torch.tensor([ids])).logits[0].float()  # [n_tokens, vocab]


@torch.no_grad()
def stepwise_logits(model, ids):
    """Logits of every position fed one token at a time through the cache: for recurrent layers,
    transformers' token-by-token rule (its prefill uses the chunked form)."""
    out = model(torch.tensor([ids[:1]]), use_cache=True)
    cache, rows = out.cache, [out.logits[0, -1]]
    for token in ids[1:]:
        out = model(torch.tensor([[token]]), cache=cache, use_cache=True)
        rows.append(out.logits[0, -1])
    return torch.stack(rows).float()


@torch.no_grad()
def greedy_margins(model, ids, continuation):
    """Top-1 minus top-2 logit at each greedy step: a small margin means a consumer computing in
    a different precision may legitimately pick another token there."""
    logits = full_logits(model, ids + continuation)[len(ids) - 1:-1]  # [32, vocab]
    top2 = logits.topk(2, dim=-1).values
    chosen = logits.argmax(-1).tolist()
    if chosen != continuation:
        raise RuntimeError(f"generate() disagrees with a full-sequence argmax: {chosen} vs {continuation}")
    return compact((top2[:, 0] - top2[:, 1]).numpy())


def make_reference(model, tokenizer, dtype, model_f32=None, lengths=PROMPT_LENGTHS, model_f64=None):
    """model_f32, for reduced-precision checkpoints: the same saved weights loaded as float32, so
    transformers computes in f32 as Chronos does. Its logits ("logits_f32") and greedy tokens
    ("greedy_f32") are the tight reference; the native-dtype ones show the cost of bf16
    activations, which Chronos does not reproduce on purpose. model_f64, for models with recurrent
    layers: the weights in float64, fed one token at a time ("logits_f64"), against which f32's own
    rounding shows (transformers' f32 chunked prefill and token-by-token rule both differ from it
    by up to ~8e-4 on these weights)."""
    vocab = model.config.vocab_size
    cases = []
    for ids in fixed_prompts(vocab, len(SPECIAL_TOKENS), lengths):
        continuation = greedy(model, ids)
        case = {"ids": ids, "logits": [compact(row) for row in full_logits(model, ids).numpy()],
                "greedy": continuation, "greedy_margins": greedy_margins(model, ids, continuation)}
        if model_f32 is not None:
            case["logits_f32"] = [compact(row) for row in full_logits(model_f32, ids).numpy()]
            case["greedy_f32"] = greedy(model_f32, ids)
        if model_f64 is not None:  # float64, one token at a time
            case["logits_f64"] = [compact(row) for row in stepwise_logits(model_f64, ids).numpy()]
        cases.append(case)
    text_ids = tokenizer(TEXT_PROMPT, add_special_tokens=True)["input_ids"]
    text_greedy = greedy(model, text_ids)
    chat_text = tokenizer.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=True)
    chat_ids = tokenizer(chat_text, add_special_tokens=False)["input_ids"]
    return {
        "cases": cases,
        "text_case": {"prompt": TEXT_PROMPT, "ids": text_ids, "greedy": text_greedy,
                      "greedy_text": tokenizer.decode(text_greedy),
                      "chat_messages": CHAT_MESSAGES, "chat_text": chat_text, "chat_ids": chat_ids},
        "dtype": str(dtype).replace("torch.", ""),
        "n_new_tokens": N_NEW_TOKENS,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def make_variant(out_dir, name, arch, dtype, options, tokenizer):
    folder = out_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    eos_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config, model_class = build_config(arch, len(tokenizer), eos_id, options.get("tie", False),
                                       options.get("plain", False))
    config._attn_implementation = "eager"
    torch.manual_seed(ARCH_SEEDS[arch])
    model = model_class(config).eval()
    reinitialize(model, ARCH_SEEDS[arch], unit_offset_norms=arch in ("qwen3_next", "qwen3_5_moe"))
    model = model.to(dtype)
    model.config.dtype = dtype
    model.generation_config.eos_token_id = eos_id
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = eos_id
    save_kwargs = {"max_shard_size": options["shard"]} if "shard" in options else {}
    model.save_pretrained(folder, **save_kwargs)
    if options.get("mxfp4"):
        to_mxfp4(folder)
    # transformers 5 writes the template to chat_template.jinja by default; most published MoE
    # checkpoints carry it inside tokenizer_config.json, which is the form kept here.
    tokenizer.save_pretrained(folder, save_jinja_files=False)
    # The reference comes from the checkpoint as transformers loads it, not from the model in
    # memory: model.to(bfloat16) also casts the rotary inv_freq buffer, from_pretrained does not.
    model_f32 = load(folder, torch.float32) if dtype != torch.float32 else None
    lengths = LONG_PROMPT_LENGTHS if options.get("long") else PROMPT_LENGTHS
    model_f64 = None
    if options.get("long"):  # eager experts: the grouped matmul takes no float64
        model_f64 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                                         experts_implementation="eager").eval()
    write_json(folder / "reference.json", make_reference(load(folder, dtype), tokenizer, dtype, model_f32, lengths,
                                                         model_f64))
    return folder


FP4_LEVELS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_quantize(weight):
    """[..., rows, cols] float -> (blocks [..., rows, cols/32, 16] U8, scales [..., rows, cols/32] U8)
    as gpt-oss checkpoints store them: a power-of-two scale per 32 weights (E8M0, bias 127) and each
    weight the nearest E2M1 level, element 2j in the low nibble of byte j."""
    w = weight.float().reshape(*weight.shape[:-1], weight.shape[-1] // 32, 32)
    amax = w.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -100)
    exponent = torch.ceil(torch.log2(amax / 6.0))
    scaled = w / torch.exp2(exponent)
    level = (scaled.abs().unsqueeze(-1) - FP4_LEVELS).abs().argmin(-1)
    code = (level | ((scaled < 0).long() << 3)).to(torch.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    scales = (exponent.squeeze(-1) + 127).to(torch.uint8)
    return blocks, scales


def to_mxfp4(folder):
    """Rewrites a saved gpt-oss folder as the released checkpoints are: the experts' projections as
    MXFP4 blocks and scales ([experts, out, in], transposed from the bf16 layout), the rest as saved,
    and config.json's quantization_config."""
    from safetensors.torch import load_file, save_file
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        blocks, scales = mxfp4_quantize(tensors.pop(name).transpose(1, 2).contiguous())
        tensors[name + "_blocks"] = blocks.contiguous()
        tensors[name + "_scales"] = scales.contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"]}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def load(folder, dtype):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


@torch.no_grad()
def verify(folder):
    """Reloads a saved folder with transformers and checks reference.json reproduces."""
    ref = json.loads((folder / "reference.json").read_text())
    dtype = getattr(torch, ref["dtype"])
    model = load(folder, dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    worst = 0.0
    for case in ref["cases"]:
        stored = torch.tensor(case["logits"])
        fresh = full_logits(model, case["ids"])
        worst = max(worst, (stored - fresh).abs().max().item())
        if greedy(model, case["ids"]) != case["greedy"]:
            raise RuntimeError(f"{folder.name}: greedy continuation does not reproduce")
    text = ref["text_case"]
    if tokenizer(text["prompt"])["input_ids"] != text["ids"]:
        raise RuntimeError(f"{folder.name}: tokenizer ids do not reproduce")
    if greedy(model, text["ids"]) != text["greedy"]:
        raise RuntimeError(f"{folder.name}: text-case greedy does not reproduce")
    # Stored values are the float32 logits written as shortest round-trip decimals, so a
    # deterministic reload reproduces them exactly; allow only decimal round-off.
    if worst > 1e-6:
        raise RuntimeError(f"{folder.name}: stored logits differ from a reload by {worst}")
    return worst


def summarize(folder):
    ref = json.loads((folder / "reference.json").read_text())
    size = sum(f.stat().st_size for f in folder.iterdir())
    distinct = [len(set(c["greedy"])) for c in ref["cases"]]
    spread = [float(np.std(c["logits"][-1])) for c in ref["cases"]]
    margins = min(min(c["greedy_margins"]) for c in ref["cases"])
    print(f"{folder.name:24s} {size / 1e6:5.2f} MB  distinct greedy tokens {distinct}  "
          f"last-position logit std {[round(s, 2) for s in spread]}  min greedy margin {margins:.4f}  "
          f"text: {ref['text_case']['greedy_text']!r}")


def make_io_fixture(path):
    """A small file written by the safetensors library itself, with known values, for the C++
    reader's tests: one tensor per common dtype, a 0-rank and an empty tensor, and metadata."""
    from safetensors.torch import save_file
    tensors = {
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1.0,
        "bf16": (torch.arange(6, dtype=torch.float32) * 0.25 - 0.5).to(torch.bfloat16).reshape(2, 3),
        "f16": (torch.arange(4, dtype=torch.float32) * 1.5).to(torch.float16),
        "i64": torch.tensor([-3, 0, 7, 1 << 40], dtype=torch.int64),
        "u8": torch.arange(5, dtype=torch.uint8) * 3,
        "scalar": torch.tensor(3.25, dtype=torch.float32),
        "empty": torch.zeros(0, 7, dtype=torch.float32),
    }
    # One metadata key: the library stores metadata in a hash map, so several keys would come out
    # in a different order on every run and churn the committed file.
    save_file(tensors, str(path), metadata={"format": "pt"})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--verify-only", action="store_true")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="make (or verify) only these folders")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread: bitwise-reproducible CPU reductions
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    variants = [v for v in VARIANTS if not args.only or v[0] in args.only]
    names = [v[0] for v in variants]
    if not args.verify_only:
        args.out.mkdir(parents=True, exist_ok=True)
        tokenizer = train_tokenizer()
        for name, arch, dtype, options in variants:
            make_variant(args.out, name, arch, dtype, options, tokenizer)
        if not args.only:
            make_io_fixture(args.out.parent / "io" / "hf_written.safetensors")
    for name in names:
        worst = verify(args.out / name)
        print(f"verified {name}: reload max |diff| = {worst:.2e}")
    for name in names:
        summarize(args.out / name)
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"total {total / 1e6:.2f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
