"""Writes the tokenizer.* key-values of a Hugging Face tokenizer folder into a gguf.GGUFWriter.

The values follow llama.cpp's converter (convert_hf_to_gguf.py):

* a byte-level BPE tokenizer.json becomes tokenizer.ggml.model "gpt2": the tokens in id order (the
  model vocabulary byte-level encoded, added tokens as their text, "[PAD<i>]" UNUSED rows in gaps),
  token types (added tokens CONTROL when special or when they look special, "<|...|>", else
  USER_DEFINED), the merges as "a b" strings and tokenizer.ggml.pre named from the pre-tokenizer;
* a BPE tokenizer.json with byte_fallback (transformers' SentencePiece conversion) becomes "llama":
  the pieces with scores and types (UNKNOWN, CONTROL, BYTE, USER_DEFINED, NORMAL) and
  tokenizer.ggml.add_space_prefix. llama.cpp's converter reads the scores from tokenizer.model;
  from tokenizer.json alone they are derived from the merges (a merged token scores minus the rank of
  its first merge, other tokens 0), which orders llama.cpp's score-driven merging and transformers'
  score-to-merges derivation exactly as the merges were; add_vocab checks that it does.

Special token ids come from tokenizer_config.json (bos/eos/unk/pad_token), with add_bos_token,
add_eos_token and the chat template (chat_template.jinja when present, as transformers prefers).

One addition to llama.cpp's converter: a gpt2 tokenizer whose ByteLevel pre-tokenizer has
add_prefix_space gets tokenizer.ggml.add_space_prefix = true (Chronos honours it; llama.cpp ignores
it for gpt2 vocabularies).

    import gguf, gguf_vocab
    writer = gguf.GGUFWriter(path, "qwen2moe")
    gguf_vocab.add_vocab(writer, "path/to/hf_model")
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k's (GPT-4o, gpt-oss): llama.cpp's "gpt-4o".
O200K_REGEX = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _token_text(value):
    """bos_token etc. in tokenizer_config.json: a string, an AddedToken dict or null."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _looks_special(text: str) -> bool:
    # convert_hf_to_gguf.py's does_token_look_special
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _components(node, key):
    """A pipeline node and, for a Sequence, its members."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [item for child in node.get(key, []) for item in _components(child, key)]
    return [node]


def _pre_name(tokenizer: dict) -> str:
    """tokenizer.ggml.pre for a byte-level tokenizer.json (llama.cpp hashes a tokenization instead)."""
    pres = _components(tokenizer.get("pre_tokenizer"), "pretokenizers")
    regexes = [p["pattern"].get("Regex") for p in pres if p.get("type") == "Split"]
    byte_level = [p for p in pres if p.get("type") == "ByteLevel"]
    nfc = (tokenizer.get("normalizer") or {}).get("type") == "NFC"
    if regexes == [QWEN2_REGEX]:
        return "qwen2"
    if regexes == [LLAMA3_REGEX]:
        return "llama-bpe"
    if regexes == [O200K_REGEX]:
        return "gpt-4o"
    if not regexes and len(byte_level) == 1 and byte_level[0].get("use_regex", True):
        return "olmo" if nfc else "gpt-2"
    raise ValueError(f"no tokenizer.ggml.pre for the pre-tokenizer {json.dumps(tokenizer.get('pre_tokenizer'))}; "
                     "pass pre=")


def _special_ids(writer, config: dict, token_ids: dict):
    adders = {"bos_token": writer.add_bos_token_id, "eos_token": writer.add_eos_token_id,
              "unk_token": writer.add_unk_token_id, "pad_token": writer.add_pad_token_id}
    for key, add in adders.items():
        text = _token_text(config.get(key))
        if text is not None and text in token_ids:
            add(token_ids[text])
    for key, add in (("add_bos_token", writer.add_add_bos_token), ("add_eos_token", writer.add_add_eos_token)):
        if isinstance(config.get(key), bool):
            add(config[key])


def _chat_template(folder: Path, config: dict):
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return template


def _merge_pairs(model: dict):
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def _byte_level(writer, tokenizer: dict, pre: str | None):
    model = tokenizer["model"]
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    by_id = {i: t for t, i in model["vocab"].items()}
    n = max(list(by_id) + list(added)) + 1
    tokens, types = [], []
    for i in range(n):
        if i in added:
            text = added[i]["content"]
            special = added[i].get("special", False) or _looks_special(text)
            tokens.append(text)
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre or _pre_name(tokenizer))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in _merge_pairs(model)])
    if any(p.get("type") == "ByteLevel" and p.get("add_prefix_space", False)
           for p in _components(tokenizer.get("pre_tokenizer"), "pretokenizers")):
        writer.add_add_space_prefix(True)
    return {t: i for i, t in enumerate(tokens)}


def derived_merges(tokens, scores):
    """transformers' merges of a SentencePiece vocabulary with scores (the C++ side does the same)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for token, score in zip(tokens, scores):
        for k in range(1, len(token)):
            if token[:k] in vocab and token[k:] in vocab:
                merges.append((token[:k], token[k:], score))
    merges.sort(key=lambda m: m[2], reverse=True)  # stable: equal scores keep vocabulary order
    return [(a, b) for a, b, _ in merges]


