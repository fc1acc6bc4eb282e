"""tomls/qwen3-32b-realtime.toml parses through `composer-prime realtime`'s own config loader."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from composer_prime.cli import UsageError, parse_config
from composer_prime.realtime.cycle.config import RealtimeConfig

TOML = Path(__file__).resolve().parents[4] / "tomls" / "qwen3-32b-realtime.toml"


def test_the_cluster_toml_parses_and_opens_with_hypothesis_and_launch():
    head = TOML.read_text().split("\n\n", 1)[0]
    assert all(line.startswith("#") for line in head.splitlines())
    assert "Hypothesis" in head and "composer-prime realtime @ tomls/qwen3-32b-realtime.toml" in head
    config = parse_config(RealtimeConfig, ["@", str(TOML)], "composer-prime realtime")
    assert config.cadence.interval_min == 300 and config.staleness.mode == "drop"
    assert config.demo is None and len(config.ship.admin_urls) == 4 and "{weights}" in config.eval.command
    [source] = config.prime_rl.rl["orchestrator"]["train"]["source"]
    assert source["group_size"] == 1 and source["env"]["agent"]["harness"]["id"] == "realtime-replay"
    assert config.prime_rl.rl["orchestrator"]["algo"]["type"] == "composer"


def test_the_runner_fills_the_sources_taskset_from_its_own_sections(tmp_path):
    from composer_prime.realtime.cycle.cluster import rl_config

    config = parse_config(RealtimeConfig, ["@", str(TOML), "--state-dir", str(tmp_path / "state")], "realtime")
    config.prime_rl.output_dir = tmp_path / "rl"
    rl = rl_config(config)
    taskset = rl["orchestrator"]["train"]["source"][0]["env"]["taskset"]
    assert taskset["spool"]["dir"] == "/data/realtime/spool" and taskset["spool"]["signal_window_s"] == 1800
    assert taskset["staleness"]["max_age"] == 64 and taskset["pii"]["tokenizer"] == "/data/models/qwen3-32b-composer"
    assert taskset["journal"] == str(tmp_path / "rl" / "realtime-journal") and taskset["bundle_size"] == 16
    assert taskset["state_file"] == str((tmp_path / "state").resolve() / "state.json")
    assert rl["output_dir"] == str(tmp_path / "rl") and rl["run"] == {"name": "realtime"}
    assert "resume" not in rl and "clean" not in rl
    (tmp_path / "rl" / "realtime" / "broadcasts" / "step_3").mkdir(parents=True)
    assert rl_config(config)["clean"] is True  # a run that never checkpointed starts over; the journal stays
    (tmp_path / "rl" / "realtime" / "checkpoints" / "step_16").mkdir(parents=True)
    rl = rl_config(config)
    assert rl["resume"] == {}  # PRIME-RL resumes from its latest checkpoint
    taskset = rl["orchestrator"]["train"]["source"][0]["env"]["taskset"]
    assert taskset["checkpoints"] == str(tmp_path / "rl" / "realtime" / "checkpoints")  # the journal prunes below
    # A journal that forgot bundles below checkpoints that are gone cannot feed a fresh run: refused before launch.
    (tmp_path / "rl" / "realtime-journal").mkdir()
    (tmp_path / "rl" / "realtime-journal" / "state.json").write_text('{"handed": 9, "pruned": 4}')
    assert rl_config(config)["resume"] == {}
    (tmp_path / "rl" / "realtime" / "checkpoints" / "step_16").rmdir()
    with pytest.raises(ValueError, match="forgot bundles 1..4 below the checkpoints it had"):
        rl_config(config)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('mode = "drop"', 'mode = "importance_weight"', "not available with prime_rl"),
        ("group_size = 1", "group_size = 8", "set group_size = 1"),
        ('id = "realtime-sessions"', 'id = "feature-deletion"', "0 \\[\\[orchestrator.train.source\\]\\] tables"),
        (
            "[prime_rl.rl.orchestrator]\n",
            "[prime_rl.rl.orchestrator.ckpt]\nskip_progress = true\n\n[prime_rl.rl.orchestrator]\n",
            "skip_progress = true makes a resume draw from the first task again",
        ),
    ],
)
def test_a_cluster_config_prime_rl_cannot_train_is_refused(tmp_path, old, new, message):
    bad = tmp_path / "bad.toml"
    assert old in TOML.read_text()
    bad.write_text(TOML.read_text().replace(old, new))
    with pytest.raises(UsageError, match=message):
        parse_config(RealtimeConfig, ["@", str(bad)], "composer-prime realtime")


def test_a_bad_value_in_a_file_names_the_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(TOML.read_text().replace('mode = "drop"', 'mode = "reweight"'))
    with pytest.raises(UsageError, match="mode"):
        parse_config(RealtimeConfig, ["@", str(bad)], "composer-prime realtime")


def test_a_ship_token_file_others_can_read_is_refused_naming_the_field_mode_and_fix(tmp_path):
    token = tmp_path / "admin.token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    for mode in (0o644, 0o640, 0o604):
        token.chmod(mode)
        with pytest.raises(UsageError, match=rf"ship.admin_token_file = '{token}' has mode {mode:04o}.*chmod 600"):
            parse_config(RealtimeConfig, ["@", str(TOML), "--ship.admin-token-file", str(token)], "realtime")
    token.chmod(0o600)
    config = parse_config(RealtimeConfig, ["@", str(TOML), "--ship.admin-token-file", str(token)], "realtime")
    assert config.ship.admin_token() == "0123456789abcdef0123456789abcdef"


def start_prime_rl(tmp_path, broadcasts: tuple[int, ...], checkpoint: int | None = None):
    """`PrimeRL.start` over a run dir holding `broadcasts` (and a checkpoint), PRIME-RL a command that exits at once;
    returns (the started PrimeRL, the run dir, what it logged)."""
    import sys

    from composer_prime.realtime.cycle.cluster import PrimeRL

    config = parse_config(RealtimeConfig, ["@", str(TOML), "--state-dir", str(tmp_path / "state")], "realtime")
    config.prime_rl.output_dir = tmp_path / "rl"
    config.prime_rl.command, config.prime_rl.cwd = [sys.executable, "-c", "pass"], tmp_path
    run = tmp_path / "rl" / "realtime"
    if checkpoint is not None:
        (run / "checkpoints" / f"step_{checkpoint}").mkdir(parents=True)
    for step in broadcasts:
        (run / "broadcasts" / f"step_{step}").mkdir(parents=True)
        (run / "broadcasts" / f"step_{step}" / "STABLE").touch()
    logs: list[str] = []
    prime = PrimeRL(config, logs.append)
    prime.start()
    prime.process.wait(60)
    return prime, run, logs


def test_broadcasts_past_the_checkpoint_prime_rl_resumes_from_are_removed_before_it_starts(tmp_path):
    """PRIME-RL rewrites a rolled-back step's broadcast dir in place, its old STABLE still there: the runner removes
    those steps first, so it never copies a half-rewritten one, and judges the retrained steps again."""
    prime, run, logs = start_prime_rl(tmp_path, (15, 16, 17, 18), checkpoint=16)
    assert prime.resumes_from == 16
    assert sorted(p.name for p in (run / "broadcasts").iterdir()) == ["step_15", "step_16"]
    assert "removed rolled-back broadcasts [17, 18]" in logs[0]


def test_a_prime_rl_that_starts_over_leaves_no_broadcast_of_its_earlier_run_to_judge(tmp_path):
    """PRIME-RL killed before its first checkpoint: the rerun starts over, and its launcher removes the old steps only
    once it is up; until then the runner would judge (and fail to load) the killed run's newest step."""
    from composer_prime.realtime.ingest.pruning import newest_step

    prime, run, logs = start_prime_rl(tmp_path, (0, 6, 7))
    assert prime.resumes_from is None
    assert newest_step(run) is None
    assert "starts over; removed rolled-back broadcasts [0, 6, 7]" in logs[0]


