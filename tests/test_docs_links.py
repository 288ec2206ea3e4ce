"""Every relative link in the README and docs/ reaches a file of this repository: moving a section
from the README into docs/ (or a doc elsewhere) must move its links with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "deploy" / "README.md"])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(page.read_text())
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file(page: Path) -> None:
    broken = [
        target
        for target in relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_scan_sees_a_link_gone_astray(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[the usage](docs/usage.md) and [the web](https://example.com)")
    assert relative_links(page) == ["docs/usage.md"]
    assert not (page.parent / "docs/usage.md").exists()


def test_the_readme_reads_in_a_minute() -> None:
    """What gpujobs is, the two commands, the first job and a short table; the rest is in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
