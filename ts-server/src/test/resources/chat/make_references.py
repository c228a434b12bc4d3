"""Writes the reference renderings that ChatTemplateTest and JinjaCompatibilityTest compare against.

Usage: python make_references.py QWEN3_TOKENIZER_DIR OUT_DIR

QWEN3_TOKENIZER_DIR holds Qwen3's tokenizer.json and tokenizer_config.json. Needs transformers
(any 4.4x or 5.x release) and jinja2 >= 3.1. Every rendering goes through transformers' own code:
apply_chat_template for Qwen3 (text and token ids), render_jinja_template (what
apply_chat_template calls) for the test-only Llama-style template, and the environment transformers
compiles chat templates in (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
strftime_now) for the feature cases.
"""

import datetime
import json
import sys

import jinja2
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template


def qwen3_cases(tokenizer):
    system = {"role": "system", "content": "You are a helpful assistant."}
    user1 = {"role": "user", "content": "What is the capital of France?"}
    assistant1 = {"role": "assistant", "content": "The capital of France is Paris."}
    user2 = {"role": "user", "content": "And of Italy? Answer in one word."}
    thinking = {
        "role": "assistant",
        "content": "<think>\nThe user asks about Italy.\n</think>\n\nRome.",
    }
    conversations = [
        ("system_user", [system, user1], {}),
        ("user_only", [user1], {}),
        ("multi_turn", [system, user1, assistant1, user2], {}),
        ("multi_turn_thinking_last", [system, user1, assistant1, user2, thinking], {}),
        ("multi_turn_thinking_earlier", [user1, thinking, user2], {}),
        ("enable_thinking_false", [system, user1], {"enable_thinking": False}),
        (
            "tool_results",
            [
                user1,
                {"role": "assistant", "content": "Let me look it up."},
                {"role": "tool", "content": "{\"capital\": \"Paris\"}"},
                {"role": "tool", "content": "{\"population\": 2102650}"},
                user2,
            ],
            {},
        ),
        (
            "unicode_and_markup",
            [
                {
                    "role": "user",
                    "content": "Größe 東京 🙂 {{ 7 * 7 }} {% if x %}y{% endif %} <|im_end|>\n  two \x07\x1b[0m\u00a0",
                }
            ],
            {},
        ),
    ]
    out = []
    for name, messages, extra in conversations:
        for agp in (True, False):
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=agp, **extra
            )
            ids = tokenizer.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=agp, return_dict=False, **extra
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            out.append(
                {
                    "name": name + ("_gen" if agp else "_nogen"),
                    "messages": messages,
                    "add_generation_prompt": agp,
                    "variables": extra,
                    "expected": text,
                    "ids": list(ids),
                }
            )
    return out


# A Llama-2-style template written for these tests: bos_token, [INST] blocks, a system prompt
# folded into the first user turn, and raise_exception when roles do not alternate.
LLAMA_STYLE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)


def llama_cases():
    system = {"role": "system", "content": "Be brief."}
    user1 = {"role": "user", "content": "  Hello there  "}
    assistant1 = {"role": "assistant", "content": "Hi! How can I help?"}
    user2 = {"role": "user", "content": "Tell me a joke."}
    conversations = [
        ("user_only", [user1]),
        ("system_user", [system, user1]),
        ("multi_turn", [system, user1, assistant1, user2]),
    ]
    out = []
    for name, messages in conversations:
        rendered, _ = render_jinja_template(
            conversations=[messages],
            chat_template=LLAMA_STYLE,
            add_generation_prompt=True,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
        )
        out.append({"name": name, "messages": messages, "expected": rendered[0]})
    try:
        render_jinja_template(
            conversations=[[user1, user2]],
            chat_template=LLAMA_STYLE,
            add_generation_prompt=True,
            bos_token="<s>",
            eos_token="</s>",
        )
        raise SystemExit("expected raise_exception")
    except jinja2.exceptions.TemplateError as e:
        error = str(e)
    return {
        "tokenizer_config": {
            "chat_template": LLAMA_STYLE,
            "bos_token": {"content": "<s>", "lstrip": False, "normalized": False},
            "eos_token": "</s>",
            "unk_token": "<unk>",
        },
        "cases": out,
        "not_alternating": {"messages": [user1, user2], "error": error},
    }


