#!/usr/bin/env python3
"""Render reference outputs of real model chat templates, for the C++ Jinja interpreter tests.

For every `<name>.jinja` in the fixture folder (default `tests/fixtures/chat_templates/`) that has
an entry in SPECS below, this builds a tiny in-memory `PreTrainedTokenizerFast` carrying the
model's special tokens and that chat template, renders a fixed set of held-out conversations
through transformers' own `apply_chat_template(..., tokenize=False)` and writes `<name>.json`
next to the template: the special tokens the template saw as variables, and per case the
messages, tools, `add_generation_prompt`, extra template kwargs and either the rendered string
or, for inputs the template rejects with `raise_exception`, the exception message.

Renders are deterministic: `strftime_now` sees the fixed instant NOW (recorded as "now").
transformers 5 normalizes messages before rendering (it drops keys whose value is None and
copies a message's reasoning into both `thinking` and `reasoning_content`); the messages are
written to the json in that normalized form, so they are exactly what the template sees and
rendering them again gives the same output.

Needs only `pip install transformers jinja2` (no torch). Run from the repository root:

    python3 tools/make_chat_template_fixtures.py [--dir tests/fixtures/chat_templates]
"""

import argparse
import copy
import datetime
import json
from pathlib import Path
from unittest import mock

import jinja2
import tokenizers
import transformers
from transformers.utils import chat_template_utils

NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
NOW_TEXT = "2026-01-15T10:30:00Z"

# ---------------------------------------------------------------------------------------------
# Held-out conversation material
# ---------------------------------------------------------------------------------------------

SYSTEM = 'You are a terse assistant. Answer in "plain" text.\nNever use emoji.'

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit",
                    },
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_notes",
            "description": "Search the user's notes and return matching snippets.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Full-text query"},
                    "limit": {"type": "integer", "description": "Maximum number of results", "default": 5},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Only notes carrying all of these tags",
                    },
                },
                "required": ["query"],
            },
        },
    },
]


def user(text):
    return {"role": "user", "content": text}


def assistant(text, reasoning=None, tool_calls=None):
    message = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return message


def tool_call(call_id, name, arguments, as_string):
    if as_string:
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(call_id, payload):
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(payload, ensure_ascii=False)}


MULTI_TURN = [
    {"role": "system", "content": SYSTEM},
    user("Name a prime number between 10 and 20."),
    assistant("13 is one — so are 11, 17 and 19."),
    user("Which is the largest? Réponds en français."),
]

REASONING_TURNS = [
    user("Is 91 prime?"),
    assistant("No — 91 = 7 × 13.", reasoning="91 = 7 × 13, so it is composite."),
    user("And 97?"),
    assistant("Yes, 97 is prime.", reasoning="Check primes up to 9: 2, 3, 5, 7 — none divide 97."),
]


def single_tool_call(as_string):
    return [
        user("Is it warmer in Zürich or in 東京 today?"),
        assistant(
            "", tool_calls=[tool_call("call_1", "get_weather", {"city": "Zürich", "unit": "celsius"}, as_string)]
        ),
        tool_result("call_1", {"temperature": 3, "condition": "snow"}),
        assistant("Zürich is at 3 °C with snow; I still need 東京 to compare."),
    ]


def parallel_tool_calls(as_string):
    return [
        {"role": "system", "content": SYSTEM},
        user("Is it warmer in Zürich or in 東京 today?"),
        assistant(
            "Let me check both cities.",
            tool_calls=[
                tool_call("call_1", "get_weather", {"city": "Zürich", "unit": "celsius"}, as_string),
                tool_call("call_2", "get_weather", {"city": "東京", "unit": "celsius"}, as_string),
            ],
        ),
        tool_result("call_1", {"temperature": 3, "condition": "snow"}),
        tool_result("call_2", {"temperature": 12, "condition": "clear"}),
        assistant("Zürich: 3 °C, 東京: 12 °C — 東京 is warmer."),
        user('Thanks! Search my notes for "packing list", max 2 results.'),
    ]


def pending_tool_call():
    return [
        user("Find my notes tagged travel about Kyoto."),
        assistant(
            "",
            reasoning="The user wants notes; call search_notes with the travel tag.",
            tool_calls=[
                tool_call("call_7", "search_notes", {"query": "Kyoto", "limit": 3, "tags": ["travel"]}, False)
            ],
        ),
        tool_result("call_7", [{"title": "Kyoto día 1", "snippet": "Fushimi Inari at 7am\nthen 錦市場"}]),
    ]


