"""composer-prime: Cursor's Composer recipe for agentic-coding RL, as a plugin/recipe pack for PRIME-RL.

Importing the package is cheap on purpose: no torch, no verifiers. The trainer imports `composer_prime.loss`,
the orchestrator and env servers import the environments and `composer_agent`; each pulls its own heavy deps.

The rooms and the floors they stand on are drawn in docs/design.md ("Layout"); each package's docstring says what
lives there and what it may import, and tests/unit/test_import_graph.py holds every import to that, with no circle.

May import: nothing of the project.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("composer-prime")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
