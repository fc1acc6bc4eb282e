"""The CPU demo's train phase through PRIME-RL's own `rl` (`composer-prime realtime --demo.prime-rl PATH`).

The demo's product still serves its scripted users from the weights the runner shipped and writes their sessions to
the spool between cycles; the training is PRIME-RL's: its orchestrator draws the spool through the
`realtime-sessions` source, the `realtime-replay` harness turns each bundle into traces, its torchrun trainer trains
them under `composer_loss` and writes a filesystem broadcast per step, and the runner's cluster cycle
(`cycle.Runner.cluster_cycle`) judges the newest one with the demo's held-out score, runs the monitors over the
journal's bundles, gates and ships, exactly as on a cluster.

Getting PRIME-RL to run on these CPUs is `composer_prime.local`'s mechanism, the smoke's too, called here, not copied
(docs/smoke.md): the patched private copy of PATH (`local/tree.py`), the two venvs and the console-script wrappers
PRIME-RL's launcher starts its processes by (`local/venvs.py`, under the smoke's `--cache`, so a smoke's venvs serve
the demo), free ports for everything PRIME-RL binds (`process/ports.py`). The PRIME-RL config is
tomls/cpu-smoke.toml's CPU settings (deployment, inference, trainer model, optimizer, weight broadcast, renderer, loss) with its Feature Deletion source
replaced by the realtime one and the demo's tiny policy as the model; `cluster.rl_config` then fills the source from
the runner's own sections, as for `[prime_rl]` on a cluster.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from composer_prime.realtime.cycle.cluster import TASKSET_ID, PrimeRLConfig

BUNDLE_SIZE = 4
"""Sessions per bundle (one PRIME-RL group): the demo's four functions are the groups, 32 sessions a cycle."""
MAX_LEN = 512
"""The demo policy's context (`demo.build_policy`): PRIME-RL's `seq_len` and vLLM's `max_model_len`."""
SETTLE_S = 15.0
"""A cycle judges the newest step once none newer has come for this long: a window trains in about two steps, a few
seconds apart after the first (the first waits for the trainer's compile)."""
STEP_WAIT_S = 1200.0
"""A cycle waits this long for PRIME-RL's next step: the first one includes vLLM's start and the trainer's compile
(docs/smoke.md: 70-230 s on two cores), and later ones wait for the users' next window to be read."""


class SetupError(RuntimeError):
    """The PRIME-RL train phase could not be prepared; the message names the setting and the fix."""


