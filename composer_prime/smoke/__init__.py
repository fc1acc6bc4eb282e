"""`composer-prime smoke`: the whole Composer recipe end to end at toy scale on one CPU machine (docs/smoke.md).

Importing the package is cheap: the heavy parts (torch, transformers, verifiers) load inside the command."""

from pathlib import Path

TOYREPO = Path(__file__).resolve().parent / "toyrepo"
"""The bundled tested repository the run mines its Feature Deletion tasks from."""
