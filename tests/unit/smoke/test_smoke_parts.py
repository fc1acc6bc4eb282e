"""The smoke's rule-based teachers on their own (`composer_prime/smoke/referees.py`)."""

from __future__ import annotations

from composer_prime.smoke.referees import FINISH_HINT, FIX_HINT, TEST_HINT, verdict


def teacher_request(task: str, before: str, step: str, answered: str) -> str:
    return (
        f"# Task\n{task}\n\n# Trajectory before the step\n{before}\n\n# The step to judge\n{step}\n\n"
        f"# What the tools answered\n{answered}"
    )


def test_rule_teachers_score_errors_writes_and_unchecked_finishes():
    task = "Restore it. Run the visible tests with `python -m pytest`."
    error = teacher_request(task, "(this is the first step)", '[tool call] finish({"path": 1})', "Error: invalid")
    assert verdict("checker", error) == verdict("skeptic", error) == {"score": -1.0, "hint": FIX_HINT}
    write = teacher_request(task, "(this is the first step)", '[tool call] create({"path": "a.py"})', "Created a.py")
    assert verdict("checker", write) == {"score": 0.5, "hint": TEST_HINT}
    assert verdict("skeptic", write) == {"score": 0.25, "hint": None}
    # the task text mentions pytest; only a test run in the trajectory counts as checked
    finish = teacher_request(
        task,
        "<assistant>\n[tool call] create(...)\n</assistant>",
        "[tool call] finish({})",
        "(no tool output: the step ended the episode)",
    )
    assert verdict("checker", finish) == {"score": 0.5, "hint": None}
    assert verdict("skeptic", finish) == {"score": -0.5, "hint": FINISH_HINT}
    tested = teacher_request(task, '[tool call] bash({"command": "python -m pytest"})', "[tool call] finish({})", "")
    assert verdict("skeptic", tested) == {"score": 0.0, "hint": None}
