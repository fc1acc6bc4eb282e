"""`--demo.prime-rl`: the PRIME-RL config the CPU demo writes (tomls/cpu-smoke.toml's CPU settings, the realtime
source), and the settings it refuses. The run itself is tests/e2e/realtime/test_realtime_prime_rl.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from composer_prime.cli import UsageError, parse_config
from composer_prime.realtime.cycle import cpu
from composer_prime.realtime.cycle.cluster import rl_config
from composer_prime.realtime.cycle.config import RealtimeConfig

SMOKE = Path(__file__).resolve().parents[4] / "tomls" / "cpu-smoke.toml"
PORTS = {"inference": 18000, "zmq": 18100, "env_servers": 18200}


def test_the_demos_prime_rl_config_is_the_smokes_cpu_settings_with_the_realtime_source(tmp_path):
    smoke = tomllib.loads(SMOKE.read_text())
    rl = cpu.rl_table(SMOKE, tmp_path / "policy-v0", 32, 3e-4, {"hint_coef": 0.5}, PORTS)
    for table in ("deployment", "weight_broadcast"):
        assert rl[table] == smoke[table]
    assert rl["inference"]["vllm"]["dtype"] == "float32" and rl["inference"]["router"] == "None"
    assert rl["inference"]["vllm"]["max_model_len"] == rl["seq_len"] == 512  # the demo policy's context
    assert rl["trainer"]["model"] == smoke["trainer"]["model"] and rl["trainer"]["optim"]["lr"] == 3e-4
    assert rl["trainer"]["loss"]["import_path"] == "composer_prime.loss.composer_loss"
    assert rl["trainer"]["loss"]["kwargs"] == {"hint_coef": 0.5}
    assert rl["orchestrator"]["batch_size"] == 16 and rl["orchestrator"]["algo"]["hints"] == {"enabled": False}
    assert rl["orchestrator"]["model"]["client"]["base_url"] == "http://127.0.0.1:18000/v1"
    [source] = rl["orchestrator"]["train"]["source"]
    assert source["group_size"] == 1 and source["env"]["agent"]["harness"]["id"] == "realtime-replay"
    assert "feature-deletion" not in str(rl) and "teacher" not in str(rl)
    # The runner's cluster path accepts it and fills the source from its own sections, as for a cluster TOML.
    config = RealtimeConfig.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "model_dir": str(tmp_path),
            "spool": {"dir": str(tmp_path / "spool")},
            "prime_rl": {"rl": rl},
        }
    )
    taskset = rl_config(config)["orchestrator"]["train"]["source"][0]["env"]["taskset"]
    assert taskset["bundle_size"] == cpu.BUNDLE_SIZE and taskset["spool"]["dir"] == str(tmp_path / "spool")


@pytest.mark.parametrize(("sessions", "batch"), [(32, 16), (16, 8), (10, 4), (4, 4), (2, 4)])
def test_a_step_is_about_half_a_window_in_whole_bundles(sessions, batch):
    assert cpu.batch_size(sessions) == batch


def test_bad_demo_prime_rl_settings_name_the_field_and_the_fix(tmp_path):
    with pytest.raises(UsageError, match="demo.prime_rl = .* is not a PRIME-RL source tree"):
        parse_config(RealtimeConfig, ["--demo.sessions", "8", "--demo.prime-rl", str(tmp_path)], "realtime")
    (tmp_path / "src" / "prime_rl").mkdir(parents=True)
    with pytest.raises(UsageError, match="not available with demo.prime_rl"):
        parse_config(
            RealtimeConfig,
            ["--demo.sessions", "8", "--demo.prime-rl", str(tmp_path), "--staleness.mode", "importance_weight"],
            "realtime",
        )
    config = parse_config(RealtimeConfig, ["--demo.sessions", "8", "--demo.prime-rl", str(tmp_path)], "realtime")
    assert config.demo.prime_rl == tmp_path and config.prime_rl is None  # the runner writes [prime_rl] itself
    cluster = Path(__file__).resolve().parents[4] / "tomls" / "qwen3-32b-realtime.toml"
    with pytest.raises(UsageError, match="give --demo.prime-rl PATH to run the demo through PRIME-RL"):
        parse_config(RealtimeConfig, ["@", str(cluster), "--demo.sessions", "8"], "realtime")
