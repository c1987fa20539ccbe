"""The offline model zoo: the SmolLM2 target fetched from PyPI and the pocket drafter's model
(its training and card are offline code: `treegraft_lab.training`)."""
