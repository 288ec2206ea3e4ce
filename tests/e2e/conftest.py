from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.confinement import open_directory
from devstack.s3server import S3Server
from devstack.stack import Stack


@pytest.fixture
def make_stack(s3_server: S3Server) -> Iterator[Callable[..., Stack]]:
    # Run as root, trainers run as other uids, which cannot pass pytest's 0700 tmp_path.
    tmp_path = open_directory()
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
    shutil.rmtree(tmp_path, ignore_errors=True)
