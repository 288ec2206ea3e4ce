"""Reading a built-in workload's options, so that a misspelled option is an error, not a default."""

from __future__ import annotations

from typing import Any, TypeVar

from trainer.config import ConfigError

T = TypeVar("T", int, float, str, bool)


class Options:
    def __init__(self, workload: str, args: dict[str, Any]) -> None:
        self.workload = workload
        self.args = dict(args)
        self.known: list[str] = []

    def get(self, name: str, default: T, *, minimum: float | None = None) -> T:
        self.known.append(name)
        value = self.args.pop(name, default)
        kind = type(default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind:
            raise ConfigError(
                f"workload {self.workload!r}: option {name} must be {kind.__name__}, got {value!r}"
            )
        if minimum is not None and value < minimum:  # type: ignore[operator]  # minimum comes with numeric defaults only
            raise ConfigError(f"workload {self.workload!r}: option {name} must be >= {minimum}")
        return value

    def done(self) -> None:
        if self.args:
            unknown = ", ".join(sorted(self.args))
            known = ", ".join(sorted(self.known))
            raise ConfigError(
                f"workload {self.workload!r}: unknown option(s) {unknown}; known: {known}"
            )
