"""The offline model zoo: the SmolLM2 target fetched from PyPI and the pocket drafter's model
(its training and card are offline code: `treegraft_lab.training`)."""

# Mid drafters derived from the target at load time (`treegraft_lab.zoo.derived`; their folders in
# data/models hold a config.json and the model card): name -> what it is.
DERIVED_MIDS: dict[str, str] = {
    "smollm2-int8-mid": "the target with int8 dynamically quantised projections (CPU only)",
    "smollm2-self-mid": "a copy of the target itself (agreement 1)",
    "smollm2-cut28-mid": "28 of the target's 30 layers (layers 14 and 15 skipped), untrained",
}
