"""minicalc: the small tested repository `composer-prime smoke` mines its Feature Deletion tasks from."""