# Every case: name -> (messages, add_generation_prompt, use tools, extra template kwargs, expect error).
CASES = {
    "single_user_gen": ([user("héllo 日本語! What's 2+2?")], True, False, {}, False),
    "single_user_nogen": ([user("héllo 日本語! What's 2+2?")], False, False, {}, False),
    "system_multi_turn_gen": (MULTI_TURN, True, False, {}, False),
    "system_multi_turn_nogen": (MULTI_TURN + [assistant("La plus grande est 19.")], False, False, {}, False),
    "tools_gen": (
        [{"role": "system", "content": SYSTEM}, user("What's the weather in 東京 right now?")], True, True, {}, False,
    ),
    "tools_no_system_gen": ([user("What's the weather in 東京 right now?")], True, True, {}, False),
    "tool_call_dict_args": (single_tool_call(False), False, True, {}, False),
    "tool_call_string_args": (single_tool_call(True), False, True, {}, False),
    "parallel_tool_calls_dict_args": (parallel_tool_calls(False), True, True, {}, False),
    "parallel_tool_calls_string_args": (parallel_tool_calls(True), True, True, {}, False),
    "tool_call_pending_gen": (pending_tool_call(), True, True, {}, False),
    "thinking_off_gen": (MULTI_TURN, True, False, {"enable_thinking": False}, False),
    "thinking_on_gen": (MULTI_TURN, True, False, {"enable_thinking": True}, False),
    "thinking_flag_on_gen": (MULTI_TURN, True, False, {"thinking": True}, False),
    "reasoning_history_nogen": (REASONING_TURNS, False, False, {}, False),
    "reasoning_history_gen": (REASONING_TURNS + [user("Et 1001 ?")], True, False, {}, False),
    "think_in_content_gen": (
        [
            user("Quick: capital of Japan?"),
            assistant("<think>\nThe user wants the capital of Japan.\n</think>\n\nTokyo (東京)."),
            user("And of France?"),
        ],
        True, False, {}, False,
    ),
    "content_parts_gen": (
        [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "\"naïve\" in one line."}],
            },
        ],
        True, False, {}, False,
    ),
    "two_system_gen": (
        [
            {"role": "system", "content": SYSTEM},
            {"role": "system", "content": "Prefer metric units."},
            user("How tall is Fuji-san?"),
        ],
        True, False, {}, False,
    ),
    "developer_effort_low_gen": (
        [{"role": "developer", "content": "Reply in haiku.\nNo rhymes."}, user("Describe the sea at dawn.")],
        True, False, {"reasoning_effort": "low"}, False,
    ),
    "tools_effort_high_gen": (
        [user("What's the weather in 東京 right now?")], True, True, {"reasoning_effort": "high"}, False,
    ),
    "builtin_tools_identity_gen": (
        [user("Plot y = x² for x in 0..3.")],
        True, False,
        {"builtin_tools": ["browser", "python"], "model_identity": "You are Chronos-test, a model for fixtures."},
        False,
    ),
    "preserve_thinking_gen": (REASONING_TURNS + [user("Et 1001 ?")], True, False, {"preserve_thinking": True}, False),
    "error_system_not_first": (
        [user("first"), {"role": "system", "content": SYSTEM}, user("second")], True, False, {}, True,
    ),
    "error_non_alternating": ([user("first"), user("second")], True, False, {}, True),
    "error_tool_role": ([user("first"), {"role": "tool", "tool_call_id": "x", "content": "42"}], True, False, {}, True),
    "error_tool_without_call": (
        [user("first"), {"role": "tool", "tool_call_id": "x", "content": "42"}], True, False, {}, True,
    ),
    "error_channel_in_content": (
        [user("hi"), assistant("<|channel|>final<|message|>hello"), user("again")], True, False, {}, True,
    ),
}

BASIC = ["single_user_gen", "single_user_nogen", "system_multi_turn_gen", "system_multi_turn_nogen"]
TOOL_DICT = ["tools_gen", "tools_no_system_gen", "tool_call_dict_args", "parallel_tool_calls_dict_args"]
TOOL_STRING = ["tool_call_string_args", "parallel_tool_calls_string_args"]
REASONING = ["reasoning_history_nogen", "reasoning_history_gen", "tool_call_pending_gen"]

