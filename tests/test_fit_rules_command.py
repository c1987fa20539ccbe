"""`treegraft-lab fit-rules`: fits the switching rules' values on collected trajectories and writes them with their card."""

from __future__ import annotations

import json

from treegraft_lab import cli
from treegraft_lab.paths import DATA_DIR


def test_fit_rules_refuses_a_folder_without_trajectories_in_one_line(tmp_path, capsys):
    assert cli.main(["fit-rules", str(tmp_path)]) == 2
    assert "no trajectories.json" in capsys.readouterr().err


def test_fit_rules_refits_the_committed_values_of_the_cpu_lookup_trajectories(tmp_path, monkeypatch):
    from treegraft_lab.schedule import rules

    committed = json.loads((DATA_DIR / "scheduler" / "smollm2-pocket" / "rules.json").read_text())
    folder = DATA_DIR / "trajectories" / "smollm2-pocket-cpu-value-lookup"
    key = next(k for k, e in committed.items() if e["trajectories"].endswith(folder.name))
    monkeypatch.setattr(rules, "rules_file", lambda pair: tmp_path / "rules.json")
    monkeypatch.setattr(rules, "read_fitted", lambda pair: {})
    assert cli.main(["fit-rules", str(folder)]) == 0
    # These trajectories were collected with the lookup growth before its longest-match chain
    # (`lookup_longest` False in their settings), so the refit names their growth "custom".
    written = json.loads((tmp_path / "rules.json").read_text())
    assert list(written) == [key.replace("-lookup-", "-custom-")]
    fitted = next(iter(written.values()))
    for rule in rules.GRIDS:
        assert fitted[rule]["value"] == committed[key][rule]["value"], rule
    assert fitted["command"].startswith("treegraft-lab fit-rules ") and (tmp_path / "RULES.md").read_text().startswith("# Rule")
