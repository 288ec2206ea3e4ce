"""One Settings class for every process (api, worker, beat, standalone), env prefix GPUJOBS_."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUJOBS_", env_file=None, extra="ignore")

    # State
    home: Path = Field(Path(".gpujobs"), description="Embedded-mode state: db, credentials, logs.")
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite under `home`.")
    database_pool_size: int = 10
    database_max_overflow: int = 20

    # API
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str = Field("", description="URL trainers use to reach the API; default host:port.")
    max_body_bytes: int = 1024 * 1024
    default_team: str = "default"
    credentials_file: Path = Field(
        Path.home() / ".config" / "gpujobs" / "credentials.json",
        description="Where `make run` writes the default team's token for the CLI and SDK.",
    )
    admin_token: str = Field("", description="Bearer token for the admin API; empty disables it.")

    # Control loop
    broker_url: str = Field("", description="Celery broker (redis://...); empty = in-process loop.")
    schedule_interval_s: float = 2.0
    reconcile_interval_s: float = 2.0
    claim_ttl_s: float = 60.0
    schedule_batch: int = 1000
    no_capacity_backoff_s: float = 300.0
    restart_hours: float = Field(
        0.2, description="Provisioning + restore time of a new attempt, as the policy sees it."
    )
    launch_timeout_s: float = 600.0
    worker_metrics_port: int = Field(0, description="Serve the worker's /metrics here; 0 = off.")

    # Launchers
    launcher: Literal["local", "kubernetes"] = "local"
    checkpoint_uri: str = Field("", description="Checkpoint root; empty = `home`/checkpoints.")
    s3_endpoint_url: str = ""
    trainer_image: str = "ghcr.io/gpujobs/trainer:latest"
    # Local launcher's simulated spot market
    spot_market: Literal["off", "rate", "trace"] = "off"
    spot_preemption_rate_per_hour: float = Field(
        0.0, description="rate market: preemptions per simulated hour of spot."
    )
    spot_trace: str = Field("", description="trace market: a spot-traces JSON file to replay.")
    spot_trace_time_scale: float = Field(
        60.0, description="Simulated seconds per wall-clock second for the spot market."
    )
    spot_notice_s: float = Field(10.0, description="Preemption notice: SIGTERM, then SIGKILL.")
    drain_on_shutdown: bool = Field(
        False,
        description="Local launcher: a stopping worker stops its trainers (checkpoint, then "
        "resume later) instead of leaving them running; for containers, whose processes die "
        "with the worker.",
    )
    # Kubernetes launcher
    k8s_namespace: str = "gpujobs"
    k8s_instance_type_label: str = "node.kubernetes.io/instance-type"
    k8s_capacity_type_label: str = "karpenter.sh/capacity-type"
    k8s_termination_grace_s: int = 120
    k8s_unschedulable_timeout_s: float = 600.0
    k8s_kueue_queue: str = ""
    k8s_service_account: str = ""
    k8s_s3_credentials_secret: str = Field(
        "", description="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for trainer pods."
    )

    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gpujobs.db').resolve()}"

    def api_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def checkpoint_root(self) -> str:
        return self.checkpoint_uri or str((self.home / "checkpoints").resolve())


@lru_cache
def get_settings() -> Settings:
    return Settings()
