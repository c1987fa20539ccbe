"""The offline model zoo: the SmolLM2 target fetched from PyPI and the project's own drafter."""
