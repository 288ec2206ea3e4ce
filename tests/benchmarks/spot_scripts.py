"""Settings and scripted policies whose costs the spot simulator's tests count by hand."""

from collections.abc import Callable

from benchmarks.spot.simulator import Setting, View


def setting(work: int, deadline: int, d: int) -> Setting:
    # spot 1 $/tick, on-demand 3 $/tick: costs can be checked by counting ticks
    return Setting(work, deadline, d, 1.0, 3.0, 1.0)


def scripted(actions: list[str]) -> Callable[[View], str]:
    plan = iter(actions)
    return lambda v: next(plan)
