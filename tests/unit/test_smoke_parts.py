"""The smoke run's parts on their own: chat template against the Qwen3 renderer, the rule-based teachers."""

from __future__ import annotations

import pytest

from composer_prime.local import policy
from composer_prime.smoke.referees import FINISH_HINT, FIX_HINT, TEST_HINT, verdict

TOOLS = [
    {"type": "function", "function": {"name": "create", "description": "Create a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}}},
    {"type": "function", "function": {"name": "finish", "description": "Finish.",
     "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}},
]  # fmt: skip

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


def teacher_request(task: str, before: str, step: str, answered: str) -> str:
    return (f"# Task\n{task}\n\n# Trajectory before the step\n{before}\n\n# The step to judge\n{step}\n\n"
            f"# What the tools answered\n{answered}")  # fmt: skip


def test_rule_teachers_score_errors_writes_and_unchecked_finishes():
    task = "Restore it. Run the visible tests with `python -m pytest`."
    error = teacher_request(task, "(this is the first step)", '[tool call] finish({"path": 1})', "Error: invalid")
    assert verdict("checker", error) == verdict("skeptic", error) == {"score": -1.0, "hint": FIX_HINT}
    write = teacher_request(task, "(this is the first step)", '[tool call] create({"path": "a.py"})', "Created a.py")
    assert verdict("checker", write) == {"score": 0.5, "hint": TEST_HINT}
    assert verdict("skeptic", write) == {"score": 0.25, "hint": None}
    # the task text mentions pytest; only a test run in the trajectory counts as checked
    finish = teacher_request(task, "<assistant>\n[tool call] create(...)\n</assistant>", "[tool call] finish({})",
                             "(no tool output: the step ended the episode)")  # fmt: skip
    assert verdict("checker", finish) == {"score": 0.5, "hint": None}
    assert verdict("skeptic", finish) == {"score": -0.5, "hint": FINISH_HINT}
    tested = teacher_request(task, '[tool call] bash({"command": "python -m pytest"})', "[tool call] finish({})", "")
    assert verdict("skeptic", tested) == {"score": 0.0, "hint": None}
