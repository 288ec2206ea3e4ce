"""What the admin endpoints for teams and tokens accept and return.

A token is shown in clear exactly once, in the answer that creates it; the server keeps only its
SHA-256. Listings show a token's id and first characters (`prefix`), never the token.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpujobs.spec import NAME_PATTERN

# A label is free text for people, but never control characters (PostgreSQL refuses NUL).
LABEL_PATTERN = r"^[^\x00-\x1f\x7f]*$"
MIN_EXPIRY_S = 60
MAX_EXPIRY_S = 10 * 366 * 86400


class TokenRequest(BaseModel):
    """A new token for a team: an optional label and lifetime."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field("", max_length=100, pattern=LABEL_PATTERN, description="A label for people.")
    expires_in_seconds: int | None = Field(
        None,
        ge=MIN_EXPIRY_S,
        le=MAX_EXPIRY_S,
        description="Lifetime from now; omitted or null: the token does not expire.",
    )


class TeamRequest(BaseModel):
    """A new team; its first token is returned once."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="Lowercase letters, digits and '-'; starts and ends with a letter or digit.",
    )
    token: TokenRequest = Field(
        default_factory=lambda: TokenRequest(), description="The first token."
    )


class TokenInfo(BaseModel):
    """A token as listings show it: never the token itself."""

    id: str
    name: str = Field(description="The label given when it was created.")
    prefix: str = Field(description="The token's first characters, to recognise it.")
    team: str
    job_id: str | None = Field(None, description="Set for a trainer's job-scoped token.")
    created_at: datetime
    last_used_at: datetime | None = Field(
        None, description="Last accepted use, to within a minute; None: never used."
    )
    expires_at: datetime | None = Field(None, description="None: never expires.")
    revoked_at: datetime | None = None
    active: bool = Field(description="Neither revoked nor expired.")


class TokenList(BaseModel):
    items: list[TokenInfo] = Field(description="Oldest first.")


class IssuedToken(BaseModel):
    """A new token, in clear: store it now, it cannot be shown again."""

    token: str
    info: TokenInfo


class TeamInfo(BaseModel):
    id: str
    name: str
    created_at: datetime


class TeamList(BaseModel):
    items: list[TeamInfo] = Field(description="By name.")


class CreatedTeam(BaseModel):
    """A new team and its first token, in clear: store it now, it cannot be shown again."""

    team: TeamInfo
    token: str
    token_info: TokenInfo
