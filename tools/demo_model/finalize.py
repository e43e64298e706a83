#!/usr/bin/env python3
# Evaluates the saved chronos-demo model and writes its prompt sets, greedy reference ids and statistics.
"""Run after train.py, on the saved bf16 folder (reloaded from disk, exactly as shipped):
  - held-out and train perplexity per domain,
  - routing statistics (expert usage entropy per layer, consecutive-token expert reuse, how different the
    domains' expert distributions are, and how well a window's routing predicts its domain),
  - prompts/{train,test}.jsonl drawn from the training and held-out documents, with domain labels,
  - reference.json: greedy ids from model.generate for fixed prompts (one per domain),
  - eval.json with everything above, which make_card.py turns into the model card.
"""
import argparse
import json
import math
import os
import random

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, GenerationConfig, Qwen2MoeForCausalLM

DOMAINS = ["prose", "tech", "code", "fr", "de", "es"]
# Candidates per domain; reference() keeps the one whose greedy run (f32 compute) has the widest smallest
# top-1/top-2 logit margin, so that the reference does not hinge on a near-tie.
REFERENCE_PROMPTS = {
    "prose": ["Friendship is a word of many meanings; as, the friendship of",
              "A man who has nothing to do is",
              "The house stood on a hill above the river, and"],
    "tech": ["To list the files in a directory, use the command",
             "The configuration file is read at startup. Each line",
             "OPTIONS\n\n-v, --verbose\n"],
    "code": ["def read_config(path):\n    \"\"\"Read the configuration file and return a dict.\"\"\"\n",
             "#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n",
             "class Counter:\n    def __init__(self):\n"],
    "fr": ["Le système de gestion des paquets de Debian",
           "Cette commande affiche la liste des fichiers",
           "Pour configurer le réseau, il faut"],
    "de": ["Die Konfigurationsdatei des Systems wird",
           "Dieser Befehl zeigt die Liste der Dateien",
           "Um das Netzwerk zu konfigurieren, muss"],
    "es": ["El sistema de paquetes de Debian permite",
           "Este programa muestra la lista de archivos",
           "Para configurar la red, es necesario"],
}


def load_arrays(tok_dir, split):
    return {d: np.fromfile(os.path.join(tok_dir, f"{d}.{split}.u16"), dtype=np.uint16) for d in DOMAINS}


def windows(a, seq, n):
    n = min(n, len(a) // seq)
    starts = np.linspace(0, len(a) - seq, n).astype(np.int64)
    return torch.from_numpy(np.stack([a[s:s + seq].astype(np.int64) for s in starts]))


class RouteRecorder:
    """Forward hooks on every layer's router that keep its top-k expert ids ([n_tokens, k])."""

    def __init__(self, model):
        self.ids = []
        self.handles = []
        for layer in model.model.layers:
            self.handles.append(layer.mlp.gate.register_forward_hook(self._hook))

    def _hook(self, module, inputs, output):
        self.ids.append(output[2].detach())

    def take(self, batch, seq):
        # -> [n_layers, batch, seq, k]
        out = torch.stack([t.reshape(batch, seq, -1) for t in self.ids])
        self.ids = []
        return out


@torch.no_grad()
def evaluate(model, arrays, seq, n_windows, rec, batch=8):
    """Mean cross-entropy per domain and the routing of every evaluated token."""
    res, routes = {}, {}
    for d, a in arrays.items():
        x = windows(a, seq, n_windows)
        tot, cnt, rs = 0.0, 0, []
        for i in range(0, len(x), batch):
            xb = x[i:i + batch]
            logits = model(input_ids=xb).logits.float()
            tot += torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     xb[:, 1:].reshape(-1), reduction="sum").item()
            cnt += xb[:, 1:].numel()
            rs.append(rec.take(xb.shape[0], seq))
        res[d] = {"ce": tot / cnt, "ppl": math.exp(tot / cnt), "tokens": cnt}
        routes[d] = torch.cat(rs, dim=1)  # [L, n, seq, k]
    return res, routes


