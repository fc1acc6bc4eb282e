"""The smoke run's policy: a tiny Qwen3-architecture causal LM with a locally built tokenizer, as an HF model dir.

Nothing is downloaded. The tokenizer is a byte-level BPE trained with `tokenizers` on the text the run will show
the model (the agent's prompts and tool specs, the tasks, the bundled repository's files), plus Qwen3's special
and tool tokens, so PyPI's `renderers` Qwen3 renderer (what PRIME-RL's train client renders with) works on it
unchanged. Its chat template is a Jinja mirror of that renderer with thinking disabled: system + tools JSON,
`<tool_call>{"name": ..., "arguments": ...}</tool_call>` in assistant turns, `<tool_response>` blocks in a user
turn. The model is `Qwen3ForCausalLM` from a `Qwen3Config` with random weights under a fixed seed, saved in bf16
(what PRIME-RL broadcasts); the trainer keeps its own fp32 copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Control tokens (special: skipped when decoding with `skip_special_tokens`)."""

TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Qwen3's added (non-special) tokens that the Qwen3 renderer looks up by name."""

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen2/Qwen3's pre-tokenizer split (newline runs stay whole, so a turn renders the same alone or in context)."""

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "{{ tools_header }}{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '' }}{{ tools_footer }}<|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role in ('system', 'user') %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n<think>\n\n</think>\n\n"
    "{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}"
    "{% if not loop.first or message.content %}{{ '\\n' }}{% endif %}"
    "{% set args = call.function.arguments %}"
    '<tool_call>\n{"name": "{{ call.function.name }}", "arguments": '
    "{{ args if args is string else args | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}"
)
"""Jinja mirror of `renderers.Qwen3Renderer(enable_thinking=False)` for system, user, assistant (text and tool
calls) and tool messages; `tools_header`/`tools_footer` are filled in when the tokenizer is saved."""


class PolicyShape(BaseModel):
    """Size of the tiny policy. The defaults train and sample fast on two CPU cores."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(3000, ge=400)
    """BPE vocabulary including special tokens (the corpus is small: a larger vocabulary only adds merges)."""
    hidden_size: int = Field(96, ge=16)
    """Model width."""
    layers: int = Field(2, ge=1)
    """Decoder layers."""
    heads: int = Field(4, ge=1)
    """Attention heads (2 key/value heads: grouped-query attention as Qwen3 has)."""
    head_dim: int = 32
    """Width of one attention head (Qwen3 sets it apart from `hidden_size / heads`). vLLM's CPU attention kernels
    take only some widths: 32 works, 24 is refused ("Unsupported CPU attention configuration")."""
    max_len: int = Field(4096, ge=512)
    """Context window (`max_position_embeddings`, reported as `max_model_len` by the policy server)."""
    seed: int = 0
    """Seed of the random initialisation."""


def chat_template() -> str:
    """The template with the tools header and footer inlined (the saved tokenizer carries no extra variables)."""
    return CHAT_TEMPLATE.replace("{{ tools_header }}", TOOLS_HEADER).replace("{{ tools_footer }}", TOOLS_FOOTER)


def render_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, generation: bool) -> str:
    """The chat template applied as text (used to build the tokenizer's training corpus before a tokenizer exists)."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders chat templates
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    return env.from_string(chat_template()).render(messages=messages, tools=tools, add_generation_prompt=generation)


def build_tokenizer(corpus: list[str], vocab_size: int) -> Any:
    """A byte-level BPE over `corpus` with Qwen3's special and tool tokens, as a `PreTrainedTokenizerFast`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + TOOL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=1 << 20,
    )
    tokenizer.chat_template = chat_template()
    return tokenizer


def build_model(tokenizer: Any, shape: PolicyShape) -> Any:
    """`Qwen3ForCausalLM` with random weights under `shape.seed`, in fp32."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.hidden_size * 3,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=max(1, shape.heads // 2),
        head_dim=shape.head_dim,
        max_position_embeddings=shape.max_len,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(shape.seed)
    return Qwen3ForCausalLM(config).float()


def save_policy(model: Any, tokenizer: Any, directory: Path) -> None:
    """An ordinary HF model dir (config, bf16 safetensors, tokenizer with its chat template)."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    directory.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(directory, safe_serialization=True)
    model.float()
    tokenizer.save_pretrained(directory)


@dataclass
class Turn:
    """One assistant turn as a training example: the token ids and where the sampled tokens start and end."""

    token_ids: list[int]
    start: int
    end: int


def assistant_turns(renderer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[Turn]:
    """Per assistant message, the conversation up to its end and the span the model samples (Qwen3 renderer)."""
    turns = []
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = renderer.render_ids(messages[:k], tools=tools, add_generation_prompt=True)
        full = renderer.render(messages[: k + 1], tools=tools)
        ids = full.token_ids
        if ids[: len(prompt)] != prompt:
            raise ValueError(f"the render of assistant turn {k} does not extend its prompt; check the tokenizer")
        end = max(i for i, s in enumerate(full.sampled_mask) if s) + 1
        turns.append(Turn(ids[:end], len(prompt), end))
    return turns


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    """An OpenAI-style tool call with JSON-encoded arguments."""
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
