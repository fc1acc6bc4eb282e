"""The Feature Deletion corpus: many packages mined, each in an environment image of its own, and built into a
Hugging Face dataset (docs/feature-deletion.md).

`composer-prime mine-corpus` (`command`, one worker process per package running `package`) mines many packages:
`config` holds its settings and the plan (which packages, into which folders); `sources` fetches a PyPI sdist
(`sdist`) or a git ref and reads its metadata; `images` resolves its test dependencies into wheels for the image and
builds it offline; the one-repository miner (`composer_prime.mining`, its `box` in a container from that image) mines
it; `image_copies` looks for a task's gold code elsewhere in the image; every kept task is validated in fresh
containers through the feature-deletion taskset.

`composer-prime corpus-dataset` (`dataset_command`) and mine-corpus after each package build the corpus into a
dataset: `dataset` (parquet shards, `shards`, and a card, `dataset_card`), with `licenses` deciding which packages a
published dataset may hold.

May import: `composer_prime.mining`, `composer_prime.process`, `composer_prime.atomic`, `composer_prime.cli`.
"""
