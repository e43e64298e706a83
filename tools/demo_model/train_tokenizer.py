#!/usr/bin/env python3
# Trains the chronos-demo byte-level BPE tokenizer and tokenizes the corpus into per-domain id arrays.
"""Train a byte-level BPE (Qwen2-style pre-tokenizer) on the corpus's train split, save tokenizer.json and
tokenizer_config.json (ChatML template) into --model-dir, then write <out>/<domain>.<split>.u16 arrays of
token ids where every document ends with <|endoftext|>."""
import argparse
import json
import os

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split: contractions, letters with one leading non-letter, single digits, punctuation
# runs, newlines, and whitespace.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
                 " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def read_docs(corpus, split=None):
    with open(corpus) as f:
        for line in f:
            d = json.loads(line)
            if split is None or d["split"] == split:
                yield d


def build(vocab_size, corpus):
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((d["text"] for d in read_docs(corpus, "train")), trainer=trainer)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True, help="corpus.jsonl from build_corpus.py")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", required=True, help="folder for the tokenized arrays")
    ap.add_argument("--vocab-size", type=int, default=8192)
    args = ap.parse_args()
    os.makedirs(args.model_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tok = build(args.vocab_size, args.corpus)
    path = os.path.join(args.model_dir, "tokenizer.json")
    tok.save(path)
    # tokenizers serialises the ByteLevel decoder with its default flags whatever it was built with; write
    # the flags Qwen2's tokenizer.json has (decoding ignores them, other implementations may not).
    with open(path) as f:
        spec = json.load(f)
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    with open(path, "w") as f:
        json.dump(spec, f, ensure_ascii=False, indent=2)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(tok.token_to_id(s)): {"content": s, "special": True, "lstrip": False,
                                                          "rstrip": False, "normalized": False,
                                                          "single_word": False} for s in SPECIALS},
    }
    with open(os.path.join(args.model_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    eot = tok.token_to_id("<|endoftext|>")
    arrays, stats = {}, {}
    docs = list(read_docs(args.corpus))
    encs = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    for d, e in zip(docs, encs):
        key = (d["domain"], d["split"])
        arrays.setdefault(key, []).extend(e.ids + [eot])
        st = stats.setdefault(f"{d['domain']}.{d['split']}", {"bytes": 0, "tokens": 0})
        st["bytes"] += len(d["text"].encode())
        st["tokens"] += len(e.ids) + 1
    for (domain, split), ids in arrays.items():
        np.asarray(ids, dtype=np.uint16).tofile(os.path.join(args.out, f"{domain}.{split}.u16"))
    for st in stats.values():
        st["bytes_per_token"] = round(st["bytes"] / st["tokens"], 3)
    with open(os.path.join(args.out, "token_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