XS = [1, 2, 3]
S = "Hello, World"
D = {"k": "v", "n": 1, "nested": {"a": [1, 2]}}
MESSAGES = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
]
VARS = {"xs": XS, "s": S, "d": D, "messages": MESSAGES, "empty": [], "nothing": None, "tools": None}

FEATURES = [
    # whitespace control as transformers configures it: trim_blocks and lstrip_blocks
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter\n"),
    ("ws_lstrip_blocks", "  {% if true %}\n  yes\n    {% endif %}\nend"),
    ("ws_minus", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e"),
    ("ws_expressions_keep_newline", "{{ 'x' }}\n{{ 'y' }}\n\nz"),
    ("ws_comment", "a {# note #}\nb\n  {# own line #}\nc"),
    ("ws_set_lines", "{% set a = 1 %}\n{% set b = 2 %}\n{{ a }}{{ b }}\n"),
    ("ws_nested_loops", "{% for x in xs %}\n  {% for y in xs %}\n    {{ x * y }}\n  {% endfor %}\n{% endfor %}\n"),
    ("ws_dash_after_text", "line\n    {%- if true %}\nX\n{%- endif %}\n"),
    ("ws_crlf_text", "a\r\nb{% if true %}\r\nc{% endif %}"),
    ("ws_lstrip_only_at_line_start", "a {% if true %}b{% endif %} c\n\t{% if true %}d{% endif %}\n  x  {{ 'y' }}  {% if true %}z{% endif %}"),
    ("ws_plus_disables_lstrip", "  {%+ if true %}x{% endif %}|\n    {%+ if true %}y\n    {% endif %}"),
    ("ws_raw_keeps_body", "  {% raw %}\n  {% if %} {{ x }}\n  {% endraw %}\nafter"),
    ("ws_tag_with_close_in_string", "  {% if '%}' in s %}no{% else %}{{ '}}' }}{% endif %}\nend"),
    ("ws_trailing_newline_kept_inside", "a\n\n"),
    # literals and operators
    ("string_escapes", "{{ 'a\\tb' }}|{{ \"q\\\"t\" }}|{{ 'it\\'s' }}|{{ 'caf\\u00e9' }}|{{ 'x\\x41' }}|{{ 'back\\\\slash' }}|{{ 'keep\\d' }}"),
    ("arithmetic", "{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 4 - 3 }}"),
    ("arithmetic_no_spaces", "{{ 1+2 }} {{ xs|length-1 }} {{ xs[1]+1 }} {{ 4-1 }}"),
    ("division", "{{ 7 / 2 }} {{ 1.5 + 1 }} {{ -7 // 2 }} {{ -7 % 3 }}"),
    ("concat", "{{ 'a' ~ 1 ~ 'b' }} {{ 'x' + 'y' }} {{ s ~ '!' }}"),
    ("repeat", "{{ '-' * 3 }}|{{ 2 * 'ab' }}|{{ 'x' * 0 }}|{{ 3 * 4 }}|{{ 1.5 * 2 }}"),
    ("comparisons", "{{ (1 < 2)|tojson }} {{ (2 <= 1)|tojson }} {{ ('a' == 'a')|tojson }} {{ (1 != 1)|tojson }}"),
    ("logic", "{{ (true and not false)|tojson }} {{ (false or xs)|tojson }} {{ (nothing or 'fallback') }} {{ (not empty)|tojson }}"),
    ("not_precedence", "{{ (not nope is defined)|tojson }} {{ (not 1 == 2)|tojson }} {{ (not 'x' in s)|tojson }} {{ (not xs and true)|tojson }} {{ (not not xs)|tojson }} {{ (xs is not none and not empty)|tojson }} {{ (not d.k is string)|tojson }}"),
    ("ternary", "{{ 'yes' if xs else 'no' }} {{ 'yes' if empty else 'no' }} {{ 'x' if false }}|"),
    ("membership", "{{ ('ell' in s)|tojson }} {{ (2 in xs)|tojson }} {{ ('k' in d)|tojson }} {{ ('z' not in s)|tojson }} {{ (5 not in xs)|tojson }}"),
    ("dict_literal", "{% set m = {'a': 1, 'b': [1, 2]} %}{{ m.a }}{{ m['b'][1] }}{{ m|length }}"),
    ("list_literal", "{% set l = [1, 'two', 3] %}{{ l[1] }}{{ l|length }}{{ l[-1] }}"),
    ("print_list", "{{ xs }} {{ ['a', 'b'] }} {{ [] }}"),
    ("print_number", "{{ 3 }} {{ 2.5 }} {{ d.n }} {{ 1.0 }}"),
    ("print_floats", "{{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -2.5 }}"),
    ("tojson_floats", "{{ [0.1, 1e20, 1.5e-7, 1e16, 1e15, -0.0, 2.5e-5, 100.0, 3.14159] | tojson }}"),
    # subscripts and slices
    ("index_negative", "{{ xs[-1] }} {{ xs[0] }} {{ s[-1] }} {{ s[0] }} {{ messages[-1].content }}"),
    ("slices", "{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::2] }}|{{ xs[-2:] }}|{{ xs[1:2] }}|{{ xs[5:] }}|{{ xs[:] }}"),
    ("slice_reverse", "{% for m in messages[::-1] %}{{ m.role }},{% endfor %}|{{ xs[::-1] }}|{{ s[::-1] }}"),
    ("string_slices", "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::2] }}|{{ s[-5:] }}|{{ s[7:12] }}|{{ s[3:1] }}|{{ s[::-2] }}"),
    ("slice_expressions", "{% set n = 1 %}{{ xs[n:] }}{{ xs[:n + 1] }}{{ messages[1:][0].role }}{{ xs[-n:][0] }}"),
    ("attr_and_item", "{{ d.k }} {{ d['k'] }} {{ messages[0].role }} {{ messages[0]['content'] }} {{ d.nested.a[1] }}"),
    ("undefined_attr", "[{{ d.missing }}]{{ (d.missing is defined)|tojson }} {{ (nope is defined)|tojson }} [{{ nope }}]"),
    # string methods
    ("str_startswith_endswith", "{{ s.startswith('Hell')|tojson }} {{ s.startswith('World')|tojson }} {{ s.endswith('World')|tojson }} {{ s.startswith(('x', 'He'))|tojson }}"),
    ("str_strip", "[{{ '  a b \\n'.strip() }}][{{ '\\n\\na\\n'.strip('\\n') }}][{{ 'xxaxx'.lstrip('x') }}][{{ 'xxaxx'.rstrip('x') }}][{{ '  a '.lstrip() }}][{{ '  a '.rstrip() }}]"),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a.b.c'.split('.', 1) }} {{ 'a|b'.split('|')[-1] }} {{ 'x</think>y'.split('</think>')[0] }}"),
    ("str_rsplit", "{{ 'a.b.c'.rsplit('.', 1) }} {{ 'a b'.rsplit() }}"),
    ("str_split_edges", "{{ '  a b  '.split(none, 0) }} {{ 'a b  c  '.split(none, 1) }} {{ '  a b  c'.rsplit(none, 1) }} {{ '  a b  c  '.rsplit(none, 0) }} {{ ',a,'.split(',') }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a\u00a0b\u3000c'.split() }} {{ 'a,b,c'.split(',', -1) }}"),
    ("str_case", "{{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}"),
    ("str_replace_find", "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ s.find('o') }} {{ s.find('z') }} {{ s.count('l') }}"),
    ("str_join", "{{ ', '.join(['a', 'b']) }} {{ '-'.join(s.split(', ')) }}"),
    ("str_splitlines", "{{ 'a\\nb\\r\\nc\\n'.splitlines() }}"),
    ("str_predicates", "{{ '123'.isdigit()|tojson }} {{ 'a1'.isalnum()|tojson }} {{ ' \\n'.isspace()|tojson }} {{ 'Ab'.isupper()|tojson }} {{ 'ab'.islower()|tojson }}"),
    # dict methods
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|{{ d.get('k') }}|{{ d.get('missing', 'def') }}|{{ d.get('missing') is none }}"),
    ("dict_iteration", "{% for k in d %}{{ k }},{% endfor %}"),
    # loops
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first|tojson }}{{ loop.last|tojson }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}"),
    ("loop_break_continue", "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}"),
    ("loop_else", "{% for x in empty %}{{ x }}{% else %}none{% endfor %}|{% for x in xs %}{{ x }}{% else %}none{% endfor %}"),
    ("loop_filter_else", "{% for x in xs if x > 5 %}{{ x }}{% else %}none{% endfor %}|{% for x in xs if x > 1 %}{{ x }}{{ loop.last|tojson }}{% else %}none{% endfor %}"),
    ("loop_nested_break", "{% for x in xs %}{% for y in xs %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }} {% endfor %}{% endfor %}"),
    ("loop_filter", "{% for m in messages if m.role == 'user' %}{{ m.content }}{{ loop.index }},{% endfor %}"),
    ("loop_scope", "{% set x = 'outer' %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}"),
    ("loop_nested_index", "{% for m in messages %}{% if not loop.first %}{{ messages[loop.index0 - 1].role }}>{% endif %}{{ m.role }} {% endfor %}"),
    ("loop_over_string", "{% for c in 'h\u00e9🙂' %}[{{ c }}]{{ loop.length }}{% endfor %}"),
    ("loop_unpack_pairs", "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }};{% endfor %}"),
    ("namespace", "{% set ns = namespace(found=false, total=0, last=none) %}{% for x in xs %}{% if x > 1 %}{% set ns.found = true %}{% set ns.total = ns.total + x %}{% set ns.last = x %}{% endif %}{% endfor %}{{ ns.found|tojson }} {{ ns.total }} {{ ns.last }}"),
    ("range", "{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 4) %}{{ i }}{% endfor %}|{{ range(2)|list }}|{{ range(10, 0, -3)|list }}|{{ range(0, 10, 4)|list }}|{{ range(5, 2)|list }}|{{ range(-2)|list }}|{{ range(xs|length - 1, -1, -1)|list }}"),
    # tests
    ("tests", "{{ (s is string)|tojson }} {{ (xs is string)|tojson }} {{ (d is mapping)|tojson }} {{ (xs is mapping)|tojson }} {{ (xs is sequence)|tojson }} {{ (xs is iterable)|tojson }} {{ (3 is number)|tojson }} {{ (nothing is none)|tojson }} {{ (xs is not none)|tojson }}"),
    ("tests_bool", "{{ (false is false)|tojson }} {{ (true is true)|tojson }} {{ (nothing is false)|tojson }} {{ (0 is false)|tojson }} {{ (true is boolean)|tojson }} {{ (3 is integer)|tojson }} {{ (4 is even)|tojson }} {{ (3 is odd)|tojson }} {{ (9 is divisibleby(3))|tojson }}"),
    ("filters_then_tests", "{{ (xs|length is number)|tojson }} {{ (xs|first is odd)|tojson }} {{ (s|lower is string)|tojson }} {{ (xs|length is not even)|tojson }} {{ (6 is divisibleby(3))|tojson }} {{ (6 is divisibleby 4)|tojson }} {{ (nothing is none)|tojson }} {{ (2 is in xs)|tojson }}"),
    ("tests_defined", "{{ (xs is defined)|tojson }} {{ (zz is defined)|tojson }} {{ (zz is undefined)|tojson }} {{ (d.k is defined)|tojson }}"),
    ("functions_defined", "{{ (strftime_now is defined)|tojson }} {{ (raise_exception is defined)|tojson }} {{ (namespace is defined)|tojson }} {{ (tools is none)|tojson }}"),
    ("print_booleans", "{{ true }} {{ false }} {{ 1 == 1 }} {{ xs is string }}"),
    # filters
    ("filters_basic", "{{ xs|length }} {{ s|length }} {{ xs|count }} {{ '  a  '|trim }} {{ xs|join(',') }} {{ xs|first }} {{ xs|last }} {{ xs|sum }} {{ xs|max }} {{ xs|min }}"),
    ("filters_max_min", "{{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'c']|min }} {{ ['b', 'A', 'c']|max(case_sensitive=true) }} {{ (messages|max(attribute='content')).content }} {{ [2.5, 1, 3]|min }}"),
    ("filters_strings", "{{ s|upper }} {{ s|lower }} {{ 'ab cd'|title }} {{ 'ab'|capitalize }} {{ s|replace('o', '0') }} {{ 3|string }} {{ '7'|int + 1 }} {{ -3|abs }} {{ 2.567|round(1) }}"),
    ("filters_attr", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}"),
    ("filters_lists", "{{ xs|reverse|list }} {{ [3, 1, 2]|sort }} {{ [1, 1, 2]|unique|list }} {{ xs|map('string')|join('-') }} {{ messages|map(attribute='role')|first }}"),
    ("filters_default", "{{ nope|default('d') }} {{ ''|default('e', true) }} {{ s|d('x') }} {{ d.missing|default('m') }}"),
    ("filters_items", "{% for k, v in d|dictsort %}{{ k }}:{{ v }};{% endfor %}|{% for k, v in {'b': 1, 'a': 2}|items %}{{ k }}{{ v }}{% endfor %}"),
    ("filters_unicode_text", "[{{ '\u00a0x\u3000'|trim }}][{{ '\x01x\x01'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ 'istanbul'|upper }}][{{ 'ǆemal ǉ'|title }}][{{ 'ǆx'|capitalize }}][{{ 'ΣΑΣ'|lower }}]"),
    ("filters_round", "{{ 1.5|round }} {{ 2.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ -2.1|round(method='floor') }} {{ 1234.5678|round(-2) }}"),
    ("filter_indent", "{{ 'a\\nb\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}"),
    ("tojson", "{{ d|tojson }} {{ xs|tojson }} {{ 'caf\u00e9 \"q\" <b> & \\\\'|tojson }} {{ nothing|tojson }} {{ 1.5|tojson }} {{ {'z': true, 'a': none}|tojson }}"),
    ("tojson_indent", "{{ d|tojson(indent=2) }}|{{ [1, [2, {}], []]|tojson(indent=4) }}|{{ {}|tojson(indent=2) }}"),
    ("tojson_options", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ xs|tojson(separators=(',', ':')) }}"),
    ("tojson_unicode", "{{ ['東京', '🙂', '\\u0001', '\\n\\t'] |tojson }}"),
    # macros, set blocks, comments, raw
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', punct='?') }}"),
    ("macro_recursive", "{% macro down(n) %}{% if n > 0 %}{{ n }}{{ down(n - 1) }}{% endif %}{% endmacro %}{{ down(3) }}"),
    ("call_block", "{% macro box(title) %}[{{ title }}: {{ caller() }}]{% endmacro %}{% call box('t') %}body {{ xs|length }}{% endcall %}"),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("set_block", "{% set b %}in {{ 1 }}{% endset %}[{{ b }}]"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"),
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}"),
    ("none_literals", "{{ (none is none)|tojson }} {{ (None is none)|tojson }} {{ True|tojson }} {{ False|tojson }}"),
]

