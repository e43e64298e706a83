#!/usr/bin/env python3
"""Render Jinja language cases in transformers' chat-template environment, for the C++ interpreter tests.

Each case is a small template and its variables, chosen to exercise one corner of the language as
chat templates use it: whitespace control under trim_blocks/lstrip_blocks, scoping of set in loops
and macros, Python's str/repr of values, json.dumps through tojson, slicing, string methods,
filters, tests, loop variables, errors. Every case is rendered by the environment transformers'
apply_chat_template compiles templates in (its sandbox, extensions, tojson, raise_exception and
strftime_now, the clock pinned to 2026-01-15 10:30), and written with its output, or with the
error it raised, to tests/fixtures/chat_templates/language_cases.json.

Needs only `pip install transformers jinja2` (no torch). Run from the repository root:

    python3 tools/make_jinja_language_fixtures.py [--out tests/fixtures/chat_templates/language_cases.json]
"""

import argparse
import datetime
import json
from pathlib import Path
from unittest import mock

import jinja2
import transformers
from transformers.utils import chat_template_utils

NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)

# (template, variables)
CASES = [
    ('Hello {{ name }}!', {'name': 'wörld'}),
    ('{% for x in xs %}{{ loop.index }}:{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}', {'xs': [1, 2.5, 'a', None, True]}),
    ('{{ xs }}', {'xs': [1, 2.5, "a'b", 'c"d', None, True, {'k': 'v'}]}),
    ('{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}', {'d': {'b': [1, 2.0, 'é\n'], 'a': {}, 'c': []}}),
    ('{{ 1/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e-7 }} {{ 1e16 }} {{ 123.456 }} {{ 0.1+0.2 }}', {}),
    ('  {% if true %}\n  yes\n  {% endif %}\nend', {}),
    ('a\n  {%- if true -%}  \n b \n {%- endif %}\nc', {}),
    ('{# comment #}\nx{# c2 #}  \ny', {}),
    ('{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}', {}),
    ('{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}', {}),
    ("{% macro m(a, b='d') %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}", {}),
    ("{{ 'abc'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }}", {}),
    ("{{ ' a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}", {}),
    ("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}", {'messages': [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'}, {'role': 'user', 'content': 'c'}]}),
    ('{{ x is defined }} {{ y is defined }} {{ x is string }} {{ x is not none }} {{ none is none }} {{ 3 is odd }} {{ 4 is divisibleby 2 }}', {'x': 's'}),
    ("{{ 'a' if false }}|{{ 'a' if true else 'b' }}|{{ undefined_thing }}|{{ d.missing }}", {'d': {}}),
    ("{{ raise_exception('bad role') }}", {}),
    ("{{ strftime_now('%Y-%m-%d %d %B') }}", {}),
    ('{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}', {'d': {'z': 1, 'a': 2}}),
    ('{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}', {'xs': [1, 2, 3]}),
    ('{% for x in [] %}x{% else %}empty{% endfor %}', {}),
    ('{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}', {}),
    ("{{ 'Hello World'|lower }} {{ 'hello world'|upper }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ '  t  '|trim }}", {}),
    ("{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ [1,2,2,3,1]|unique|list }}", {}),
    ("{{ xs|length }} {{ 'héllo'|length }} {{ d|length }} {{ xs|first }} {{ xs|last }} {{ xs|reverse|list }}", {'xs': [1, 2, 3], 'd': {'a': 1}}),
    ("{{ '%s and %d'|format('a', 3) }} {{ '{} {}'.format(1, 'b') }} {{ 'x%sy' % 'z' }}", {}),
    ("{{ d.get('a') }} {{ d.get('b', 'dflt') }} {{ d.get('c') }} {{ d.keys()|list }} {{ d['a'] }}", {'d': {'a': 1}}),
    ("{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x','c')) }} {{ 'a' in 'cat' }} {{ 'k' in {'k':1} }} {{ 2 in [1,2] }} {{ 3 not in [1,2] }}", {}),
    ("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ y|d('yy') }}", {'y': 0}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ 'a' + 'b' }}", {}),
    ('{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}', {}),
    ('{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]', {}),
    ('{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}body{% endcall %}', {}),
    ('{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}', {}),
    ("{{ 'line1\\nline2\\n\\nline4'|indent(2) }}|{{ 'a\\nb'|indent(4, true) }}", {}),
    ('{{ d|items|list }} {{ d|dictsort }}', {'d': {'b': 1, 'a': 2}}),
    ("{{ xs|map('upper')|list }} {{ xs|select('equalto', 'a')|list }} {{ xs|reject('equalto', 'a')|list }}", {'xs': ['a', 'b']}),
    ("{{ '3'|int + 1 }} {{ '3.7'|float }} {{ 'x'|int }} {{ 3.9|int }} {{ 2|float }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }}", {}),
    ("{{ {'a': 1, 'b': [1, {'c': none}]} }} {{ none }} {{ true }} {{ 1.0 }} {{ -0.0 }}", {}),
    ('{{ "it\'s" }} {{ [\'it\\\'s\', "q\\""] }} {{ [\'\\t\\x00é\\u00a0\'] }}', {}),
    ('x {%+ if true %}y{% endif %}\n  {%- if true %}\nz{% endif +%}\nw', {}),
    ('{% raw %}{{ not rendered }}{% endraw %}\nafter', {}),
    ('{{ loop_var }}{% for i in [1] %}{% set inner = 5 %}{% endfor %}{{ inner }}', {}),
    ('{{ x.y }}', {}),
    ("{{ [1,2][5] }}|{{ {'a':1}['b'] }}|", {}),
    ('{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ not 1 == 2 }} {{ 1 == 1.0 }} {{ true == 1 }}', {}),
    ("{{ 'abc'|replace('b', 'X') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'a-b'.split('-')|join('+') }}", {}),
    ("{{ messages[0]['content'] }} {{ messages[0].content }} {{ messages|length }}", {'messages': [{'content': 'hi'}]}),
    ('{%- for m in messages -%}\n{{- m.role }}: {{ m.content }}\n{%- endfor -%}', {'messages': [{'role': 'u', 'content': 'x'}, {'role': 'a', 'content': 'y'}]}),
    ('{{ xs|tojson(separators=(\',\', \':\')) }} {{ \'é\'|tojson(ensure_ascii=true) }} {{ \'a"b\\\\\'|tojson }}', {'xs': [1, {'a': 2}]}),
    ('{{ loop }}', {}),
    ('{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index0 }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}', {}),
    ('{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}', {}),
    ("{{ [1, 2, 3]|sum }} {{ [1, 5, 3]|max }} {{ ['b', 'a']|min }} {{ 'a b c'|wordcount }}", {}),
    ('{% if x %}A{% elif y %}B{% else %}C{% endif %}', {'y': 1}),
    ("{{ 'x' is in 'xy' }} {{ 1 is in [1] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ x is mapping }} {{ x is iterable }} {{ x is sequence }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }}", {'x': {'a': 1}}),
    ("{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'ab'.find('b') }} {{ 'ab'.find('z') }} {{ 'abab'.count('ab') }} {{ 'abc'.upper() }} {{ 'aBc'.lower() }} {{ 'Ab'.title() }}", {}),
    ('{{ (1, 2) }} {{ () }} {{ (1,) }}', {}),
    ("{{ xs|map(attribute='a')|list }} {{ xs|sort(attribute='a')|map(attribute='a')|join }}", {'xs': [{'a': 3}, {'a': 1}]}),
    ('a\n    {% if true %}\n    b\n    {% endif %}\n    c\n', {}),
    ('  {% if true %}x{% endif %}  {% if true %}y{% endif %}\n', {}),
    ("{{ 'a' }}  {% if true %}x{% endif %}\n  {{ 'b' }}\n", {}),
    ('\t{% for i in [1,2] %}\n\t{{ i }}\n\t{% endfor %}\n', {}),
    ('x\r\ny\r\n{% if true %}\r\nz{% endif %}\r\n', {}),
    ('{% if true -%}\n\n  a  {%- endif %}', {}),
    ("{{- ' a ' -}}\n  {{ 'b' }}", {}),
    (' {#- c -#} x', {}),
    ('line\n  {# comment #}\nnext', {}),
    ('{% set x = 1 %}  {% set y = 2 %}\n{{ x }}{{ y }}', {}),
    ('{%- macro f() -%}\n  body\n{%- endmacro -%}\n[{{ f() }}]', {}),
    ('text{% if true %}\n{% endif %}more', {}),
    ('{% for m in ms %}{{ m }}\n{% endfor %}', {'ms': [1, 2]}),
    ('<{% generation %}gen{% endgeneration %}>', {}),
    ('{{ x | tojson }}', {'x': [1.5, 1e+16, 1e-05, 0.0001, 123456789.123]}),
    ("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.cycle('a','b') }}|{{ loop.revindex }}{% endfor %}", {'xs': [1, 2, 3]}),
    ("{{ ['a', 'b']|join }} {{ [1, 2]|join('-') }}", {}),
    ("{{ 'x'.rstrip() }}{{ ' a '.lstrip() }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a  b  '.split(none, 1) }}", {}),
    ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set sys = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ loop_messages|length }}{{ sys }}", {'messages': [{'role': 'system', 'content': 'S'}, {'role': 'user', 'content': 'U'}]}),
    ("{{ x.content is string }} {{ x.tool_calls is defined }} {{ x['tool_calls'] is not defined }}", {'x': {'content': 'c'}}),
    ("{%- set ns = namespace(last_query_index=messages|length - 1) -%}\n{%- for message in messages[::-1] -%}\n{%- set index = (messages|length - 1) - loop.index0 -%}\n{%- if ns.last_query_index == index and message.role == 'user' -%}\n{%- set ns.last_query_index = index -%}{%- endif -%}{{ index }}\n{%- endfor -%}|{{ ns.last_query_index }}", {'messages': [{'role': 'user'}, {'role': 'assistant'}, {'role': 'user'}]}),
    ("{{ '<think>' in content }} {{ content.split('</think>')[-1].lstrip('\\n') }}", {'content': '<think>\nhmm\n</think>\n\nanswer'}),
    ('{{ tool|tojson }}', {'tool': {'type': 'function', 'function': {'name': 'get_weather', 'description': 'Get é', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}}),
    ("{{ '日本語'|upper }} {{ 'ÉCOLE'|lower }} {{ 'straße'|upper }}", {}),
    ("{{ 3 ~ 'x' }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 2 ** -1 }} {{ 7 % 2.5 }}", {}),
    ('{{ x is true }} {{ x is false }} {{ 1 is true }}', {'x': True}),
    ("{{ [] is sequence }} {{ 'a' is iterable }} {{ 5 is iterable }}", {}),
    ("{{ a and b }} {{ a or b }} {{ b or 'dflt' }} {{ none or [] }}", {'a': 1, 'b': 0}),
    ("{{ d['a']['b'] }} {{ d.a.b }}", {'d': {'a': {'b': 'deep'}}}),
    ('{{ xs[0:-1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ xs[5:] }}', {'xs': [1, 2, 3, 4]}),
    ("{{ 1 + 'a' }}", {}),
    ('{{ n.x.y }}', {'n': None}),
    ('{% for x in 5 %}{{ x }}{% endfor %}', {}),
    ('{{ [1].append(2) }}', {}),
    ('{{ x|frobnicate }}', {'x': 1}),
    ('{% break %}', {}),
    ("{% include 'other.jinja' %}", {}),
    ('{% if x %}unclosed', {'x': 1}),
    ("{{ 'unclosed string }}", {}),
    ('{{ 1 // 0 }}', {}),
    ('{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}', {}),
    ("{% macro list_item(label) %}<li>{{ label }}: {{ caller(label|upper) }}</li>{% endmacro %}{% call(up) list_item('a') %}[{{ up }}]{% endcall %}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ('{% for item in tree recursive %}{{ item.name }}{% if item.children %}({{ loop(item.children) }}){% endif %}{{ loop.depth }}{% endfor %}', {'tree': [{'name': 'a', 'children': [{'name': 'b', 'children': []}]}, {'name': 'c'}]}),
    ('{{ x is sameas x }} {{ [] is sameas [] }} {{ none is sameas none }}', {'x': [1]}),
    ("{{ dict(a=1, b='x') }} {{ namespace(d).a }} {{ namespace(a=1, b=2).b }}", {'d': {'a': 5}}),
    ("{%- set greeting = 'hi' -%}\n\n  {{ greeting }}  \n", {}),
    ('{{ d|tojson(indent=2) }}', {'d': {'a': [1, {'b': []}], 'c': {}}}),
    ('{{ \'\\x41\\u00e9\\t|\' }} {{ "a\\\\b" }} {{ \'\\101\' }}', {}),
    ("{{ '%5.2f|%-4d|%04d|%s%%'|format(3.14159, 7, 42, 'x') }}", {}),
    ("{{ '{0}-{1}-{0}'.format('a', 'b') }} {{ '{x}{{}}'.format(x=1) }}", {}),
    ('{{ xs.0 }} {{ xs.1.k }}', {'xs': ['first', {'k': 'v'}]}),
    ("{{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ 'b' > 'a' }}", {}),
    ("{{ xs|sum(attribute='n') }} {{ xs|unique(attribute='n')|map(attribute='n')|list }} {{ ['1', '2']|map('int')|sum }}", {'xs': [{'n': 1}, {'n': 2}, {'n': 1}]}),
    ("{{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}", {'d': {'a': 3, 'b': 1, 'C': 2}}),
    ("[{{ 'ab'|center(7) }}] {{ 'one two  three'|wordcount }}", {}),
    ('{% if not x is defined %}undefined{% endif %} {{ not none }}', {}),
    ('{% for k, v in args.items() %}{{ v|tojson|string if v is not string else v }};{% endfor %}', {'args': {'a': 'text', 'b': {'c': [1, 2]}, 'd': 1.5, 'e': None}}),
    ("{{ 'image' in {} }} {{ 'image' in {'image': 1} }} {{ (none or []) }} {{ x|tojson + '!' }}", {'x': 'q'}),
    ('{% for i in range(3, -1, -1) %}{{ i }}{% endfor %} {{ range(0)|list }}', {}),
    ("{%- for m in messages -%}\n  {%- if loop.first and m.role != 'system' -%}\n    {{- 'default system\\n' -}}\n  {%- endif -%}\n  {{- '<|' ~ m.role ~ '|>' ~ m.content|trim ~ '\\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt %}<|assistant|>\n{% endif -%}", {'messages': [{'role': 'user', 'content': '  q  '}], 'add_generation_prompt': True}),
    ('{% set ns = namespace(items=[]) %}{% for x in [1, 2] %}{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.items }}', {}),
    ('{{ 3000000000 * 3000000000 }} {{ 2 ** 62 }} {{ -9223372036854775807 - 1 }}', {}),
    ('{{ 1.5e300 * 1e10 }} {{ (0.1)|round(1) }} {{ 1e22 }} {{ 12345678901234567.0 }} {{ 0.000012 }}', {}),
    ('{{ x.content[:5] }}|{{ x.content[-3:] }}|{{ x.content|length }}', {'x': {'content': '日本語のテキスト'}}),
    ("{{ '  a\\u3000'|trim }}|{{ 'a\\u00a0b'.split() }}|{{ 'AbC'.swapcase is defined }}", {}),
]


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW if tz is None else NOW.replace(tzinfo=tz)


def render(source, variables):
    try:
        return {"rendered": chat_template_utils._compile_jinja_template(source).render(**variables)}
    except Exception as error:  # the C++ side must refuse the same inputs, with its own message
        return {"error": f"{type(error).__name__}: {error}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/chat_templates/language_cases.json"))
    args = parser.parse_args()
    cases = []
    with mock.patch.object(chat_template_utils, "datetime", FixedDatetime):
        for source, variables in CASES:
            cases.append({"template": source, "variables": variables, **render(source, variables)})
    document = {"now": "2026-01-15T10:30:00Z", "transformers": transformers.__version__, "jinja2": jinja2.__version__,
                "cases": cases}
    args.out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(cases)} cases ({sum('error' in c for c in cases)} errors)")


if __name__ == "__main__":
    main()
