"""swe-gym: the SWE-Gym environment (taskset id `swe-gym`); see docs/swe-gym.md.

The taskset's default harness is composer-agent: verifiers makes a Harness exported next to the Taskset the
taskset's default (`default_harness_id`), so an agent without an explicit harness runs `ComposerAgentHarness`.
"""

from composer_agent import ComposerAgentHarness
from swe_gym.taskset import SWEGymTaskset

__all__ = ["ComposerAgentHarness", "SWEGymTaskset"]