ERRORS = [
    ("raise_exception", "before{{ raise_exception('Conversation roles must alternate') }}after"),
]


def feature_cases():
    cases = []
    for name, template in FEATURES:
        expected = _compile_jinja_template(template).render(**VARS)
        cases.append({"name": name, "template": template, "expected": expected})
    errors = []
    for name, template in ERRORS:
        try:
            _compile_jinja_template(template).render(**VARS)
            raise SystemExit(name + ": expected an error")
        except jinja2.exceptions.TemplateError as e:
            errors.append({"name": name, "template": template, "error": str(e)})
    return {"variables": VARS, "cases": cases, "errors": errors}


# Templates written for these tests in the style of published chat templates (Llama 3 with tools
# and a date, Gemma, DeepSeek-R1, Mistral, Phi-3): the idioms real templates use, in one place.
REALISTIC = {
    "llama3_like": {
        "special_tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "template": """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "01 Jan 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You have access to these functions:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role == 'ipython' or message.role == 'tool' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {{- message.content }}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
""",
    },
    "gemma_like": {
        "special_tokens": {"bos_token": "<bos>", "eos_token": "<eos>"},
        "template": """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
""",
    },
    "deepseek_like": {
        "special_tokens": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
        "template": "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
        "{% set ns = namespace(is_first=false, system_prompt='', is_first_sp=true) %}"
        "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"
        "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}"
        "{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}"
        "{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
        "{%- for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}"
        "{%- if message['role'] == 'assistant' %}{% set content = message['content'] %}"
        "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
        "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}"
        "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\n'}}{% endif %}",
    },
    "mistral_like": {
        "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"},
        "template": """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content']|trim + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
""",
    },
    "phi_like": {
        "special_tokens": {"eos_token": "<|endoftext|>"},
        "template": "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
        "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
        "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    },
}

FIXED_NOW = datetime.datetime(2025, 3, 7, 14, 5, 9, 123456)


def realistic_cases():
    system = {"role": "system", "content": "  You are a careful assistant.  "}
    user1 = {"role": "user", "content": " What is 2 + 2? "}
    assistant1 = {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\n4"}
    user2 = {"role": "user", "content": "And 3 + 3?"}
    tool = {"role": "tool", "content": "{\"result\": 6}"}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds two numbers, e.g. 2 + 2 = 4 (café)",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "integer", "minimum": -1.5}},
                    "required": ["a", "b"],
                },
            },
        }
    ]
    conversations = [
        ("user", [user1], True, {}),
        ("system_user", [system, user1], True, {}),
        ("multi_turn", [system, user1, assistant1, user2], True, {}),
        ("multi_turn_nogen", [system, user1, assistant1, user2], False, {}),
        ("two_users", [user1, user2], True, {}),
        ("tools", [system, user1, assistant1, tool, user2], True, {"tools": tools}),
        ("date_given", [user1], True, {"date_string": "24 Dec 2030"}),
    ]
    out = {}
    for name, spec in REALISTIC.items():
        compiled = _compile_jinja_template(spec["template"])
        cases = []
        for conv_name, messages, agp, extra in conversations:
            variables = {
                "messages": messages,
                "tools": None,
                "documents": None,
                "add_generation_prompt": agp,
                "strftime_now": lambda f: FIXED_NOW.strftime(f),
                **spec["special_tokens"],
                **extra,
            }
            case = {"name": conv_name, "messages": messages, "add_generation_prompt": agp, "variables": extra}
            try:
                case["expected"] = compiled.render(**variables)
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
            cases.append(case)
        out[name] = {"template": spec["template"], "special_tokens": spec["special_tokens"], "cases": cases}
    return {"now": "2025-03-07T14:05:09.123456", "templates": out}


# The plain template of ChatTemplate.PLAIN_TEMPLATE, rendered by Jinja to show it means what its
# documentation says.
PLAIN = (
    "{{ bos_token if bos_token is defined else '' }}"
    "{% for message in messages %}"
    "<|{{ message.role }}|>\n{{ message.content }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def plain_cases():
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!\nHow can I help?"},
        {"role": "user", "content": ""},
    ]
    cases = []
    for bos in (None, "<s>"):
        for agp in (True, False):
            rendered, _ = render_jinja_template(
                conversations=[messages],
                chat_template=PLAIN,
                add_generation_prompt=agp,
                **({"bos_token": bos} if bos else {}),
            )
            cases.append({"bos_token": bos, "add_generation_prompt": agp, "expected": rendered[0]})
    return {"template": PLAIN, "messages": messages, "cases": cases}


def strftime_cases():
    instants = [
        datetime.datetime(2025, 3, 7, 14, 5, 9, 123000),
        datetime.datetime(2024, 1, 1, 0, 0, 0),  # a Monday
        datetime.datetime(2023, 1, 1, 23, 59, 59),  # a Sunday
        datetime.datetime(2024, 12, 31, 12, 0, 1),  # day 366
    ]
    formats = [
        "%d %b %Y", "%Y-%m-%d", "%H:%M:%S", "%A, %B %d, %Y", "%a %I:%M %p", "%j %y %%", "%f",
        "%c", "%e|%D|%T|%F|%R|%h", "%u %w %U %W", "[%z%Z]",
    ]
    return {
        "cases": [
            {"instant": t.isoformat(timespec="microseconds"), "format": f, "expected": t.strftime(f)}
            for t in instants
            for f in formats
        ]
    }


def main():
    tokenizer_dir, out_dir = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    versions = {"transformers": transformers.__version__, "jinja2": jinja2.__version__}
    documents = {
        "qwen3-references.json": {"versions": versions, "cases": qwen3_cases(tokenizer)},
        "llama-style-references.json": {"versions": versions, **llama_cases()},
        "jinja-features.json": {"versions": versions, **feature_cases()},
        "strftime.json": {"versions": versions, **strftime_cases()},
        "realistic-templates.json": {"versions": versions, **realistic_cases()},
        "plain-template.json": {"versions": versions, **plain_cases()},
    }
    for name, document in documents.items():
        with open(f"{out_dir}/{name}", "w", encoding="utf-8") as f:
            json.dump(document, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
