"""An estimate shows two finish times: each plan's (that plan alone to the end) and the quote's
(the policy as it will run, moves included). Issue 23: examples/deadline.yaml's chosen spot row
said 05:20 beside the quote's 23:25, with nothing saying which was which."""

from __future__ import annotations

from gpujobs.cli import layout, render
from gpujobs.plans import Plan
from gpujobs.resources import Quote


def _description(model: type[Plan] | type[Quote], field: str) -> str:
    return str(model.model_json_schema()["properties"][field].get("description", ""))


def test_the_contract_says_which_finish_is_which() -> None:
    assert "stays on this plan" in _description(Plan, "expected_finish")
    assert "staying on this plan" in _description(Plan, "p_meet_deadline")
    assert "policy" in _description(Quote, "expected_finish")


def test_the_estimate_table_says_what_its_rows_are_beside_the_quote() -> None:
    assert "plan alone to the end" in render.PLANS_NOTE and "policy" in render.PLANS_NOTE
    for line in layout.wrapped(render.PLANS_NOTE, 80):
        assert len(line) <= 80