# Per template: the model it comes from, the special tokens its tokenizer_config.json sets (the ones
# a template may read as variables) and the cases it is exercised on.
SPECS = {
    "qwen2_5": {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "special_tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT,
    },
    "qwen3": {
        "model": "Qwen/Qwen3-30B-A3B",
        "special_tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT + TOOL_STRING + REASONING
        + ["thinking_off_gen", "thinking_on_gen", "think_in_content_gen"],
    },
    "qwen3_coder": {
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "special_tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT,
    },
    "qwen3_6": {
        "model": "Qwen/Qwen3.6-35B-A3B",
        "special_tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT + REASONING  # its tool calls need dict arguments (|items)
        + ["thinking_off_gen", "thinking_on_gen", "think_in_content_gen", "content_parts_gen",
           "preserve_thinking_gen", "error_system_not_first"],
    },
    "mixtral": {
        "model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "special_tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        "cases": BASIC + ["error_non_alternating", "error_tool_role"],
    },
    "olmoe": {
        "model": "allenai/OLMoE-1B-7B-0924-Instruct",
        "special_tokens": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|padding|>"},
        "cases": BASIC,
    },
    "deepseek_v3": {
        "model": "deepseek-ai/DeepSeek-V3.1",
        "special_tokens": {
            "bos_token": "<｜begin▁of▁sentence｜>",
            "eos_token": "<｜end▁of▁sentence｜>",
            "pad_token": "<｜end▁of▁sentence｜>",
        },
        "cases": BASIC + TOOL_STRING
        + ["thinking_flag_on_gen", "thinking_on_gen", "think_in_content_gen", "two_system_gen"],
    },
    "deepseek_r1": {
        "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "special_tokens": {
            "bos_token": "<｜begin▁of▁sentence｜>",
            "eos_token": "<｜end▁of▁sentence｜>",
            "pad_token": "<｜end▁of▁sentence｜>",
        },
        "cases": BASIC + TOOL_STRING + ["think_in_content_gen"],
    },
    "glm4_5": {
        "model": "zai-org/GLM-4.5",
        "special_tokens": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT + REASONING
        + ["thinking_off_gen", "thinking_on_gen", "think_in_content_gen", "content_parts_gen"],
    },
    "glm4_6": {
        "model": "zai-org/GLM-4.6",
        "special_tokens": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + TOOL_DICT + REASONING
        + ["thinking_off_gen", "thinking_on_gen", "think_in_content_gen", "content_parts_gen"],
    },
    "kimi_k2": {
        "model": "moonshotai/Kimi-K2-Instruct",
        "special_tokens": {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]"},
        "cases": BASIC + ["tools_gen", "tools_no_system_gen", "tool_call_dict_args", "content_parts_gen"],
    },
    "kimi_k2_thinking": {
        "model": "moonshotai/Kimi-K2-Thinking",
        "special_tokens": {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]"},
        "cases": BASIC + TOOL_DICT + TOOL_STRING + REASONING + ["content_parts_gen"],
    },
    "minimax_m2": {
        "model": "MiniMaxAI/MiniMax-M2",
        "special_tokens": {"bos_token": "]~!b[", "eos_token": "[e~[", "unk_token": "]!d~["},
        "cases": BASIC + TOOL_DICT + REASONING
        + ["think_in_content_gen", "content_parts_gen", "error_tool_without_call"],
    },
    "gpt_oss": {
        "model": "openai/gpt-oss-120b",
        "special_tokens": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
        "cases": BASIC + ["tools_gen", "tool_call_dict_args", "tool_call_string_args"] + REASONING
        + ["developer_effort_low_gen", "tools_effort_high_gen", "builtin_tools_identity_gen",
           "error_tool_without_call", "error_channel_in_content"],
    },
}


class FixedDatetime(datetime.datetime):
    """`datetime` whose `now()` is always NOW, so `strftime_now` renders deterministically."""

    @classmethod
    def now(cls, tz=None):
        return NOW


def normalize(messages):
    """The messages as transformers 5 hands them to the template (None-valued keys dropped, reasoning aliased)."""
    normalized = []
    for message in copy.deepcopy(messages):
        message = {key: value for key, value in message.items() if value is not None}
        fields = ("reasoning_content", "thinking", "reasoning")
        reasoning = next((message[k] for k in fields if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        normalized.append(message)
    return normalized


def make_tokenizer(template, special_tokens):
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=template, **special_tokens)


def render(tokenizer, messages, tools, add_generation_prompt, kwargs):
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
    )


def run_case(tokenizer, name):
    raw_messages, add_generation_prompt, use_tools, kwargs, expect_error = CASES[name]
    messages = normalize(raw_messages)
    tools = TOOLS if use_tools else None
    case = {"name": name, "messages": messages}
    if tools is not None:
        case["tools"] = tools
    case["add_generation_prompt"] = add_generation_prompt
    case["kwargs"] = kwargs
    try:
        rendered = render(tokenizer, messages, tools, add_generation_prompt, kwargs)
    except jinja2.exceptions.TemplateError as error:
        if type(error) is not jinja2.exceptions.TemplateError or not expect_error:
            raise  # only raise_exception() errors are fixtures; anything else is a bug in the spec
        case["error"] = error.message
        return case
    if expect_error:
        raise AssertionError(f"case {name} was expected to raise, but rendered")
    if rendered != render(tokenizer, raw_messages, tools, add_generation_prompt, kwargs):
        raise AssertionError(f"case {name}: normalized messages render differently from the raw ones")
    case["rendered"] = rendered
    return case


def make_fixture(template_path, spec):
    template = template_path.read_text(encoding="utf-8")
    tokenizer = make_tokenizer(template, spec["special_tokens"])
    cases = [run_case(tokenizer, name) for name in sorted(set(spec["cases"]))]
    return {
        "template": template_path.name,
        "model": spec["model"],
        "now": NOW_TEXT,
        "special_tokens": tokenizer.special_tokens_map,
        "cases": cases,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("tests/fixtures/chat_templates"),
                        help="folder holding the <name>.jinja templates; <name>.json is written next to each")
    args = parser.parse_args()

    templates = sorted(args.dir.glob("*.jinja"))
    missing = [path.stem for path in templates if path.stem not in SPECS]
    if missing:
        raise SystemExit(f"no spec for template(s): {', '.join(missing)}")
    with mock.patch.object(chat_template_utils, "datetime", FixedDatetime):
        for path in templates:
            fixture = make_fixture(path, SPECS[path.stem])
            out = path.with_suffix(".json")
            out.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            print(f"{out}: {len(fixture['cases'])} cases")
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
