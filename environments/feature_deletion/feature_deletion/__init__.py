# A taskset package that also exports a Harness makes it the taskset's default harness (verifiers v1
# `default_harness_id`), so rollouts run composer-agent unless `[env.agent.harness] id` says otherwise.
from composer_agent import ComposerAgentHarness
from feature_deletion.taskset import FeatureDeletionTaskset

__all__ = ["FeatureDeletionTaskset", "ComposerAgentHarness"]
