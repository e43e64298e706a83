#!/usr/bin/env python3
# Writes the chronos-demo model card (README.md) from the corpus summary, training log and eval.json.
import argparse
import json
import os

DOMAIN_SOURCES = {
    "prose": "GCIDE dictionary entries (dict-gcide), fortune cookies (fortunes, fortunes-min)",
    "tech": "Debian Reference in English (debian-reference-en), English manual pages (sections 1,2,5,6,7,8)",
    "code": "Python 3.11 standard library (.py), C/C++ headers under /usr/include (.h)",
    "fr": "Debian Reference in French, French manual pages (manpages-fr, sections 1,5,8)",
    "de": "Debian Reference in German, German manual pages (manpages-de, sections 1,5,8)",
    "es": "Debian Reference in Spanish, Spanish manual pages (manpages-es, sections 1,5,8)",
}
DOMAINS = list(DOMAIN_SOURCES)


def folder_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--eval", required=True)
    args = ap.parse_args()
    md = args.model_dir
    cfg = json.load(open(os.path.join(md, "config.json")))
    corpus = json.load(open(os.path.join(md, "corpus", "summary.json")))
    toks = json.load(open(os.path.join(md, "corpus", "token_stats.json")))
    ev = json.load(open(args.eval))
    recs = [json.loads(l) for l in open(args.log)]
    start = [r for r in recs if r.get("event") == "start"][0]
    steps = [r for r in recs if "ce" in r]
    evals = [r for r in recs if r.get("event") in ("eval", "end")]
    end = [r for r in recs if r.get("event") == "end"][-1]
    a = start["args"]
    n_params = start["params"]
    E, k, L, H = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["num_hidden_layers"], cfg["hidden_size"]
    expert_params = 3 * H * cfg["moe_intermediate_size"]
    active = n_params - L * (E - k) * expert_params
    w = []
    p = w.append
    p("# chronos-demo\n")
    p("A small Mixture-of-Experts language model in the Qwen2-MoE architecture (`Qwen2MoeForCausalLM`), "
      "trained from scratch on CPU on text that Debian packages ship. It is Chronos's default model: it needs "
      "no download, and unlike random weights its router has learned real, domain-dependent routing, so expert "
      "prediction, clustering and caching can be measured on it. It is a toy: its text is locally plausible "
      "but not meaningful, and greedy decoding soon repeats itself, and it knows nothing beyond its small corpus.\n")
    p("## Architecture\n")
    p("| | |\n|---|---|")
    for key, label in [("num_hidden_layers", "layers"), ("hidden_size", "hidden size"),
                       ("num_attention_heads", "attention heads"), ("num_key_value_heads", "KV heads (GQA)"),
                       ("num_experts", "routed experts per layer"), ("num_experts_per_tok", "experts per token (top-k)"),
                       ("moe_intermediate_size", "routed expert FFN size"),
                       ("shared_expert_intermediate_size", "shared expert FFN size (sigmoid-gated)"),
                       ("norm_topk_prob", "norm_topk_prob"), ("vocab_size", "vocabulary"),
                       ("tie_word_embeddings", "tied embeddings"),
                       ("max_position_embeddings", "max positions"), ("router_aux_loss_coef", "router aux loss coef")]:
        p(f"| {label} | {cfg.get(key)} |")
    p(f"| RoPE theta | {(cfg.get('rope_parameters') or {}).get('rope_theta', cfg.get('rope_theta'))} |")
    p(f"| parameters | {n_params/1e6:.2f} M total, {active/1e6:.2f} M active per token |")
    p(f"| stored as | bf16 safetensors, {folder_bytes(md)/1e6:.1f} MB for the whole folder |\n")
    p("Every layer is sparse (`decoder_sparse_step=1`, no `mlp_only_layers`). The tokenizer is a byte-level "
      "BPE (8192 entries, Qwen2's pre-tokenizer split regex followed by ByteLevel, no normalizer) trained on "
      "the corpus's train split; special tokens `<|endoftext|>` (id 0, EOS and padding), `<|im_start|>` (1), "
      "`<|im_end|>` (2); no BOS is added. `tokenizer_config.json` carries a ChatML chat template, but the "
      "model was trained on plain text only, never on chats.\n")
    p("## Training data\n")
    p("Six deliberately different domains, all from Debian packages installed with "
      "`tools/demo_model/install_deps.sh`. Each document (a manual page, a source file, a chunk of about 4 KB "
      "of dictionary entries, fortunes or Debian Reference sections) goes to train or test by a hash of its "
      "name; about 5% of documents per domain are held out. Every file used, with its package, version and "
      "split, is listed in `corpus/files.tsv.gz`; `corpus/summary.json` lists the "
      f"{len(corpus['_packages'])} packages and versions.\n")
    p("| domain | sources | train bytes | train tokens | test bytes | test tokens | bytes/token |")
    p("|---|---|---:|---:|---:|---:|---:|")
    for d in DOMAINS:
        c, tr, te = corpus[d], toks[f"{d}.train"], toks[f"{d}.test"]
        p(f"| {d} | {DOMAIN_SOURCES[d]} | {c['train_bytes']:,} | {tr['tokens']:,} | {c['test_bytes']:,} | "
          f"{te['tokens']:,} | {tr['bytes_per_token']} |")
    tt = sum(toks[f"{d}.train"]["tokens"] for d in DOMAINS)
    p(f"\nTrain split: {sum(corpus[d]['train_bytes'] for d in DOMAINS)/1e6:.1f} MB, {tt/1e6:.2f} M tokens.\n")
    p("## Training\n")
    el = end["elapsed_s"]
    p(f"- {end['step']} steps of {a['batch']} sequences x {a['seq']} tokens = **{end['tokens']/1e6:.2f} M tokens** "
      f"({end['tokens']/tt:.2f} passes over the train split's size) in {el/60:.0f} minutes on one CPU thread "
      f"(`torch.set_num_threads(1)`, MKL, AMD EPYC with AVX-512), **{end['tokens']/el:.0f} tokens/s** on a "
      "machine shared with compile jobs.")
    p("- Each sequence picks a domain uniformly, then a random window of its train tokens (documents joined "
      "by `<|endoftext|>`), so the smaller domains (es, fr) are seen more than once.")
    p(f"- AdamW (betas 0.9/0.95, weight decay 0.1 on matrices except the router), peak lr {a['lr']}, warmup "
      f"{a['warmup']*100:.0f}% then cosine to 10%, scheduled on wall-clock time; gradient clipping 1.0; "
      f"bf16 autocast for the matmuls with f32 master weights; router aux (load-balancing) loss coefficient "
      f"{a['aux_coef']}.")
    p("- The experts ran through transformers' `grouped_mm` experts implementation during training; on the "
      "saved weights its logits differ from the stock (eager) one by at most "
      f"{ev['grouped_vs_eager_max_abs_logit_diff_f32']:.2e} in f32.\n")
    p("Loss curve (train cross-entropy in nats, exponential moving average over steps):\n")
    p("| step | tokens (M) | minutes | lr | train CE (EMA) | aux loss |")
    p("|---:|---:|---:|---:|---:|---:|")
    marks = sorted({int(i * (len(steps) - 1) / 12) for i in range(13)})
    for i in marks:
        r = steps[i]
        p(f"| {r['step']} | {r['tokens']/1e6:.2f} | {r['elapsed_s']/60:.1f} | {r['lr']:.2e} | {r['ce_ema']:.3f} | "
          f"{r['aux']:.3f} |")
    p("\nHeld-out cross-entropy during training (8 fixed 256-token windows per domain):\n")
    p("| step | " + " | ".join(DOMAINS) + " |")
    p("|---:|" + "---:|" * len(DOMAINS))
    for r in evals:
        p(f"| {r['step']} | " + " | ".join(f"{r['test_ce'][d]:.3f}" for d in DOMAINS) + " |")
    p("\n## Evaluation (the saved bf16 weights, computed in bf16)\n")
    p("Perplexity per domain over evenly spaced 256-token windows of the held-out split, and of the train "
      "split for comparison:\n")
    p("| domain | held-out tokens | held-out CE | held-out perplexity | train-sample perplexity |")
    p("|---|---:|---:|---:|---:|")
    for d in DOMAINS:
        t, s = ev["test"][d], ev["train_sample"][d]
        p(f"| {d} | {t['tokens']:,} | {t['ce']:.3f} | {t['ppl']:.1f} | {s['ppl']:.1f} |")
    p("\n## Routing statistics (held-out windows)\n")
    rs = ev["routing"]
    p(f"- usage entropy: entropy of the share of routed (token, expert) assignments per expert, divided by "
      f"log({E}); 1.0 is perfectly even use.")
    p(f"- consecutive reuse: the fraction of a token's {k} experts that the previous token also used "
      f"(independent uniform routing would give {rs['random_reuse_baseline']:.3f}).")
    p("- domain difference: Jensen-Shannon divergence (bits, 0 = same, 1 = disjoint) between two domains' "
      "expert-usage distributions, averaged over the 15 pairs; and the Jaccard overlap of the domains' "
      "8 most used experts, averaged over pairs.\n")
    p("| layer | usage entropy | max / min expert share | consecutive reuse | domain JS divergence | top-8 Jaccard |")
    p("|---:|---:|---:|---:|---:|---:|")
    for r in rs["per_layer"]:
        p(f"| {r['layer']} | {r['usage_entropy_norm']:.3f} | {r['max_expert_share']:.3f} / "
          f"{r['min_expert_share']:.4f} | {r['consecutive_reuse_mean']:.3f} | {r['js_mean']:.3f} | "
          f"{r['top8_jaccard_mean']:.3f} |")
    p("\nConsecutive reuse per domain and layer:\n")
    p("| layer | " + " | ".join(DOMAINS) + " |")
    p("|---:|" + "---:|" * len(DOMAINS))
    for r in rs["per_layer"]:
        p(f"| {r['layer']} | " + " | ".join(f"{r['consecutive_reuse'][d]:.3f}" for d in DOMAINS) + " |")
    last = rs["per_layer"][-1]
    mid = rs["per_layer"][len(rs["per_layer"]) // 2]
    p(f"\nDomain JS divergence by pair (layer {mid['layer']}):\n")
    p("| | " + " | ".join(DOMAINS) + " |")
    p("|---|" + "---:|" * len(DOMAINS))
    for x in DOMAINS:
        cells = []
        for y in DOMAINS:
            key = f"{x}-{y}" if f"{x}-{y}" in mid["js_divergence_bits"] else f"{y}-{x}"
            cells.append("" if x == y else f"{mid['js_divergence_bits'][key]:.3f}")
        p(f"| {x} | " + " | ".join(cells) + " |")
    p("\nDoes a window's routing predict its domain? A nearest-centroid classifier on the per-layer expert "
      "histograms of a window (centroids from train windows, scored on held-out windows):\n")
    p("| window (tokens) | held-out windows | accuracy (chance 1/6) |")
    p("|---:|---:|---:|")
    for wsize, r in ev["domain_from_routing"].items():
        p(f"| {wsize} | {r['windows']} | {r['accuracy']:.3f} |")
    p("\n## Files\n")
    p("- `config.json`, `generation_config.json` (EOS `<|endoftext|>`), `model.safetensors` (bf16)")
    p("- `tokenizer.json`, `tokenizer_config.json` (ChatML `chat_template`)")
    p(f"- `prompts/train.jsonl` ({ev['prompts_train']} prompts) and `prompts/test.jsonl` ({ev['prompts_test']}): "
      "one JSON object a line, `{id, domain, source, prompt, n_tokens}`; train prompts are cut from training "
      f"documents, test prompts from held-out documents, {ev.get('prompts_per_domain', 80)} per domain, "
      "60-400 characters starting at a line start. For benchmarks and for training expert predictors.")
    p("- `reference.json`: one fixed prompt per domain with its token ids and the 64 greedy ids that "
      "transformers generates from this folder, computed in bf16 (`output_ids`) and with the same weights "
      "loaded as f32 (`output_ids_f32`, what Chronos computes), with the top-1/top-2 logit margin at each step.")
    p("- `corpus/`: the exact corpus manifest (`files.tsv.gz`), per-domain sizes and token counts, and the "
      "training log (`train_log.jsonl`, one JSON record per 10 steps plus the evaluations).\n")
    p("Greedy decoding tends to fall into repetition loops, as small models do. The bf16-compute ids drift from "
      "the f32-compute ones after a near-tie in some prompts (bf16 logits tie often); an implementation that "
      "computes in f32 should match `output_ids_f32`. `eos_would_stop_early` says whether plain greedy decoding "
      "would have emitted `<|endoftext|>` within the 64 tokens (min_new_tokens suppresses it).\n")
    p("Reference generations (f32 compute, greedy, 64 tokens):\n")
    for r in ev["reference"]:
        p(f"- **{r['domain']}** (bf16 and f32 agree on the first {r['bf16_f32_agree_tokens']} tokens; smallest "
          f"margin {r['min_margin_f32']:.3f}): `{json.dumps(r['text'], ensure_ascii=False)[1:-1][:300]}`")
    p("\n## Reproduce\n")
    p("See `tools/demo_model/README.md`: `install_deps.sh`, `build_corpus.py`, `train_tokenizer.py`, "
      "`train.py`, `finalize.py`, `make_card.py`. The corpus and the tokenizer are deterministic given the "
      "package versions; training is seeded, but its length is set in wall-clock minutes, so a rerun on "
      "another machine does a different number of steps.\n")
    p("## License and limitations\n")
    p("The weights are a statistical summary of texts that Debian distributes under free licences (GCIDE and "
      "the Debian Reference under the GPL, the manual pages, fortunes, the Python standard library and "
      "the headers under their own licences; see each package's `/usr/share/doc/<package>/copyright`). "
      "The model can reproduce fragments of those texts. It is for testing and measuring an inference engine, "
      "not for any use where the content of its output matters.")
    with open(os.path.join(md, "README.md"), "w") as f:
        f.write("\n".join(w) + "\n")
    print("wrote", os.path.join(md, "README.md"))


if __name__ == "__main__":
    main()