def routing_stats(routes, n_experts, window):
    n_layers = next(iter(routes.values())).shape[0]
    stats = {"per_layer": [], "random_reuse_baseline": None}
    k = next(iter(routes.values())).shape[-1]
    stats["random_reuse_baseline"] = k / n_experts
    usage = {}
    for d, r in routes.items():
        L, n, s, _ = r.shape
        h = torch.zeros(L, n_experts)
        for li in range(L):
            h[li] = torch.bincount(r[li].reshape(-1), minlength=n_experts).float()
        usage[d] = h / h.sum(dim=1, keepdim=True)
    for li in range(n_layers):
        allu = sum(usage[d][li] for d in routes) / len(routes)
        ent = -(allu * torch.log(allu.clamp_min(1e-12))).sum().item() / math.log(n_experts)
        dom_ent = {d: -(usage[d][li] * torch.log(usage[d][li].clamp_min(1e-12))).sum().item() / math.log(n_experts)
                   for d in routes}
        reuse = {}
        for d, r in routes.items():
            cur, prev = r[li][:, 1:, :], r[li][:, :-1, :]
            overlap = (cur.unsqueeze(-1) == prev.unsqueeze(-2)).any(-1).float().mean().item()
            reuse[d] = overlap
        # Jensen-Shannon divergence (bits) between every pair of domains' usage distributions.
        js = {}
        for i, a in enumerate(DOMAINS):
            for b in DOMAINS[i + 1:]:
                p, q = usage[a][li], usage[b][li]
                m = 0.5 * (p + q)
                kl = lambda x, y: (x * (torch.log2(x.clamp_min(1e-12)) - torch.log2(y.clamp_min(1e-12)))).sum()
                js[f"{a}-{b}"] = (0.5 * kl(p, m) + 0.5 * kl(q, m)).item()
        top8 = {d: set(torch.topk(usage[d][li], 8).indices.tolist()) for d in routes}
        jac = {f"{a}-{b}": len(top8[a] & top8[b]) / len(top8[a] | top8[b])
               for i, a in enumerate(DOMAINS) for b in DOMAINS[i + 1:]}
        stats["per_layer"].append({
            "layer": li, "usage_entropy_norm": ent, "usage_entropy_norm_per_domain": dom_ent,
            "max_expert_share": allu.max().item(), "min_expert_share": allu.min().item(),
            "consecutive_reuse": reuse, "consecutive_reuse_mean": sum(reuse.values()) / len(reuse),
            "js_divergence_bits": js, "js_mean": sum(js.values()) / len(js),
            "top8_jaccard": jac, "top8_jaccard_mean": sum(jac.values()) / len(jac)})
    stats["usage"] = {d: usage[d].tolist() for d in routes}
    return stats


def window_features(r, n_experts, window):
    """Per `window`-token chunk: the concatenated per-layer expert histograms ([n_chunks, L*E])."""
    L, n, s, k = r.shape
    feats = []
    for i in range(n):
        for c in range(0, s - window + 1, window):
            h = torch.stack([torch.bincount(r[li, i, c:c + window].reshape(-1), minlength=n_experts).float()
                             for li in range(L)])
            feats.append((h / h.sum(dim=1, keepdim=True)).reshape(-1))
    return torch.stack(feats)


def domain_from_routing(train_routes, test_routes, n_experts, window):
    """Nearest-centroid domain classifier on routing histograms: fit on train windows, score on test."""
    cents = {d: window_features(r, n_experts, window).mean(0) for d, r in train_routes.items()}
    C = torch.stack([cents[d] for d in DOMAINS])
    C = C / C.norm(dim=1, keepdim=True)
    correct, total, confusion = 0, 0, {}
    for d, r in test_routes.items():
        f = window_features(r, n_experts, window)
        f = f / f.norm(dim=1, keepdim=True)
        pred = (f @ C.T).argmax(1)
        correct += (pred == DOMAINS.index(d)).sum().item()
        total += len(pred)
        confusion[d] = {DOMAINS[j]: int((pred == j).sum()) for j in range(len(DOMAINS))}
    return {"window_tokens": window, "accuracy": correct / total, "windows": total, "confusion": confusion}


def make_prompts(corpus, split, per_domain, tok, seed):
    rng = random.Random(seed)
    docs = {}
    with open(corpus) as f:
        for line in f:
            d = json.loads(line)
            if d["split"] == split:
                docs.setdefault(d["domain"], []).append(d)
    out = []
    for dom in DOMAINS:
        made, tries = 0, 0
        while made < per_domain and tries < per_domain * 50:
            tries += 1
            doc = rng.choice(docs[dom])
            text = doc["text"]
            starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]
            s = rng.choice(starts)
            length = rng.randint(80, 400)
            p = text[s:s + length]
            cut = max(p.rfind(" "), p.rfind("\n"))
            if cut > 60:
                p = p[:cut]
            p = p.strip()
            min_alnum = 0.3 if dom == "code" else 0.5
            if len(p) < 60 or sum(ch.isalnum() for ch in p) < min_alnum * len(p):
                continue
            out.append({"id": f"{split}-{dom}-{made:03d}", "domain": dom, "source": doc["source"], "prompt": p,
                        "n_tokens": len(tok(p)["input_ids"])})
            made += 1
    return out


@torch.no_grad()
def greedy(model, tok, ids, n_new):
    """64 greedy ids from model.generate (EOS suppressed by min_new_tokens) and the top-1/top-2 logit gap at
    each step: a near-tie is where another implementation's rounding may legitimately pick another token."""
    gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=n_new, min_new_tokens=n_new, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
    new = gen.sequences[0, ids.shape[1]:].tolist()
    margins = []
    for sc in gen.scores:
        top2 = torch.topk(sc[0].float(), 2).values
        margins.append(round((top2[0] - top2[1]).item(), 4))
    plain = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=n_new, pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
    return new, margins, len(plain) < n_new


