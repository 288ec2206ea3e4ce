"""A throwaway PostgreSQL cluster (initdb + pg_ctl on a free port, fsync off), so a test or a
benchmark can crash and restart its database without touching the machine's shared one."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from devstack.ports import free_port

BIN_DIRS = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
)


def _binary(name: str) -> str:
    for directory in BIN_DIRS:
        candidate = Path(directory) / name
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (Debian: postgresql-15)")
    return found


class PostgresCluster:
    def __init__(self) -> None:
        self.port = free_port()
        # Not under the caller's temporary directory: pytest's is private to root, and the
        # server runs as the postgres user when we are root (initdb refuses root).
        self.directory = Path(tempfile.mkdtemp(prefix="gpujobs-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str]) -> None:
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if self._user is not None:
            record = pwd.getpwnam(self._user)
            os.chown(self.directory, record.pw_uid, record.pw_gid)
        self._run([_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                   "--encoding=UTF8", "--no-instructions"])  # fmt: skip
        self.start()

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=200")  # fmt: skip
        self._run([_binary("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log),
                   "-w", "start"])  # fmt: skip

    def stop(self, *, mode: str = "fast") -> None:
        self._run([_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self) -> None:
        """A crash (immediate: no checkpoint, WAL replay at start), then back on the same port."""
        self.stop(mode="immediate")
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop(mode="immediate")
        shutil.rmtree(self.directory, ignore_errors=True)
