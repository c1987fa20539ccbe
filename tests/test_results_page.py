"""docs/results.md and the README's results table are written from the committed data (`treegraft-lab report`):
regenerated here, they must equal the committed files byte for byte."""

from __future__ import annotations

import re

import pytest

from treegraft_lab.paths import REPO_DIR


@pytest.fixture(scope="module")
def pages():
    from treegraft_lab import report

    return report.pages()


def test_docs_results_md_is_what_the_committed_data_give(pages):
    path = REPO_DIR / "docs" / "results.md"
    assert pages[path] == path.read_text(), "docs/results.md differs from the data: run `treegraft-lab report`"


def test_the_readme_results_table_is_what_the_committed_data_give(pages):
    path = REPO_DIR / "README.md"
    assert pages[path] == path.read_text(), "README.md's results block differs from the data: run `treegraft-lab report`"


def test_report_check_fails_on_a_hand_edited_page(tmp_path, monkeypatch, capsys):
    from treegraft_lab import cli, report

    page = tmp_path / "results.md"
    page.write_text("| all-small | 9.99x |\n")
    monkeypatch.setattr(report, "pages", lambda: {page: "| all-small | 1.87x |\n"})
    assert cli.main(["report", "--check"]) == 1
    assert "run `treegraft-lab report`" in capsys.readouterr().err and page.read_text() == "| all-small | 9.99x |\n"
    assert cli.main(["report"]) == 0 and page.read_text() == "| all-small | 1.87x |\n"
    assert cli.main(["report", "--check"]) == 0


def test_every_table_of_the_results_page_names_its_command_machine_and_date(pages):
    text = pages[REPO_DIR / "docs" / "results.md"]
    sections = re.split(r"\n(?=###? )", text)[1:]
    with_tables = [s for s in sections if "\n|---" in s]
    assert len(with_tables) >= 10
    for s in with_tables:
        if s.startswith(("## Schedulers", "## Mid drafter", "## Losslessness")):
            continue  # each row names its card or benchmark folder
        head = s.splitlines()[0]
        assert "\n    " in s and "Machine: " in s and re.search(r"Date: \d{4}-\d\d-\d\d", s), head


def readme_prose() -> str:
    """README.md without its generated blocks, code (fenced and inline), link targets and the pairs table."""
    text = (REPO_DIR / "README.md").read_text()
    from treegraft_lab import report

    for begin, end in ((report.README_BEGIN, report.README_END), (report.README_WHEN_BEGIN, report.README_WHEN_END)):
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("|"))


def test_the_readme_holds_no_number_outside_its_generated_table():
    numbers = re.findall(r"(?<![\w.-])\d[\d,.]*[x%]?(?![\w-])", readme_prose())  # names (A100, bf16, Qwen3) are not numbers
    assert numbers == [], f"README numbers outside the generated table (move them to docs/results.md): {numbers}"


def test_the_readme_stays_within_250_lines():
    assert len((REPO_DIR / "README.md").read_text().splitlines()) <= 250
