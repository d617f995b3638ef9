#!/usr/bin/env python3
"""Write tests/golden/jinja/features.json: small Jinja snippets and what transformers' chat-template environment
renders from them, for the C++ interpreter's tests (src/data/jinja*.cpp, tests/unit/test_jinja.cpp).

Each case is compiled with transformers' own ``_compile_jinja_template`` (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, its tojson / raise_exception / dict / namespace) and rendered with a fixed
context. Cases marked ``"error": true`` must fail (a syntax error, an unknown filter, raise_exception, an undefined
object's attribute...). strftime_now is left out, so the output does not depend on the clock.

    python3 tools/gen_jinja_goldens.py [--out tests/golden/jinja/features.json]
"""
from __future__ import annotations

import argparse
import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template

MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What's 2+2?"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "description": "City name"},
                                                "days": {"type": "integer"}}, "required": ["city"]}}}]
CTX = {
    "messages": MESSAGES,
    "tools": TOOLS,
    "s": "Hello World",
    "u": "héllo wörld ☃ 日本",
    "n": 7,
    "f": 2.5,
    "xs": [3, 1, 2],
    "names": ["bob", "Alice", "carol", "alice"],
    "d": {"b": 2, "a": 1, "c": 3},
    "people": [{"name": "Ann", "age": 31, "city": "Oslo"}, {"name": "bo", "age": 25, "city": "Rome"},
               {"name": "Cy", "age": 31, "city": "Oslo"}],
    "empty": [],
    "nothing": None,
    "flag": True,
    "nested": {"a": {"b": {"c": [10, 20, 30]}}},
    "text": "  line one\nline two\n\nline four  ",
    "add_generation_prompt": True,
}

