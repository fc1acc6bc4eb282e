"""composer_prime.evidence on hand-built traces in composer-agent's tool-message formats."""

from composer_prime.evidence import DETAIL_MAX_CHARS, steps, trim
from tests.support.traces import SYSTEM, TASK, assistant, build_trace, five_step_trace, tool, tool_call


def test_tool_error_test_failure_and_edit_attribution():
    trace = five_step_trace()
    found = steps(trace)
    assert [s.node for s in found] == [2, 4, 6, 8, 10]
    assert [s.turn for s in found] == [0, 1, 2, 3, 4]
    assert [s.tools for s in found] == [("view",), ("str_replace",), ("bash",), ("bash",), ("finish",)]
    assert [[f.kind for f in s.failures] for s in found] == [
        ["tool_error"],
        ["edit_then_failure"],  # the edit preceded the failed run; `ls` in between is neither edit nor test
        [],
        ["test_failure"],
        [],
    ]
    assert found[0].failures[0].detail == "Error: missing.py does not exist."
    assert "test_chunk" in found[1].failures[0].detail
    assert [s.is_final for s in found] == [False, False, False, False, True]
    assert not any(s.is_summary for s in found)
    assert found[0].mean_logprob == -0.5


def test_passing_run_clears_pending_edits_and_shell_errors_need_a_traceback():
    trace = build_trace(
        [
            [
                SYSTEM,
                TASK,
                assistant("", tool_call("a", "create", path="n.py", file_text="x = 1\n")),
                tool("a", "Created n.py."),
                assistant("", tool_call("b", "bash", command="pytest -q")),
                tool("b", "3 passed\n[exit code 0]"),
                assistant("", tool_call("c", "bash", command="pytest -q -k chunk")),
                tool("c", "FAILED t.py::x\n[exit code 1]"),
                assistant("", tool_call("d", "bash", command="grep -r nothing .")),
                tool("d", "\n[exit code 1]"),
                assistant("", tool_call("e", "bash", command="python run.py")),
                tool("e", 'Traceback (most recent call last):\n  File "run.py"\nNameError: x\n[exit code 1]'),
                assistant("", tool_call("f", "bash", command="sleep 999")),
                tool("f", "\n[command timed out after 5s; its process group was killed]"),
            ]
        ]
    )
    kinds = [[f.kind for f in s.failures] for s in steps(trace)]
    # The edit was followed by a passing run, so the later failure is not attributed to it.
    assert kinds == [[], [], ["test_failure"], [], ["tool_error"], ["tool_error"]]


def test_several_calls_in_one_step_and_malformed_arguments():
    bad = {"id": "z", "name": "bash", "arguments": "{not json"}
    trace = build_trace(
        [
            [
                SYSTEM,
                TASK,
                assistant("", tool_call("x", "bash", command="pytest"), bad),
                tool("x", "1 failed\n[exit code 1]"),
                tool("z", "Error: the arguments of bash are not valid JSON."),
            ]
        ]
    )
    (step,) = steps(trace)
    assert [f.kind for f in step.failures] == ["test_failure", "tool_error"]  # most informative first


def test_compaction_marks_the_summary_leaf_and_branches():
    summary_request = {"role": "user", "content": "Summarise your progress."}
    resumed = {"role": "user", "content": "<summary>did things</summary>"}
    trace = build_trace(
        [
            [
                SYSTEM,
                TASK,
                assistant("", tool_call("a", "bash", command="pytest")),
                tool("a", "FAILED x\n[exit code 1]"),
                summary_request,
                assistant("I ran the tests; x fails."),
            ],
            [SYSTEM, TASK, resumed, assistant("", tool_call("b", "finish"))],
        ]
    )
    found = steps(trace)
    assert [(s.node, s.branch, s.is_summary, s.is_final) for s in found] == [
        (2, 0, False, False),
        (5, 0, True, False),
        (7, 1, False, True),
    ]


def test_trim_keeps_failing_lines_and_tail():
    noise = "\n".join(f"line {i}" for i in range(2000))
    text = f"collected 9 items\nFAILED tests/test_m.py::test_one\n{noise}\nshort test summary"
    trimmed = trim(text)
    assert len(trimmed) <= DETAIL_MAX_CHARS
    assert trimmed.startswith("FAILED tests/test_m.py::test_one")
    assert trimmed.endswith("short test summary")
    assert trim("short") == "short"
