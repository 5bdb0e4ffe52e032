"""The README and docs/ as a reader meets them: every results/ path they name is committed, the headline table is
the committed JSON's, and no run history is written into them or the code."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "README.md"]
HISTORY = re.compile(r"\b(stop|tally) [0-9]+", re.IGNORECASE)


def committed() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(listed.split())


def named_results(text: str) -> set[str]:
    """The ``results/...`` paths a page names (placeholders such as MACHINE or NAME left out)."""
    paths = {match.rstrip("/.,") for match in re.findall(r"results/[A-Za-z0-9_.\-/]*[A-Za-z0-9_/]", text)}
    return {path for path in paths if not re.search(r"[A-Z]{2,}", path)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_results_path_a_page_names_is_committed(page: Path) -> None:
    files = committed()
    missing = [path for path in named_results(page.read_text())
               if path not in files and not any(name.startswith(path.rstrip("/") + "/") for name in files)]  # fmt: skip
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_of_a_page_resolves(page: Path) -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    broken = [target for target in targets if "://" not in target and not (page.parent / target).exists()]
    assert broken == []


def test_the_readme_headline_table_is_the_committed_json() -> None:
    spec = importlib.util.spec_from_file_location("headline", ROOT / "benchmarks" / "headline.py")
    headline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(headline)
    assert headline.table() in (ROOT / "README.md").read_text()


def test_the_readme_is_a_manual_of_at_most_250_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_no_run_history_in_the_readme_the_docs_the_code_or_the_results_names() -> None:
    sources = [*PAGES, *sorted((ROOT / "rlcompile").rglob("*.py"))]
    written = [f"{path.relative_to(ROOT)}: {line.strip()}" for path in sources
               for line in path.read_text().splitlines() if HISTORY.search(line)]  # fmt: skip
    named = [name for name in committed() if name.startswith("results/") and re.search(r"stop|tally", name)]
    assert written == [] and named == []
