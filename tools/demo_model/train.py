#!/usr/bin/env python3
# Trains the chronos-demo Qwen2-MoE model on the tokenized corpus with a wall-clock cosine schedule.
"""Train a small Qwen2MoeForCausalLM from scratch on CPU.

The learning-rate schedule is a function of elapsed wall-clock time (warmup, then cosine to 10% over
--budget-min minutes), so the run ends on time whatever the machine's load; the number of steps done is
logged. Each batch row picks a domain uniformly, then a random window of that domain's train tokens.
Checkpoints (model + optimizer + step + elapsed) go to --ckpt every --ckpt-min minutes; --resume continues.
The result is written with save_pretrained in bf16 to --save.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

DOMAINS = ["prose", "tech", "code", "fr", "de", "es"]


def make_config(args):
    return Qwen2MoeConfig(
        vocab_size=args.vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, intermediate_size=4 * args.hidden,
        moe_intermediate_size=args.expert_ffn, shared_expert_intermediate_size=args.shared_ffn,
        num_experts=args.experts, num_experts_per_tok=args.top_k, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False,
        router_aux_loss_coef=args.aux_coef, tie_word_embeddings=True, max_position_embeddings=2048,
        rope_theta=10000.0, rms_norm_eps=1e-6, use_sliding_window=False, qkv_bias=True,
        bos_token_id=None, eos_token_id=0, pad_token_id=0)


def load_arrays(tok_dir, split):
    return {d: np.fromfile(os.path.join(tok_dir, f"{d}.{split}.u16"), dtype=np.uint16) for d in DOMAINS}


def sample_batch(arrays, rng, batch, seq):
    rows = []
    for _ in range(batch):
        a = arrays[DOMAINS[rng.integers(len(DOMAINS))]]
        s = rng.integers(0, len(a) - seq - 1)
        rows.append(a[s:s + seq + 1].astype(np.int64))
    return torch.from_numpy(np.stack(rows))


@torch.no_grad()
def eval_loss(model, arrays, seq, n_windows):
    model.eval()
    out = {}
    for d, a in arrays.items():
        # Fixed, evenly spaced windows so that evaluations are comparable across the run.
        starts = np.linspace(0, len(a) - seq - 2, n_windows).astype(np.int64)
        x = torch.from_numpy(np.stack([a[s:s + seq + 1].astype(np.int64) for s in starts]))
        logits = model(input_ids=x[:, :-1]).logits
        out[d] = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                   x[:, 1:].reshape(-1)).item()
    model.train()
    return out


def lr_at(progress, args):
    if progress < args.warmup:
        return args.lr * progress / args.warmup
    p = min(1.0, (progress - args.warmup) / (1 - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True, help="folder of <domain>.<split>.u16 arrays")
    ap.add_argument("--save", required=True, help="output model folder (save_pretrained, bf16)")
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--budget-min", type=float, default=70.0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (for measuring speed)")
    ap.add_argument("--ckpt-min", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--experts-impl", default="grouped_mm")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast for the matmuls (weights stay f32)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=float, default=0.04, help="fraction of the time budget")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--expert-ffn", type=int, default=128)
    ap.add_argument("--shared-ffn", type=int, default=512)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, test = load_arrays(args.tok, "train"), load_arrays(args.tok, "test")
    config = make_config(args)
    model = Qwen2MoeForCausalLM._from_config(config, attn_implementation="sdpa",
                                             experts_implementation=args.experts_impl)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "gate.weight" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "gate.weight" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed_before, tokens = 0, 0.0, 0
    if args.resume and os.path.exists(args.ckpt):
        ck = torch.load(args.ckpt, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed_before, tokens = ck["step"], ck["elapsed"], ck["tokens"]
        rng = np.random.default_rng(args.seed + step)
    tokens_at_start = tokens
    n_params = sum(p.numel() for p in model.parameters())
    log = open(args.log, "a")

    def emit(rec):
        log.write(json.dumps(rec) + "\n")
        log.flush()

    emit({"event": "start", "params": n_params, "args": vars(args), "step": step,
          "torch_threads": torch.get_num_threads(), "blas": torch.backends.mkl.is_available()})
    budget = args.budget_min * 60.0
    t0 = time.time() - elapsed_before
    last_ckpt = time.time()
    ema = None
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget or (args.max_steps and step >= args.max_steps):
            break
        lr = lr_at(elapsed / budget, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x = sample_batch(train, rng, args.batch, args.seq)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            out = model(input_ids=x[:, :-1], labels=x[:, :-1].clone(), output_router_logits=True)
        # labels are shifted inside the model; passing the inputs predicts x[t+1] from x[<=t].
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += args.batch * args.seq
        aux = out.aux_loss.item()
        ce = out.loss.item() - args.aux_coef * aux
        ema = ce if ema is None else 0.98 * ema + 0.02 * ce
        if step % 10 == 0 or step <= 5:
            el = time.time() - t0
            emit({"step": step, "tokens": tokens, "elapsed_s": round(el, 1), "lr": lr, "ce": round(ce, 4),
                  "ce_ema": round(ema, 4), "aux": round(aux, 4), "gnorm": round(gnorm, 3),
                  "tok_per_s": round((tokens - tokens_at_start) / max(1e-6, el - elapsed_before), 1)})
        if time.time() - last_ckpt > args.ckpt_min * 60:
            ev = eval_loss(model, test, args.seq, 8)
            emit({"event": "eval", "step": step, "tokens": tokens, "test_ce": ev})
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "elapsed": time.time() - t0, "tokens": tokens}, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)
            last_ckpt = time.time()
    el = time.time() - t0
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": el,
                "tokens": tokens}, args.ckpt + ".tmp")
    os.replace(args.ckpt + ".tmp", args.ckpt)
    ev = eval_loss(model, test, args.seq, 8)
    emit({"event": "end", "step": step, "tokens": tokens, "elapsed_s": round(el, 1), "test_ce": ev,
          "ce_ema": ema})
    model.config.output_router_logits = False
    model.to(torch.bfloat16).save_pretrained(args.save)
    emit({"event": "saved", "path": args.save})


if __name__ == "__main__":
    main()
