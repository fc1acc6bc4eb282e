"""`composer-prime smoke`: the whole Composer recipe end to end at toy scale on one CPU machine (docs/smoke.md).

Here: the command (`command`, `config`, `run`, `outdir`: the `--out` folder's lock and log rotation), the inputs it prepares in PRIME-RL's venv (`prepare`: tasks mined
from the bundled toy repository `toyrepo/`, and the tiny policy's warm start, `warmstart`), the rule-based local
teachers (`referees`), the reload probe (`reloads`, `probe`) and the report (`report`, with the evals and a resume read by
`rehearsal`). Running PRIME-RL's own
processes on this machine (the CPU patch, the private tree, the venvs, the stubs, the inference wrapper, the tiny
policy) is `composer_prime.local`'s, which the realtime CPU demo shares.

Importing the package is cheap: the heavy parts (torch, transformers, verifiers) load inside the command.

May import: `composer_prime.local`, `composer_prime.process`, `composer_prime.atomic`, `composer_prime.cli`,
`composer_agent` (the agent's prompts and tools the warm start demonstrates).
"""

from pathlib import Path

TOYREPO = Path(__file__).resolve().parent / "toyrepo"
"""The bundled tested repository the run mines its Feature Deletion tasks from."""
