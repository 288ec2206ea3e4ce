"""One Settings class for every process (api, worker, beat, standalone), env prefix GPUJOBS_."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from api.launchers import DEFAULT_LAUNCHER, LAUNCHER_GROUPS, LauncherGroups, LauncherTraits
from api.launchers.traits import LauncherSettings
from api.pricing.cost_model import LOCAL_RESTART_HOURS, RESTART_HOURS
from api.pricing.gpu_speed import DEFAULT_SPEEDS, over_the_table
from gpujobs.checkpoints import LocalLocation, parse_uri
from gpujobs.workloads import valid_prefix

# Run as root from a private folder, trainers' directories live here (Settings.trainer_home_dir).
TRAINER_HOMES = Path("/var/lib/gpujobs")


class Settings(LauncherGroups):
    """Each launcher's own settings are a group of their own, a field named after the launcher
    (api.launchers.LauncherGroups), under the same GPUJOBS_ names as the rest;
    Settings(spot_market=...) puts a name of a group's in that group."""

    model_config = SettingsConfigDict(env_prefix="GPUJOBS_", env_file=None, extra="ignore")

    # State
    home: Path = Field(Path(".gpujobs"), description="Embedded-mode state: db, credentials, logs.")
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite under `home`.")
    database_pool_size: int = 10
    database_max_overflow: int = 20
    database_pool_timeout_s: float = Field(
        10.0, description="Longest wait for a pooled connection before answering 503."
    )
    database_busy_timeout_s: float = Field(
        10.0, description="SQLite: longest wait for the write lock before answering 503."
    )

    # API
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str = Field("", description="URL trainers use to reach the API; default host:port.")
    max_body_bytes: int = 1024 * 1024
    api_concurrency: int = Field(
        20,
        description="Requests served at once; more wait in line. Keep it under the database "
        "pool (pool size + overflow) and the thread pool (40), so an admitted request never "
        "waits for a connection or a thread held by a waiting one.",
    )
    api_queue_wait_s: float = Field(
        10.0, description="Longest a request waits in line before a 503 with Retry-After."
    )
    # What one client's connection may hold (api.serving, api.http.RequestBody).
    api_header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a request's headers may take to arrive, counted from the "
        "connection's start or the previous response; then 408 (an idle connection is closed).",
    )
    api_body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest a request's body may take to arrive once its headers are in; then "
        "408 and the connection closed. Bodies are read whole before a request is admitted.",
    )
    api_keep_alive_s: int = Field(
        5, ge=1, description="Seconds an idle connection is kept between requests."
    )
    api_max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request line and headers; more is a 431."
    )
    api_connections_per_client: int = Field(
        50,
        ge=1,
        description="Open connections one address may hold (trusted proxies excepted); the "
        "request of one more is answered 503.",
    )
    api_max_connections: int = Field(
        2000,
        ge=1,
        description="Open connections and requests in progress beyond which new requests are "
        "answered 503 (uvicorn's limit_concurrency).",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (JSON list) of the proxies in front of the API: only "
        "their X-Forwarded-For and X-Forwarded-Proto are believed, and they are not held to "
        "api_connections_per_client. Empty: every peer is the client (no proxy headers).",
    )
    estimates_per_team: int = Field(
        2,
        ge=1,
        description="Estimates one team may have computing at once (a long one takes seconds "
        "of CPU); more are answered 429 with Retry-After.",
    )
    auth_cache_s: float = Field(
        5.0,
        ge=0,
        description="How long a token that authenticated is remembered (no query). A revocation "
        "made outside this process (admin CLI, another replica) applies within this time; 0 "
        "checks the database on every request.",
    )
    log_followers_per_team: int = Field(
        8, description="Concurrent `logs?follow=true` streams per team; more get 429."
    )
    default_team: str = "default"
    credentials_file: Path = Field(
        Path.home() / ".config" / "gpujobs" / "credentials.json",
        description="Where `make run` writes the default team's token for the CLI and SDK.",
    )
    admin_token: str = Field(
        "",
        description="Bearer token for the admin API; empty disables it (`make run` generates one "
        "into `home`/admin_token).",
    )
    metrics_token: str = Field(
        "",
        description="Bearer token for the per-team series on /metrics; empty = aggregates only.",
    )
    # What a job may run besides the built-in workloads: modules under these dotted prefixes
    # (a prefix matches whole components: `acme` allows `acme.x`, not `acmeevil`). JSON in env.
    workload_module_prefixes: list[str] = Field(
        default_factory=list,
        description='Module prefixes every team may run as a workload, e.g. ["acme.models"].',
    )
    team_workload_module_prefixes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per team name, prefixes added to workload_module_prefixes for that team.",
    )

    # Control loop
    broker_url: str = Field("", description="Celery broker (redis://...); empty = in-process loop.")
    schedule_interval_s: float = 2.0
    reconcile_interval_s: float = 2.0
    claim_ttl_s: float = 60.0
    schedule_batch: int = 1000
    no_capacity_backoff_s: float = 300.0
    restart_hours: float = Field(
        RESTART_HOURS,
        description="Provisioning + restore time of a new attempt, as the policy sees it; "
        f"unset: {RESTART_HOURS} on Kubernetes (a node to provision), {LOCAL_RESTART_HOURS} "
        "with the local launcher (a process to start).",
    )
    gpu_speeds: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_SPEEDS),
        description="Training speed of each GPU model relative to an A100 (JSON object), which "
        "converts a job's hours between the GPU models it allows; what is set here replaces "
        "those models' figures in a rough default table (api.pricing.gpu_speed), and {} makes "
        "every model alike; unset: that "
        "table on Kubernetes, every model alike with the local launcher (its processes run on "
        "this machine whatever offer they are placed on).",
    )
    standby: bool = Field(
        True,
        description="Make-before-break: while a job runs on on-demand, hold a standby attempt on "
        "spot beside it where the policy finds one worth its minutes, and hand the job over at "
        "a checkpoint once the standby's trainer waits (where the launcher can).",
    )
    launch_timeout_s: float = 600.0
    first_report_warn_s: float = Field(
        600.0,
        gt=0,
        description="A running attempt whose trainer has not reported progress this long after "
        "it was first seen running (a hung import, a deadlock, a loader that never yields): its "
        "job's status and events say so, with its log's last lines. A trainer starts in "
        "seconds to a few minutes (imports, the model, the data, a checkpoint restored) and "
        "reports every few seconds from its first steps.",
    )
    first_report_fail_s: float = Field(
        3600.0,
        gt=0,
        description="After this long without a first report the attempt is stopped and its "
        "job FAILED, not retried (a trainer that hung at start hangs again), billed until it "
        "stopped. Raise both for a trainer that restores a checkpoint of hundreds of GB.",
    )
    worker_metrics_port: int = Field(0, description="Serve the worker's /metrics here; 0 = off.")

    # Launchers
    launcher: str = Field(
        DEFAULT_LAUNCHER,
        description="What runs trainers: `local` (processes on the worker's machine) or "
        "`kubernetes` (a Job per attempt; deploy/README.md).",
    )
    local_max_ranks: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="Local launcher: the most ranks one job may run, one process per GPU it "
        "asks for, all on the worker's machine (with the default DataLoader workers each); "
        "more is refused at submit and estimate. Default: the CPU count where it is read, so "
        "set it for the API too when the worker runs on another machine.",
    )
    checkpoint_uri: str = Field("", description="Checkpoint root; empty = `home`/checkpoints.")
    s3_endpoint_url: str = ""
    storage_credentials: Literal["static", "iam_users"] = Field(
        "static",
        description="What S3 keys a trainer gets (docs/security.md). static: the launcher's "
        "trainer keys (GPUJOBS_TRAINER_S3_*, GPUJOBS_K8S_TRAINER_S3_*), one set for every job, "
        "or none (IRSA, workload identity). iam_users: an identity per attempt, minted through "
        "the S3 store's IAM API (SeaweedFS's embedded one, with -s3.iam.readOnly=false) with "
        "the control plane's own keys, allowed only its job's checkpoint prefix, deleted when "
        "the attempt ends.",
    )
    storage_iam_endpoint_url: str = Field(
        "", description="iam_users: the IAM API; empty = s3_endpoint_url (SeaweedFS serves both)."
    )
    storage_revoke_interval_s: float = Field(
        300.0,
        gt=0,
        description="iam_users: a reconciling pass lists every IAM user (to delete those of "
        "ended attempts) when an attempt has ended since its last listing, when a revocation "
        "failed, and otherwise this often (for an attempt whose end a worker's lagging clock "
        "dated before the listing, or one gone from the database).",
    )
    trainer_home: Path | None = Field(
        None,
        description="Trainers' directories (attempts, local checkpoints, the runtime they run "
        "on); empty = `home`, unless the server is root and `home` lies in a folder other users "
        "cannot pass (a clone under /root): then /var/lib/gpujobs/<hash of home>.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # A group reads its members' own GPUJOBS_ names; GPUJOBS_LOCAL or GPUJOBS_KUBERNETES
        # would otherwise be read as a whole group's JSON, overriding those names (or failing
        # every process at start when it is not JSON). They are no settings: ignored.
        return (init_settings, _WithoutGroups(settings_cls), dotenv_settings, file_secret_settings)

    @model_validator(mode="before")
    @classmethod
    def _into_launcher_groups(cls, data: Any) -> Any:
        """A launcher's setting given by its own name (Settings(spot_market="trace")) goes to
        its launcher's group, read from the environment for the rest, as it always was."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for group, model in LAUNCHER_GROUPS.items():
            given = {name: data.pop(name) for name in list(data) if name in model.model_fields}
            if given:
                if group in data:
                    raise ValueError(f"{', '.join(given)}: given twice, by name and in {group}")
                data[group] = model(**given)
        return data

    @field_validator("launcher")
    @classmethod
    def _a_known_launcher(cls, value: str) -> str:
        if value not in LAUNCHER_GROUPS:
            known = ", ".join(sorted(LAUNCHER_GROUPS))
            raise ValueError(f"no launcher named {value!r} (known: {known})")
        return value

    @model_validator(mode="after")
    def _launcher_defaults(self) -> Settings:
        # Quotes and the deadline rule price each restart: what one costs is the launcher's
        # (a node's provisioning is not a process start).
        traits = self.launcher_traits()
        if "restart_hours" not in self.model_fields_set:
            self.restart_hours = traits.restart_hours
            self.__pydantic_fields_set__.discard("restart_hours")  # still the default, not set
        if "gpu_speeds" not in self.model_fields_set and traits.gpu_models_alike:
            self.gpu_speeds = {}
            self.__pydantic_fields_set__.discard("gpu_speeds")
        return self

    @field_validator("checkpoint_uri")
    @classmethod
    def _a_root_every_process_reads_alike(cls, value: str) -> str:
        """Checked at start: a job records its prefix under this root at its first launch and
        keeps it, so a root the trainers or the API cannot read would stay with those jobs."""
        if not value:
            return value
        location = parse_uri(value)  # its ValueError names the URI and the forms it takes
        if isinstance(location, LocalLocation) and not location.directory.is_absolute():
            raise ValueError(
                f"checkpoint URI {value!r}: a local root must be an absolute path (trainers "
                "and the API run in other directories)"
            )
        return value

    @field_validator("gpu_speeds")
    @classmethod
    def _over_the_table(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [model for model, speed in value.items() if not speed > 0 or speed == float("inf")]
        if bad:
            raise ValueError(f"GPU speeds must be positive and finite: {', '.join(bad)}")
        # The models not named keep the table's figure: counted as fast as an A100, an L4 left
        # out would be priced at four times its speed. `{}` says every model is alike.
        return over_the_table(value) if value else {}

    @field_validator("workload_module_prefixes")
    @classmethod
    def _prefixes(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not valid_prefix(p)]
        if bad:
            raise ValueError(f"not dotted module paths: {bad}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, value: list[str]) -> list[str]:
        bad = []
        for proxy in value:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                bad.append(proxy)
        if bad:
            raise ValueError(f"not addresses or networks (e.g. 10.0.0.0/8): {bad}")
        return value

    @field_validator("team_workload_module_prefixes")
    @classmethod
    def _team_prefixes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for prefixes in value.values():
            cls._prefixes(prefixes)
        return value

    def workload_prefixes_for(self, team: str) -> list[str]:
        """The module prefixes a job of `team` may run: the deployment's and the team's own."""
        own = self.team_workload_module_prefixes.get(team, [])
        return sorted({*self.workload_module_prefixes, *own})

    def make_home(self) -> Path:
        """GPUJOBS_HOME: trainers (other uids) may pass through to their own directories in it,
        never list it; what is secret in it (the SQLite database) is private on its own."""
        if not self.home.is_dir():
            self.home.mkdir(parents=True, exist_ok=True)
            self.home.chmod(0o711)
        return self.home

    def trainer_home_dir(self) -> Path:
        """Where trainers' directories live. Trainers run as other uids when the server is root,
        and must reach them; the server's secrets in `home` must stay out of their reach, so a
        `home` they cannot pass is never opened up: their directories move out instead."""
        if self.trainer_home is not None:
            return self.trainer_home
        home = self.home.absolute()
        if os.geteuid() != 0 or _others_may_pass(home):
            return self.home
        return TRAINER_HOMES / hashlib.sha256(str(home).encode()).hexdigest()[:16]

    def make_trainer_home(self) -> Path:
        """The trainers' directory, created so that they may pass through it, not list it."""
        directory = self.trainer_home_dir()
        if directory == self.home:
            return self.make_home()
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            for folder in {directory, TRAINER_HOMES} & {directory, directory.parent}:
                folder.chmod(0o711)
        return directory

    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gpujobs.db').resolve()}"

    def launcher_group(self) -> LauncherSettings:
        """The settings of the launcher GPUJOBS_LAUNCHER names (its group)."""
        group = getattr(self, self.launcher)
        assert isinstance(group, LauncherSettings), self.launcher
        return group

    def launcher_traits(self) -> LauncherTraits:
        """What the configured launcher is to the rest, as its settings make it."""
        return self.launcher_group().traits()

    def market_time_scale(self) -> float:
        """Simulated seconds per wall-clock second of the spot market the placement weighs: a
        simulated market (the local launcher's, GPUJOBS_SPOT_TRACE_TIME_SCALE) runs its own
        clock, and reasons that give its durations say so; 1 for a real market."""
        return self.launcher_traits().market_time_scale

    def api_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def checkpoint_root(self) -> str:
        return self.checkpoint_uri or str((self.trainer_home_dir() / "checkpoints").resolve())


def _others_may_pass(path: Path) -> bool:
    """Every existing folder down to `path` lets any user through (o+x)."""
    for folder in reversed([path, *path.parents]):
        try:
            mode = folder.stat().st_mode
        except FileNotFoundError:
            return True  # created later, by make_home, passable
        if not mode & stat.S_IXOTH:
            return False
    return True


def setting_names() -> list[str]:
    """Every setting an operator can give, as GPUJOBS_<NAME> or Settings(name=...): the groups'
    settings by their own names, not the groups'."""
    names = [name for name in Settings.model_fields if name not in LAUNCHER_GROUPS]
    for model in LAUNCHER_GROUPS.values():
        names.extend(model.model_fields)
    return names


class _WithoutGroups(EnvSettingsSource):
    """The environment, less the launcher groups' own names."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name in LAUNCHER_GROUPS:
            return None, field_name, False
        return super().get_field_value(field, field_name)


@lru_cache
def get_settings() -> Settings:
    return Settings()