def _sentencepiece(writer, tokenizer: dict):
    model = tokenizer["model"]
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    by_id = {i: t for t, i in model["vocab"].items()}
    n = max(list(by_id) + list(added)) + 1
    if len(by_id) != max(by_id) + 1:
        raise ValueError("the SentencePiece vocabulary has gaps")
    merges = _merge_pairs(model)
    first_rank = {}
    for rank, (a, b) in enumerate(merges):
        first_rank.setdefault(a + b, rank)
    tokens, scores, types = [], [], []
    for i in range(n):
        text = by_id[i] if i in by_id else added[i]["content"]
        tokens.append(text)
        scores.append(-float(first_rank[text]) if text in first_rank else 0.0)
        if text == model.get("unk_token"):
            types.append(gguf.TokenType.UNKNOWN)
        elif i in added:
            types.append(gguf.TokenType.CONTROL if added[i].get("special", False) else gguf.TokenType.USER_DEFINED)
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    if derived_merges(tokens, scores) != merges:
        raise ValueError("the merges are not the ones transformers derives from a SentencePiece vocabulary")
    normalizers = _components(tokenizer.get("normalizer"), "normalizers")
    pres = _components(tokenizer.get("pre_tokenizer"), "pretokenizers")
    space_prefix = (any(n.get("type") == "Prepend" for n in normalizers)
                    or any(p.get("type") == "Metaspace" and p.get("prepend_scheme", "always") != "never"
                           for p in pres))
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_add_space_prefix(space_prefix)
    return {t: i for i, t in enumerate(tokens)}


def add_vocab(writer, hf_tokenizer_dir, pre: str | None = None) -> None:
    """Adds the tokenizer.* key-values of the folder's tokenizer.json / tokenizer_config.json."""
    folder = Path(hf_tokenizer_dir)
    tokenizer = _read_json(folder / "tokenizer.json")
    if tokenizer is None:
        raise FileNotFoundError(folder / "tokenizer.json")
    config = _read_json(folder / "tokenizer_config.json") or {}
    model = tokenizer["model"]
    if model.get("type", "BPE") != "BPE":
        raise ValueError(f"{folder}: model type {model.get('type')} has no GGUF form here")
    if model.get("byte_fallback", False):
        token_ids = _sentencepiece(writer, tokenizer)
    else:
        token_ids = _byte_level(writer, tokenizer, pre)
    _special_ids(writer, config, token_ids)
    template = _chat_template(folder, config)
    if template:
        writer.add_chat_template(template)
