"""The tiny policy's tokenizer and chat template (composer_prime/local/policy.py): what the Qwen3 renderer renders, and
the sampled tokens of each assistant turn."""

from __future__ import annotations

import pytest

from composer_prime.local import policy

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "create",
            "description": "Create a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "Finish.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
        },
    },
]


CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Restore `double` in calc.py.\n\nRun the tests."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [policy.tool_call("create", path="calc.py", content="def double(x):\n    return x * 2\n")],
    },
    {"role": "tool", "tool_call_id": "call_create", "content": "Created calc.py (2 lines)."},
    {"role": "user", "content": "Summarise."},
    {"role": "assistant", "content": "Done: restored double.\n\nNext: finish."},
]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [policy.render_text(CONVERSATION, TOOLS, generation=False)] * 3
    return policy.build_tokenizer(corpus, 600)


def test_chat_template_renders_what_the_qwen3_renderer_renders(tokenizer):
    from renderers import Qwen3RendererConfig, create_renderer

    renderer = create_renderer(tokenizer, Qwen3RendererConfig(enable_thinking=False))
    for end in (2, 4, 6):
        for generation in (False, True):
            messages = CONVERSATION[:end]
            expected = renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=generation)
            got = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=generation)["input_ids"]
            assert list(got) == expected, (end, generation)
    text = tokenizer.decode(renderer.render_ids(CONVERSATION[:3], tools=TOOLS))
    assert '<tool_call>\n{"name": "create", "arguments": {"path": "calc.py"' in text
    assert text.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools\n")
    # every special and tool token is one token, so the renderer's lookups and stop ids work
    for token in policy.SPECIAL_TOKENS + policy.TOOL_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1


def test_assistant_turns_span_the_sampled_tokens(tokenizer):
    from renderers import Qwen3RendererConfig, create_renderer

    renderer = create_renderer(tokenizer, Qwen3RendererConfig(enable_thinking=False))
    first, second = policy.assistant_turns(renderer, CONVERSATION, TOOLS)
    assert tokenizer.decode(first.token_ids[first.start : first.end]).startswith('<tool_call>\n{"name": "create"')
    assert tokenizer.decode(first.token_ids[first.end - 1 : first.end]) == "<|im_end|>"
    assert (
        tokenizer.decode(second.token_ids[second.start : second.end])
        == "Done: restored double.\n\nNext: finish.<|im_end|>"
    )
