from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.s3server import S3Server
from devstack.stack import Stack


@pytest.fixture
def make_stack(tmp_path: Path, s3_server: S3Server) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(*, trace: list[int], tick_seconds: float, **kwargs: Any) -> Stack:
        stack = Stack(
            tmp=tmp_path,
            s3=s3_server,
            trace={"metadata": {"gap_seconds": tick_seconds}, "data": trace},
            **kwargs,
        )
        stacks.append(stack)
        stack.start()
        return stack

    yield make
    for stack in stacks:
        stack.stop()