def reference(model, model_f32, tok, n_new):
    refs = []
    for dom, candidates in REFERENCE_PROMPTS.items():
        best = None
        for text in candidates:
            ids = tok(text, return_tensors="pt")["input_ids"]
            new32, margins32, stops32 = greedy(model_f32, tok, ids, n_new)
            if best is None or min(margins32) > min(best[2]):
                best = (text, ids, margins32, new32, stops32)
        text, ids, margins32, new32, stops32 = best
        new, margins, stops = greedy(model, tok, ids, n_new)
        refs.append({"domain": dom, "prompt": text, "input_ids": ids[0].tolist(),
                     "output_ids": new, "output_margins": margins, "eos_would_stop_early": stops,
                     "output_ids_f32": new32, "output_margins_f32": margins32,
                     "eos_would_stop_early_f32": stops32,
                     "bf16_f32_agree_tokens": next((i for i, (a, b) in enumerate(zip(new, new32)) if a != b), n_new),
                     "output_text": tok.decode(new), "output_text_f32": tok.decode(new32)})
    return refs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--windows", type=int, default=48, help="256-token windows per domain and split")
    ap.add_argument("--prompts-per-domain", type=int, default=80)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    # Generation stops at <|endoftext|>; the model has no BOS.
    gc = GenerationConfig.from_pretrained(args.model_dir)
    gc.eos_token_id, gc.pad_token_id, gc.bos_token_id = tok.eos_token_id, tok.pad_token_id, None
    gc.save_pretrained(args.model_dir)
    model = Qwen2MoeForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16)
    model.eval()
    cfg = model.config
    seq = 256
    result = {"dtype": "bfloat16"}

    # The experts implementation used in training must compute what the stock one computes.
    x = windows(load_arrays(args.tok, "test")["code"], 64, 2)
    f32 = Qwen2MoeForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    with torch.no_grad():
        ref = f32(input_ids=x).logits
        f32.set_experts_implementation("grouped_mm")
        alt = f32(input_ids=x).logits
    result["grouped_vs_eager_max_abs_logit_diff_f32"] = (ref - alt).abs().max().item()
    del f32

    rec = RouteRecorder(model)
    test_ppl, test_routes = evaluate(model, load_arrays(args.tok, "test"), seq, args.windows, rec)
    train_ppl, train_routes = evaluate(model, load_arrays(args.tok, "train"), seq, args.windows, rec)
    result["test"] = test_ppl
    result["train_sample"] = train_ppl
    result["routing"] = routing_stats(test_routes, cfg.num_experts, 64)
    result["domain_from_routing"] = {str(w): domain_from_routing(train_routes, test_routes, cfg.num_experts, w)
                                     for w in (16, 64, 256)}
    for h in rec.handles:
        h.remove()

    os.makedirs(os.path.join(args.model_dir, "prompts"), exist_ok=True)
    for split, seed in (("train", 1), ("test", 2)):
        ps = make_prompts(args.corpus, split, args.prompts_per_domain, tok, seed)
        with open(os.path.join(args.model_dir, "prompts", f"{split}.jsonl"), "w") as f:
            for p in ps:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
        result[f"prompts_{split}"] = len(ps)
    result["prompts_per_domain"] = args.prompts_per_domain

    refs = reference(model, Qwen2MoeForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval(), tok, 64)
    with open(os.path.join(args.model_dir, "reference.json"), "w") as f:
        json.dump({"description": "Greedy decoding with transformers (model.generate, do_sample=False, "
                                  "max_new_tokens=min_new_tokens=64) of the saved bf16 weights. output_ids: "
                                  "computed in bf16 on CPU (the folder loaded as saved); output_ids_f32: the "
                                  "same weights loaded as float32, so computed in f32 as Chronos does. "
                                  "input_ids are the tokenizer's ids with its default add_special_tokens (no "
                                  "BOS is added). *_margins: top-1 minus top-2 logit at each step. Each prompt "
                                  "was chosen among a few fixed candidates as the one with the widest smallest "
                                  "f32 margin.",
                   "dtype": "bfloat16", "max_new_tokens": 64, "transformers_version": transformers.__version__,
                   "torch_version": torch.__version__, "prompts": refs}, f, indent=1, ensure_ascii=False)
    result["reference"] = [{"domain": r["domain"], "min_margin": min(r["output_margins"]),
                            "min_margin_f32": min(r["output_margins_f32"]), "eos_stop": r["eos_would_stop_early"],
                            "bf16_f32_agree_tokens": r["bf16_f32_agree_tokens"], "text": r["output_text_f32"]}
                           for r in refs]
    out = os.path.join(os.path.dirname(os.path.abspath(args.tok)), "eval.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(json.dumps({k: v for k, v in result.items() if k != "routing"}, indent=1, ensure_ascii=False))
    print("wrote", out)


if __name__ == "__main__":
    main()
