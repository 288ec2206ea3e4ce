"""The README's benchmark figures are the results files' figures."""

from __future__ import annotations

from benchmarks import readme


def test_the_readme_table_is_rendered_from_the_results() -> None:
    current = readme.README.read_text()
    assert current == readme.render(current), "run `python -m benchmarks.readme`"
    for name in readme.ROWS:
        assert (readme.RESULTS / f"{name}.json").exists() or name in readme.NOT_YET, name
