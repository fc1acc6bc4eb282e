"""feature-deletion: rebuild a deleted, tested feature (taskset id `feature-deletion`); see docs/feature-deletion.md.

The taskset's default harness is composer-agent: verifiers makes a Harness exported next to the Taskset the
taskset's default (`default_harness_id`), so an agent without an explicit harness runs `ComposerAgentHarness`.
"""

from composer_agent import ComposerAgentHarness
from feature_deletion.taskset import FeatureDeletionTaskset

__all__ = ["ComposerAgentHarness", "FeatureDeletionTaskset"]
