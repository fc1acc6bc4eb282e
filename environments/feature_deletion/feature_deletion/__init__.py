from feature_deletion.env import FeatureDeletionEnv
from feature_deletion.taskset import FeatureDeletionTaskset

__all__ = ["FeatureDeletionEnv", "FeatureDeletionTaskset"]
