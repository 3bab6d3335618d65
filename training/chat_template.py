"""The one chat format every Sidekick base model speaks: ChatML turns with Qwen2.5-style tool calls.

Plain chat renders byte for byte like SmolLM2-Instruct's own template (``<|im_start|>role\\n…<|im_end|>\\n``,
with its default system prompt when the first message is not a system message), so SmolLM2 keeps
answering as it was trained to. On top of that, tools and tool calls render as in Qwen2.5:

- ``tools`` (OpenAI tool schemas) are listed, one JSON object a line, inside ``<tools></tools>`` in
  the system turn, after the system text and a ``# Tools`` heading;
- an assistant message's ``tool_calls`` (OpenAI shape ``{"type": "function", "function": {"name",
  "arguments"}}`` or the bare ``{"name", "arguments"}``; ``arguments`` a dict or a JSON string)
  render after its content, one per block, each as
  ``<tool_call>\\n{"name": "search", "arguments": {"query": "red boots"}}\\n</tool_call>``,
  blocks separated by ``\\n`` (and from non-empty content by ``\\n``);
- ``tool`` messages (results) render inside a user turn, each as
  ``\\n<tool_response>\\n…\\n</tool_response>``; consecutive results share one user turn.

Assistant turns (content, tool calls and the closing ``<|im_end|>``) sit inside
``{% generation %}`` blocks, so ``apply_chat_template(..., return_assistant_tokens_mask=True,
return_dict=True)`` yields the loss mask for SFT on assistant tokens only.
"""

from __future__ import annotations

import json

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOLS_START, TOOLS_END = "<tools>", "</tools>"
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_START, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
TOOL_MARKERS = (TOOLS_START, TOOLS_END, TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END)

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""SmolLM2-Instruct's default system prompt (used when a conversation brings none)."""

# Every tag strips the template's own whitespace ({%- -%}); all output comes from string literals,
# so the rendered text is exactly what the literals say (``\n`` is unescaped by Jinja).
_TEMPLATE = r"""
{%- set default_system = __DEFAULT_SYSTEM__ -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content -%}
  {%- set rest = messages[1:] -%}
{%- else -%}
  {%- set system = default_system if messages else none -%}
  {%- set rest = messages -%}
{%- endif -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if system -%}{{- system + '\n\n' -}}{%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
  {{- '\n</tool_call><|im_end|>\n' -}}
{%- elif system is not none -%}
  {{- '<|im_start|>system\n' + system + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in rest -%}
  {%- if message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- generation -%}
      {%- if message.content -%}{{- message.content -}}{%- endif -%}
      {%- for call in message.tool_calls or [] -%}
        {%- if call.function is defined -%}{%- set call = call.function -%}{%- endif -%}
        {%- if message.content or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {{- '<tool_call>\n{"name": ' + (call.name | tojson) + ', "arguments": ' -}}
        {%- if call.arguments is string -%}{{- call.arguments -}}
        {%- else -%}{{- call.arguments | tojson -}}{%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
      {{- '<|im_end|>' -}}
    {%- endgeneration -%}
    {{- '\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or rest[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' -}}
    {%- if message.content is string -%}{{- message.content -}}{%- else -%}{{- message.content | tojson -}}{%- endif -%}
    {{- '\n</tool_response>' -}}
    {%- if loop.last or rest[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


def chat_template(default_system: str | None = None) -> str:
    """The Jinja chat template; ``default_system`` is the system text used when a conversation has none.

    ``None`` renders no system turn unless the conversation brings one (or ``tools`` are given).
    """
    literal = "none" if default_system is None else json.dumps(default_system)
    return _TEMPLATE.strip().replace("__DEFAULT_SYSTEM__", literal)
