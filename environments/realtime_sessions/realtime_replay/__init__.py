"""realtime-replay: the harness that plays back a logged session instead of calling a model (harness id
`realtime-replay`; `composer_prime.realtime.cycle.replay`, docs/realtime.md)."""

from composer_prime.realtime.cycle.replay import ReplayHarness

__all__ = ["ReplayHarness"]