# (name, template[, context overrides]); the context is CTX plus the overrides.
CASES = [
    # text, whitespace control, trim_blocks / lstrip_blocks, comments, raw
    ("text", "plain text"),
    ("trailing_newline", "a\n"),
    ("two_trailing_newlines", "a\n\n"),
    ("crlf", "a\r\nb\rc"),
    ("var", "{{ s }}!"),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend"),
    ("lstrip_blocks", "x\n    {% if true %}\n    yes\n    {% endif %}\nend"),
    ("lstrip_not_var", "x\n    {{ n }}\n"),
    ("lstrip_text_before", "x  {% if true %}y{% endif %}"),
    ("dash_left", "a   \n  {%- if true %}b{% endif %}"),
    ("dash_right", "{% if true -%}  \n\n  b{% endif %}"),
    ("dash_var", "a  {{- n -}}  b"),
    ("plus_left", "x\n    {%+ if true %}y{% endif %}"),
    ("plus_right", "{% if true +%}\ny{% endif %}"),
    ("comment", "a {# comment #} b"),
    ("comment_trim", "a\n{# comment #}\nb"),
    ("comment_lstrip", "a\n   {# c #}\nb"),
    ("comment_dash", "a   {#- c -#}   b"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("raw_ws", "a\n  {% raw %}\n {{x}}\n  {% endraw %}\nb"),
    ("for_trim", "{% for x in xs %}\n{{ x }}\n{% endfor %}\n"),
    ("for_lstrip", "<\n  {% for x in xs %}\n  [{{ x }}]\n  {% endfor %}\n>"),
    ("block_at_start", "  {% if true %}a{% endif %}"),
    ("tab_lstrip", "\t{% if true %}a{% endif %}\n\t{{ n }}"),
    ("var_braces", "{{ {'a': {'b': 1}} }}"),
    ("newline_in_tag", "{{\n  n\n}}|{%\nif true\n%}y{% endif %}"),
    # literals and printing
    ("ints", "{{ 1 }} {{ -3 }} {{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }}"),
    ("floats", "{{ 1.0 }} {{ 0.1 }} {{ 1e-5 }} {{ 1e20 }} {{ 1.5e16 }} {{ 123456789.125 }} {{ 2.5e-3 }} {{ 1e16 }}"),
    ("float_more", "{{ 1/3 }} {{ 2/3 }} {{ 10/4 }} {{ 1e15 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.14159 }}"),
    ("bools", "{{ true }} {{ false }} {{ True }} {{ False }} {{ none }} {{ None }}"),
    ("strings", '{{ \'a\' }}{{ "b" }}{{ \'it\\\'s\' }}{{ "q\\"q" }}{{ \'tab\\tnl\\n\' }}{{ \'\\u00e9\\x41\' }}'),
    ("string_concat_lit", '{{ \'a\' \'b\' "c" }}'),
    ("list_repr", "{{ [1, 'a', none, true, 2.5, [], {}] }}"),
    ("tuple_repr", "{{ (1,) }} {{ (1, 2) }} {{ () }}"),
    ("dict_repr", "{{ {'a': 1, 'b': 'x', 'c': [1]} }}"),
    ("repr_quotes", '{{ ["it\'s", \'say "hi"\', \'both \\\' "\', \'back\\\\slash\', \'nl\\n\'] }}'),
    ("repr_unicode", "{{ ['é', '☃', '\\x00', '\\x7f', '\\u00a0'] }}"),
    ("context_repr", "{{ messages[0] }}|{{ d }}|{{ nested }}"),
    ("print_tuple", "{{ 1, 2 }}"),
    ("undefined_prints_empty", "[{{ missing }}]"),
    ("none_var", "{{ nothing }}"),
    # operators
    ("arith", "{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
    ("arith_float",
     "{{ 1.5 + 1 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ 4 / 2 }}"),
    ("unary", "{{ -n }} {{ +n }} {{ - -n }} {{ -f }} {{ not true }} {{ not 0 }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ -2 ** 2 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ missing ~ [1] }}"),
    ("string_plus", "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} {{ [0] * 3 }}"),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ true == 1 }}"),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ [1, 2] < [1, 3] }} {{ 'abc' == 'abc' }}"),
    ("in", "{{ 1 in xs }} {{ 5 in xs }} {{ 'ell' in s }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in missing }}"),
    ("and_or", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ xs and xs[0] }} {{ 0 or [] }}"),
    ("condexpr",
     "{{ 'y' if flag else 'n' }} {{ 'y' if not flag else 'n' }} [{{ 'y' if false }}] {{ 1 if 0 else 2 if 0 else 3 }}"),
    ("eq_types",
     "{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ '1' == 1 }}"),
    # attributes and subscripts
    ("getattr",
     "{{ messages[0].role }} {{ messages[1]['content'] }} {{ nested.a.b.c[1] }} {{ nested['a']['b'].c[-1] }}"),
    ("getattr_int", "{{ xs.0 }} {{ nested.a.b.c.2 }}"),
    ("missing_key", "[{{ d.zz }}][{{ d['zz'] }}][{{ xs[10] }}][{{ d.zz is defined }}]"),
    ("neg_index", "{{ xs[-1] }} {{ s[0] }} {{ s[-1] }} {{ u[1] }} {{ u[-1] }}"),
    ("slices",
     "{{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ xs[-2:] }} {{ s[:-6] }}"),
    ("slice_unicode", "{{ u[1:5] }} {{ u[::-1] }} {{ u[-2:] }} {{ u|length }}"),
    ("slice_messages", "{% for m in messages[1:] %}{{ m.role }},{% endfor %}"),
    ("dict_method_vs_key",
     "{{ {'items': 5}['items'] }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'dflt') }} {{ {'a': 1}.get('b') }}"),
    ("dict_items_loop", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("dict_keys_values", "{{ d.keys()|list }} {{ d.values()|list }} {% for k in d %}{{ k }}{% endfor %}"),
    ("string_index_loop", "{% for c in 'abc' %}{{ c }}-{% endfor %}"),
    # statements
    ("if_elif_else",
     "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}"),
    ("for_else",
     "{% for x in empty %}{{ x }}{% else %}none{% endfor %}|{% for x in xs %}{{ x }}{% else %}none{% endfor %}"),
    ("for_if", "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("loop_vars",
     "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ "
     "loop.last }}{{ loop.length }};{% endfor %}"),
    ("loop_prev_next",
     "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}"),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("nested_loops",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ a }}{{ b }}{{ outer.index }}{{ loop.index }} "
     "{% endfor %}{% endfor %}"),
    ("break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% "
     "endfor %}"),
    ("loop_scoping", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }};{% endfor %}{{ x }}"),
    ("loop_scoping_fresh", "{% for i in range(2) %}[{{ y }}]{% set y = i %}{% endfor %}[{{ y }}]"),
    ("namespace",
     "{% set ns = namespace(count=0, found=false) %}{% for x in xs %}{% set ns.count = ns.count + x %}{% if x == 1 %}"
     "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}"),
    ("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}"),
    ("set_block", "{% set block %}Hi {{ s }}!{% endset %}[{{ block }}]"),
    ("set_block_filter", "{% set block | upper | trim %}  hi {{ n }} {% endset %}[{{ block }}]"),
    ("set_in_if", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}"),
    ("tuple_unpack_for", "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }} {% endfor %}"),
    ("macro",
     "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ "
     "greet('Bo', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}"),
    ("macro_scope", "{% set g = 'G' %}{% macro m() %}{% set g = 'local' %}{{ g }}{% endmacro %}{{ m() }}{{ g }}"),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}"),
    ("macro_recursive",
     "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
    ("macro_render_json",
     "{% macro render(v) %}{% if v is mapping %}{% for k, x in v.items() %}{{ k }}:{{ render(x) }};{% endfor %}{% "
     "elif v is string %}'{{ v }}'{% else %}{{ v }}{% endif %}{% endmacro %}{{ render({'a': 1, 'b': {'c': 'x'}}) }}"),
    ("call_block",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% "
     "endcall %}"),
    ("call_block_args",
     "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each(xs) %}[{{ "
     "x }}]{% endcall %}"),
    ("filter_block", "{% filter upper %}hello {{ s }}{% endfilter %}"),
    ("generation",
     "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else "
     "%}{{ m.content }}{% endif %}\n{% endfor %}"),
    ("recursive_loop",
     "{% for item in tree recursive %}{{ item.name }}{% if item.children %}({{ loop(item.children) }}){% endif %}{{ "
     "loop.depth }};{% endfor %}",
     {'tree': [{'name': 'a', 'children': [{'name': 'b', 'children': []}, {'name': 'c'}]}, {'name': 'd'}]}),
    # filters
    ("f_default",
     "{{ missing|default('dflt') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|d('n', boolean=true) }}"
     " {{ s|d('x') }}"),
    ("f_length", "{{ xs|length }} {{ s|length }} {{ d|length }} {{ missing|length }} {{ u|count }} {{ empty|length }}"),
    ("f_join",
     "{{ xs|join(', ') }} {{ names|join }} {{ people|join('/', attribute='name') }} {{ [1, none, 'a']|join('-') }}"),
    ("f_first_last", "{{ xs|first }} {{ xs|last }} {{ s|first }} {{ s|last }} [{{ empty|first }}]"),
    ("f_list", "{{ s|list }} {{ d|list }} {{ xs|list }}"),
    ("f_items_dictsort",
     "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ {'B': 1, 'a': 2}|dictsort }} "
     "{{ {'B': 1, 'a': 2}|dictsort(true) }}"),
    ("f_sort",
     "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ names|sort }} {{ names|sort(case_sensitive=true) }} {{ "
     "people|sort(attribute='age')|map(attribute='name')|list }}"),
    ("f_unique",
     "{{ names|unique|list }} {{ names|unique(case_sensitive=true)|list }} {{ [1, 2, 1, 3, 2]|unique|list }}"),
    ("f_min_max",
     "{{ xs|min }} {{ xs|max }} {{ names|min }} {{ names|max }} {{ people|max(attribute='age') }} [{{ empty|max }}]"),
    ("f_map",
     "{{ people|map(attribute='name')|list }} {{ names|map('upper')|list }} {{ people|map(attribute='zip', "
     "default='?')|list }} {{ ['1', '2']|map('int')|sum }}"),
    ("f_select_reject",
     "{{ range(10)|select('odd')|list }} {{ range(10)|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} "
     "{{ range(10)|select('divisibleby', 3)|list }}"),
    ("f_selectattr",
     "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|join(',') }} {{ people|rejectattr('city', "
     "'eq', 'Oslo')|map(attribute='name')|list }} {{ messages|selectattr('role', 'in', ['user'])|list|length }} {{ "
     "[{'a': 1}, {'a': 0}, {}]|selectattr('a')|list }}"),
    ("f_selectattr_defined",
     "{{ [{'a': 1}, {'b': 2}]|selectattr('a', 'defined')|list }} {{ [{'a': 1}, {'b': 2}]|rejectattr('a', "
     "'defined')|list }}"),
    ("f_string_case",
     "{{ s|upper }} {{ s|lower }} {{ 'hello wORLD'|capitalize }} {{ 'hello wORLD-foo bar(baz)'|title }} {{ n|string "
     "}}{{ xs|string }}"),
    ("f_replace",
     "{{ s|replace('o', '0') }} {{ s|replace('o', '0', 1) }} {{ 'aaa'|replace('', '-') }} {{ 'aaa'|replace('a', "
     "'bb', count=2) }}"),
    ("f_trim", "[{{ '  x  '|trim }}][{{ 'xxaxx'|trim('x') }}][{{ text|trim }}]"),
    ("f_indent",
     "[{{ text|indent }}]\n[{{ text|indent(2, true) }}]\n[{{ text|indent(2, first=true, blank=true) }}]\n[{{ "
     "'a\nb'|indent('> ') }}]"),
    ("f_center", "[{{ 'ab'|center(7) }}][{{ 'abc'|center(6) }}][{{ 'abc'|center(8) }}][{{ 'abcd'|center(2) }}]"),
    ("f_int_float",
     "{{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ "
     "'2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ true|int }}"),
    ("f_round_abs",
     "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1.23456|round(3) }} {{ 2.1|round(method='ceil') }} {{ "
     "2.9|round(method='floor') }} {{ -3|abs }} {{ -2.5|abs }} {{ 3|round }}"),
    ("f_sum", "{{ xs|sum }} {{ people|sum(attribute='age') }} {{ [1.5, 2]|sum }} {{ xs|sum(start=10) }}"),
    ("f_reverse", "{{ xs|reverse|list }} {{ s|reverse }} {{ u|reverse }}"),
    ("f_tojson",
     '{{ d|tojson }} {{ messages[0]|tojson }} {{ \'é"\\n<>&\'|tojson }} {{ [1, 2.0, none, true]|tojson }} {{ {\'b\': '
     "1, 'a': [1, {'x': 2}]}|tojson(indent=2) }}"),
    ("f_tojson_opts",
     "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ tools|tojson(indent=4) }} {{ "
     "[]|tojson(indent=2) }} {{ {}|tojson }} {{ 1e20|tojson }} {{ 0.1|tojson }}"),
    ("f_tojson_unicode", "{{ u|tojson }} {{ '\\x01\\t'|tojson }}"),
    ("f_escape_safe", '{{ \'<a href="x">&\\\'</a>\'|e }} {{ \'<b>\'|safe }} {{ \'<i>\'|escape }}'),
    ("f_truncate",
     "{{ 'hello world foo bar'|truncate(9) }} {{ 'hello world foo bar'|truncate(9, true) }} {{ 'short'|truncate(9) }}"
     " {{ 'hello world foo bar'|truncate(12, false, '…', 0) }}"),
    ("f_wordcount", "{{ 'hello world, foo_bar 42'|wordcount }}"),
    ("f_batch", "{{ range(7)|batch(3)|list }} {{ range(5)|batch(2, 'x')|list }}"),
    ("f_urlencode", "{{ 'a b/c?d=é'|urlencode }} {{ {'q': 'x y', 'n': 1}|urlencode }} {{ [('a', '&')]|urlencode }}"),
    ("f_attr", "{{ messages[0]|attr('role') }}"),
    ("f_groupby",
     "{% for city, group in people|groupby('city') %}{{ city }}:{{ group|map(attribute='name')|join(',') }};{% "
     "endfor %}"),
    ("f_chain", "{{ messages|map(attribute='role')|unique|list|join('+')|upper }}"),
    ("filter_then_test", "{{ xs|length is odd }} {{ -3|abs }}"),
    # tests
    ("tests_types",
     "{{ n is number }} {{ f is float }} {{ n is integer }} {{ f is integer }} {{ true is boolean }} {{ s is string "
     "}} {{ d is mapping }} {{ xs is sequence }} {{ s is sequence }} {{ n is sequence }} {{ xs is iterable }} {{ "
     "nothing is none }}"),
    ("tests_values",
     "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ s is lower }} {{ 'abc' is "
     "lower }} {{ 'ABC' is upper }} {{ true is true }} {{ 1 is true }} {{ false is false }}"),
    ("tests_compare",
     "{{ n is eq 7 }} {{ n is equalto 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is ge 7 }} {{ n is lt 3 }} {{ n is "
     "le 7 }} {{ 2 is in xs }} {{ n is not in xs }}"),
    ("tests_defined",
     "{{ missing is defined }} {{ missing is undefined }} {{ s is defined }} {{ d.a is defined }} {{ d.q is not "
     "defined }} {{ nothing is defined }}"),
    ("tests_misc",
     "{{ range is callable }} {{ s is callable }} {{ s.upper is callable }} {{ none is sameas none }} {{ 'upper' is "
     "filter }} {{ 'odd' is test }} {{ 'nope' is filter }}"),
    ("test_in_if_no_paren", "{% if messages[0].role is equalto 'system' and n is odd %}ok{% endif %}"),
    # methods
    ("str_methods",
     "{{ '  hi  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  hi '.lstrip() }}|{{ ' hi  '.rstrip() }}|{{ s.upper() }}"
     "|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}"),
    ("str_split",
     "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} "
     "{{ ' a b  c '.rsplit(None, 1) }} {{ 'a b c'.split(' ', maxsplit=1) }}"),
    ("str_search",
     "{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'He')) }} {{ s.find('o') }} {{ "
     "s.rfind('o') }} {{ s.find('z') }} {{ u.find('w') }} {{ s.count('l') }} {{ s.index('W') }}"),
    ("str_replace_join",
     "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ '-'.join(['a', 'b']) }} {{ ', '.join(names) }}"),
    ("str_misc",
     "{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ '  '.isspace() }} {{ "
     "'a\nb\r\nc'.splitlines() }} {{ 'pre_x'.removeprefix('pre_') }} {{ 'abc'.islower() }}"),
    ("str_method_content",
     "{% for m in messages %}{% if m.content.startswith('Hi') %}{{ m.content.split(' ')[0] }}{% endif %}{% endfor %}"),
    ("list_methods", "{{ xs.index(2) }} {{ [1, 1, 2].count(1) }}"),
    ("think_split",
     "{% set c = '<think>\nplan\n</think>\n\nanswer' %}{{ c.split('</think>')[-1].lstrip('\n') }}|{{ "
     "c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}"),
    # globals
    ("range", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}"),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict([('k', 'v')]) }}"),
    ("raise_in_false_branch", "{% if false %}{{ raise_exception('never') }}{% endif %}ok"),
    # realistic chat template fragments
    ("chatml",
     "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
     "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    ("llama3_style",
     "{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
     "messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set "
     'system_message = "" %}\n{%- endif %}\n{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n{{- '
     'system_message }}\n{{- "<|eot_id|>" }}\n{%- for message in messages %}\n    {{- \'<|start_header_id|>\' + '
     "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- "
     "if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n",
     {'bos_token': '<|begin_of_text|>'}),
    ("tools_json_lines",
     "{%- if tools %}\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}\n{%- endfor %}\n</tools>\n{%- endif %}"
     "\n"),
    ("mistral_alternation",
     "{%- for message in messages %}\n  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n    {{- "
     "raise_exception('roles must alternate') }}\n  {%- endif %}\n  {{- message['role'][0] }}\n{%- endfor %}",
     {'messages': [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'}]}),
    ("content_parts",
     "{%- for m in messages %}{%- if m.content is string %}{{ m.content }}{%- else %}{%- for part in m.content %}{%- "
     "if part.type == 'text' %}{{ part.text }}{%- elif part.type == 'image' %}<img>{%- endif %}{%- endfor %}{%- "
     "endif %}|{%- endfor %}",
     {'messages': [{'role': 'user', 'content': [{'type': 'image'}, {'type': 'text', 'text': 'what?'}]},
                   {'role': 'assistant', 'content': 'a cat'}]}),
    ("gemma_role_map",
     "{%- for message in messages -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] "
     "-%}<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor -%}"),
    ("reverse_loop_ns",
     "{%- set ns = namespace(last_user=-1) %}{%- for m in messages[::-1] %}{%- set index = (messages|length - 1) - "
     "loop.index0 %}{%- if ns.last_user == -1 and m.role == 'user' %}{%- set ns.last_user = index %}{%- endif %}{%- "
     "endfor %}{{ ns.last_user }}"),
    # formatting
    ("f_format",
     "{{ '%s-%d'|format('a', 3) }} {{ '%05.2f|%-4s|%4s|%x|%%|%r'|format(3.14159, 'ab', 'c', 255, 'q') }} {{ "
     "'%(a)s+%(b)d'|format(a='x', b=2) }}"),
    ("percent_op", "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%s' % [1, 2] }} {{ '%.3s' % 'abcdef' }}"),
    ("str_format",
     "{{ '{} {}'.format('a', 1) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='N') }} {{ '{{}} "
     "{!r}'.format('q') }} {{ '{:>5}|{:<4}|{:^7}|{:.2f}'.format('ab', 'c', 'mid', 3.14159) }}"),
    ("str_pad", "{{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4) }}| {{ 'ab'.rjust(4, '0') }}"),
    ("unicode_case",
     "{{ u|upper }} {{ u|title }} {{ 'ÉCOLE Ελληνικά Привет'|lower }} {{ 'élan'|capitalize }} {{ 'straße'.title() }} "
     "{{ 'ÀB' is upper }} {{ 'ñ' is lower }}"),
    ("case_scripts",
     "{{ 'привет мир'|upper }} {{ 'ΑΘΗΝΑ Ελλάδα'|lower }} {{ 'հայերեն'|upper }} {{ 'ᲥᲐᲠᲗᲣᲚᲘ'|lower }} "
     "{{ 'ｆｕｌｌ ｗｉｄｔｈ'|upper }} {{ '𐐀𐐁'|lower }} {{ '𐐨𐐩'.upper() }} {{ 'ǆemal'|capitalize }} "
     "{{ 'ǉubljana ǌive'.title() }} {{ 'ΟΔΟΣ ΣΟΦΟΣ.'|lower }} {{ 'ΟΔΟΣ'.capitalize() }}"),
    ("case_special",
     "{{ 'straße ŉ ﬁne ﬄow և ǰ'|upper }} {{ 'straße ﬁne ﬄow'.title() }} {{ 'ﬁne straße'|capitalize }} "
     "{{ 'ßig ﬁx-ΣΑΣ'|title }} {{ 'İSTANBUL'|lower }} {{ 'ΑΣ́'|lower }} {{ 'ΑΣ.'.lower() }} {{ 'Σ'|lower }}"),
    ("case_tests",
     "{{ 'привет' is lower }} {{ 'ПРИВЕТ' is upper }} {{ 'ǅ' is upper }} {{ '日本' is lower }} "
     "{{ 'ａｂｃ'.islower() }} {{ 'ΣΑ'.isupper() }} {{ 'Ⅻ'.isupper() }} {{ 'ⓐⓑ'|upper }} {{ 'x²y'.title() }}"),
    ("tojson_ascii", "{{ u|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}"),
    ("undefined_in_list", "{{ [missing, 1] }} {{ {'a': missing} }}"),
    ("macro_varargs",
     "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}"),
    ("loop_in_macro_in_loop", "{% for x in xs %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}"),
    ("shadowed_loop_var", "{% set x = 1 %}{% for x in xs %}{% endfor %}{{ x }}"),
    ("tool_call_rebind",
     "{%- set tool_calls = [{'function': {'name': 'f', 'arguments': {'a': 1}}}] %}{% for tc in tool_calls %}{% if "
     "tc.function is defined %}{% set tc = tc.function %}{% endif %}{{ tc.name }}({{ tc.arguments|tojson }}){% "
     "endfor %}"),
    ("strip_sign_mix", "a  {#- c -#}  b {%- raw %} r {% endraw -%}  c\n{%- if true -%}\n y \n{%- endif -%}\n\n"),
    ("float_sums",
     "{{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }} {{ (0.1 + 0.2)|round(2) }} {{ 2.5|round|int }} {{ '%s'|format(none) }}"),
    ("dict_keys_mixed", "{{ {1: 'a', 2.5: 'b', none: 'c', true: 'd'} }} {{ {1: 'a', true: 'b'} }}"),
    ("err_macro_extra_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}", None, True),
    ("err_macro_extra_arg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", None, True),
    ("err_macro_no_caller", "{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}", None, True),
    ("err_none_compare", "{{ none < 1 }}", None, True),
    ("err_none_length", "{{ nothing|length }}", None, True),
    ("err_underscore_attr", "{{ ''.__class__.__mro__ }}", None, True),
    # scoping of blocks and macros
    ("macro_sees_later_set", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"),
    ("macro_param_set", "{% macro m(x) %}{% set x = x + 1 %}{{ x }}{% endmacro %}{{ m(1) }}[{{ x }}]"),
    ("set_block_scope", "{% set a = 1 %}{% set b %}{{ a }}{% set a = 2 %}{{ a }}{% endset %}{{ b }}{{ a }}"),
    ("filter_block_scope", "{% set a = 1 %}{% filter upper %}{% set a = 2 %}{{ a }}{% endfilter %}{{ a }}"),
    ("generation_scope", "{% set a = 1 %}{% generation %}{% set a = 2 %}{{ a }}{% endgeneration %}{{ a }}"),
    ("loop_var_reassign", "{% for i in xs %}{{ i }}{% set i = 9 %}{{ i }}{% endfor %}"),
    ("for_else_scope", "{% for i in [] %}{% else %}[{{ i }}|{{ loop is defined }}]{% endfor %}"),
    ("caller_defined",
     "{% macro m() %}{{ caller() if caller is defined else 'nocaller' }}{% endmacro %}{{ m() }}|{% call m() %}C{% "
     "endcall %}"),
    ("err_break_in_generation",
     "{% for i in xs %}{% generation %}{% break %}{% endgeneration %}{% endfor %}",
     None,
     True),
    ("err_break_outside_loop", "{% break %}", None, True),
    # errors
    ("err_raise", "{{ raise_exception('Conversation roles must alternate') }}", None, True),
    ("err_syntax_endfor", "{% if true %}x{% endfor %}", None, True),
    ("err_syntax_unclosed", "{% for x in xs %}x", None, True),
    ("err_syntax_expr", "{{ 1 + }}", None, True),
    ("err_syntax_unknown_tag", "{% frobnicate %}", None, True),
    ("err_unclosed_var", "{{ x ", None, True),
    ("err_unknown_filter", "{{ x|nosuchfilter }}", None, True),
    ("err_unknown_test", "{{ x is nosuchtest }}", None, True),
    ("err_undefined_attr", "{{ missing.attr }}", None, True),
    ("err_undefined_item", "{{ missing['k'] }}", None, True),
    ("err_undefined_call", "{{ missing() }}", None, True),
    ("err_undefined_add", "{{ missing + 1 }}", None, True),
    ("err_type_add", "{{ 1 + 'a' }}", None, True),
    ("err_div_zero", "{{ 1 / 0 }}", None, True),
    ("err_append", "{% set l = [] %}{{ l.append(1) }}", None, True),
    ("err_dict_update", "{% set q = {} %}{{ q.update({'a': 1}) }}", None, True),
    ("err_ns_set_non_ns", "{% set q = {} %}{% set q.a = 1 %}", None, True),
    ("err_unknown_filter_in_loop", "{% if true %}{% for x in xs %}{{ x|nosuch }}{% endfor %}{% endif %}", None, True),
    ("err_unknown_filter_in_if_runtime", "{% if true %}{{ x|nosuch }}{% endif %}", None, True),
    ("err_tojson_undefined", "{{ missing|tojson }}", None, True),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", None, True),
    ("err_unpack", "{% for a, b in [(1, 2, 3)] %}{% endfor %}", None, True),
    ("err_comment", "{# unclosed", None, True),
    ("err_compare_types", "{{ 1 < 'a' }}", None, True),
    ("err_macro_recursion", "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", None, True),
    ("err_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", None, True),
    # unknown filter in a branch not taken is fine (jinja2 checks it when it runs)
    ("unknown_filter_in_false_if", "{% if false %}{{ x|nosuch }}{% endif %}ok"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "jinja", "features.json"))
    args = ap.parse_args()
    args.out = os.path.normpath(args.out)
    cases = []
    for entry in CASES:
        name, template = entry[0], entry[1]
        overrides = entry[2] if len(entry) > 2 and entry[2] else {}
        want_error = len(entry) > 3 and entry[3]
        context = {**CTX, **overrides}
        case = {"name": name, "template": template}
        # Only what the template names goes into the file, to keep it small.
        used = {k: v for k, v in context.items() if k in template or k == "add_generation_prompt"}
        if overrides:
            used.update(overrides)
        case["context"] = used
        try:
            output = _compile_jinja_template(template).render(**used)
        except Exception as e:  # noqa: BLE001 - any jinja2 error is what an error case expects
            if not want_error:
                raise SystemExit(f"{name}: unexpected {type(e).__name__}: {e}")
            case["error"] = True
            case["message"] = f"{type(e).__name__}: {e}"
        else:
            if want_error:
                raise SystemExit(f"{name}: expected an error, rendered {output!r}")
            case["output"] = output
        cases.append(case)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases -> {args.out} ({os.path.getsize(args.out)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