def test_prime_rls_episode_logs_of_a_judged_step_keep_no_token_stream_user_or_repository(tmp_path):
    from composer_prime.realtime.cycle.cluster import redact_rollouts

    session = {
        "session_id": "s1",
        "user": "alice-7f3",
        "group": "acme/payments",
        "samples": [{"token_ids": [9041, 77]}],
        "edited_paths": ["src/secret_plan.py"],
    }
    data = {
        "idx": 1,
        "name": "realtime-bundle-00000001",
        "prompt": "Replay of 1 logged sessions (group 'acme/payments')",
        "bundle": 1,
        "group": "acme/payments",
        "sessions": [session],
    }
    trace = {
        "id": "t1",
        "task": {"type": "BundleTask", "data": {**data, "replay": 0}, "key": "k"},
        "nodes": [{"message": {"role": "user", "content": "my key is hunter2"}, "token_ids": [9041, 77]}],
        "rewards": {"signals": {"score": 1.0}},
        "metrics": {"composer/realtime/age": 0.0},
        "info": {
            "realtime": {
                "session_id": "s1",
                "user": "alice-7f3",
                "group": "acme/payments",
                "reward": 1.0,
                "edited_paths": ["src/secret_plan.py"],
            }
        },
    }
    error = {"type": "ValidationError", "message": "group 'acme/payments': bad", "traceback": "... hunter2 ..."}
    record = {
        "id": "e1",
        "task": {"type": "BundleTask", "data": data, "key": "k"},
        "traces": [trace],
        "ok": True,
        "errors": [error],
    }
    run = tmp_path / "run"
    for step in (1, 2, 3):
        path = run / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record) + "\n" + json.dumps(record)[:40])  # the last line cut by a crash
    assert redact_rollouts(run, 2) == [1, 2]
    for step in (1, 2):
        text = (run / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl").read_text()
        for secret in ("9041", "hunter2", "alice-7f3", "acme/payments", "secret_plan", "Replay of"):
            assert secret not in text, (step, secret)
        [kept] = [json.loads(line) for line in text.splitlines()]
        assert kept["task"]["data"]["name"] == "realtime-bundle-00000001"
        assert kept["traces"][0]["rewards"] == {"signals": {"score": 1.0}}
        assert kept["traces"][0]["info"] == {"realtime": {"session_id": "s1", "reward": 1.0}}
    assert "9041" in (run / "rollouts" / "step_3" / "train" / "all" / "traces.jsonl").read_text()  # not judged yet
    assert kept["errors"] == [{"type": "ValidationError"}]
    assert redact_rollouts(run, 2) == []  # marked: not rewritten again
    # PRIME-RL appends a late eval episode to a redacted step: the next pass rewrites that file again.
    late = run / "rollouts" / "step_1" / "eval" / "all" / "traces.jsonl"
    late.parent.mkdir(parents=True)
    time.sleep(0.05)
    late.write_text(json.dumps(record) + "\n")
    assert redact_rollouts(run, 2) == [1]
    assert "9041" not in late.read_text() and "realtime-bundle-00000001" in late.read_text()