def batch_size(sessions: int) -> int:
    """Traces per PRIME-RL step: about half a window, a whole number of bundles, so every window fills a step even
    after the junk, PII and staleness rules drop some of its sessions."""
    return max(BUNDLE_SIZE, (sessions // 2) // BUNDLE_SIZE * BUNDLE_SIZE)


def rl_table(
    smoke_toml: Path, model_dir: Path, sessions: int, lr: float, loss: dict[str, float], ports: dict[str, int]
) -> dict[str, Any]:
    """`[prime_rl.rl]` for the demo: the smoke's CPU settings, the demo's model and the realtime source."""
    smoke = tomllib.loads(smoke_toml.read_text())
    inference = smoke["inference"]
    inference["vllm"]["max_model_len"] = MAX_LEN
    inference["server"] = {"host": "127.0.0.1", "port": ports["inference"]}
    trainer = smoke["trainer"]
    trainer["optim"]["lr"] = lr
    if loss:
        trainer["loss"]["kwargs"] = dict(loss)
    smoke_source = smoke["orchestrator"]["train"]["source"][0]
    source = {
        "name": "realtime",
        "group_size": 1,  # a bundle of sessions is the group
        "sampling": {"temperature": 1.0},  # the demo serves at 1.0 (spool.sampling)
        "serve": smoke_source["serve"],
        "env": {
            "taskset": {"id": TASKSET_ID, "bundle_size": BUNDLE_SIZE, "poll_s": 1.0},
            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
        },
    }
    return {
        "seq_len": MAX_LEN,
        "model": {"name": str(model_dir)},
        "deployment": smoke["deployment"],
        "inference": inference,
        "trainer": trainer,
        "weight_broadcast": smoke["weight_broadcast"],
        "monitors": smoke["monitors"],
        "rollout_transport": {"type": "zmq", "port": ports["zmq"]},
        "orchestrator": {
            "batch_size": batch_size(sessions),
            "concurrency": smoke["orchestrator"]["concurrency"],
            "renderer": smoke["orchestrator"]["renderer"],
            "model": {"client": {"base_url": f"http://127.0.0.1:{ports['inference']}/v1"}},
            "env_server_base_port": ports["env_servers"],
            # Live sessions carry no error sites or teacher scores (docs/realtime.md, "Hints and teacher replay").
            "algo": {"type": "composer", "hints": {"enabled": False}, "replay": {"enabled": False}},
            "train": {"source": [source]},
        },
    }


def prime_rl_config(config: Any, model_dir: Path, log: Callable[[str], None]) -> PrimeRLConfig:
    """`[prime_rl]` for the demo of `config` (a RealtimeConfig with `demo.prime_rl` set): builds or reuses the
    smoke's patched copy and venvs, writes the wrappers into the state dir and returns the config whose command
    launches PRIME-RL's `rl` with them. Raises `SetupError`."""
    from composer_prime.local.launch import CPU_TOML, ENV_SERVER_PORTS, cache_lock, project_root
    from composer_prime.local.tree import TreeError, private_copy
    from composer_prime.local.venvs import ensure_venv, requirement_sets, write_wrappers
    from composer_prime.process.group import ProcessFailed
    from composer_prime.process.ports import free_port, free_port_blocks

    demo = config.demo
    project = project_root()
    if project is None:
        raise SetupError(
            "demo.prime_rl: the venvs PRIME-RL runs in install composer-prime from its checkout; run "
            "`composer-prime realtime` from a clone of composer-prime installed with `pip install -e .`"
        )
    cache = demo.cache.expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    try:
        with cache_lock(cache, "building or checking the venvs and the patched PRIME-RL", log):
            tree = private_copy(demo.prime_rl.resolve(), cache)
            venvs = {
                name: ensure_venv(name, steps, cache, demo.torch_index, log)
                for name, steps in requirement_sets(project, tree).items()
            }
    except TreeError as err:
        raise SetupError(f"demo.prime_rl: {err}") from None
    except ProcessFailed as err:
        raise SetupError(
            f"demo.prime_rl: building the venvs PRIME-RL runs in (under demo.cache = {str(cache)!r}) failed: {err}"
        ) from None
    state_dir = config.state_dir.resolve()
    bin_dir = write_wrappers(state_dir / "bin", venvs["prime-rl"], venvs["vllm"], tree)
    inference = free_port()
    zmq, env_servers = free_port_blocks(2, ENV_SERVER_PORTS, avoid=(inference,))
    ports = {"inference": inference, "zmq": zmq, "env_servers": env_servers}
    rl = rl_table(project / CPU_TOML, model_dir.resolve(), demo.sessions, config.trainer.lr, config.loss, ports)
    path = os.pathsep.join([str(bin_dir), str(venvs["prime-rl"] / "bin"), os.environ.get("PATH", "")])
    # PRIME-RL's launcher maps its processes to the ids in CUDA_VISIBLE_DEVICES (inference, trainer); on CPU they only
    # label them, as in the smoke.
    command = [
        "env",
        f"PATH={path}",
        "CUDA_VISIBLE_DEVICES=0,1",
        "WANDB_MODE=disabled",
        "PYTHONUNBUFFERED=1",
        str(bin_dir / "rl"),
        "@",
        "{rl_toml}",
    ]
    return PrimeRLConfig(
        command=command, cwd=state_dir, step_wait_s=STEP_WAIT_S, settle_s=SETTLE_S, stop_timeout_s=30.0, rl=rl
    )
