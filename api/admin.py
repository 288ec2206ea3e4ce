"""Operator commands, run where the server's database is reachable (docs/admin.md):

    python -m api.admin create-team NAME [--expires-in 90d]     prints the team's first token once
    python -m api.admin create-token --team NAME [--name LABEL] [--expires-in 30d]
    python -m api.admin list-tokens [--team NAME] [--all] [--json]
    python -m api.admin revoke-token ID
    python -m api.admin list-teams
    python -m api.admin migrate

The operator is trusted: these commands act with the admin's rights, without a token. A new token
goes to stdout alone (so `TOKEN=$(python -m api.admin create-team acme)` works); the rest to stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from api.auth import ADMIN
from api.database import make_engine, make_session_factory, transaction
from api.errors import DomainError
from api.migrate import upgrade_to_head
from api.models import utcnow
from api.settings import Settings
from api.teams import service as teams
from api.tokens import service as tokens
from gpujobs.tokens import MAX_EXPIRY_S, MIN_EXPIRY_S, TokenInfo

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> int:
    """'90d', '12h', '30m', '3600s' or plain seconds, within the API's bounds."""
    match = re.fullmatch(r"(\d{1,12})([smhdw]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r}: use a number and a unit, e.g. 30d, 12h, 90m")
    seconds = int(match[1]) * UNITS[match[2] or "s"]
    if not MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S:
        raise argparse.ArgumentTypeError(
            f"{text!r}: between {MIN_EXPIRY_S} s and {MAX_EXPIRY_S // 86400} days"
        )
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m api.admin")
    commands = parser.add_subparsers(dest="command", required=True)
    team = commands.add_parser("create-team", help="create a team and print its first token once")
    team.add_argument("name")
    team.add_argument("--expires-in", type=duration, help="e.g. 90d (default: none)")
    token = commands.add_parser("create-token", help="print a new token for an existing team")
    token.add_argument("team_name", nargs="?", metavar="TEAM", help="same as --team")
    token.add_argument("--team", dest="team_option", metavar="TEAM")
    token.add_argument("--name", default="cli", help="a label shown in list-tokens")
    token.add_argument("--expires-in", type=duration, help="lifetime, e.g. 30d (default: none)")
    listing = commands.add_parser("list-tokens", help="list tokens (never the tokens themselves)")
    listing.add_argument("--team")
    listing.add_argument("--all", action="store_true", help="also revoked and expired ones")
    listing.add_argument("--json", action="store_true")
    revoke = commands.add_parser("revoke-token", help="revoke a token by its id (list-tokens)")
    revoke.add_argument("id")
    commands.add_parser("list-teams", help="list teams")
    commands.add_parser("migrate", help="apply database migrations")
    return parser


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M")


def _state(info: TokenInfo) -> str:
    if info.revoked_at is not None:
        return "revoked"
    return "active" if info.active else "expired"


def format_tokens(items: list[TokenInfo]) -> str:
    rows = [("ID", "TEAM", "NAME", "PREFIX", "JOB", "CREATED", "LAST USED", "EXPIRES", "STATE")]
    for info in items:
        rows.append(
            (
                info.id,
                info.team,
                info.name or "-",
                info.prefix + "...",
                info.job_id or "-",
                _when(info.created_at),
                _when(info.last_used_at),
                _when(info.expires_at),
                _state(info),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


# A command returns what goes to stdout and a note for stderr, printed once its transaction has
# committed: a token is never shown unless it was stored.
Output = tuple[str, str]


def _command(args: argparse.Namespace) -> Callable[[Session], Output]:
    now = utcnow()

    def create_team(session: Session) -> Output:
        _, issued = teams.add_team(
            session, name=args.name, now=now, expires_in_seconds=args.expires_in
        )
        return issued.token, f"created team {args.name!r}; this token is not shown again"

    def create_token(session: Session) -> Output:
        name = args.team_option or args.team_name
        if not name:
            raise DomainError("name the team: create-token --team NAME")
        issued = tokens.create_token(
            session,
            principal=ADMIN,
            team_name=name,
            now=now,
            name=args.name,
            expires_in_seconds=args.expires_in,
        )
        return issued.token, f"token {issued.info.id} for team {name!r}; not shown again"

    def list_tokens(session: Session) -> Output:
        listing = tokens.list_tokens(
            session, principal=ADMIN, now=now, team_name=args.team, include_inactive=args.all
        )
        if args.json:
            return listing.model_dump_json(indent=2), ""
        return format_tokens(listing.items), ""

    def revoke_token(session: Session) -> Output:
        info = tokens.revoke_token(session, principal=ADMIN, token_id=args.id, now=now)
        return f"revoked token {info.id} ({info.prefix}...) of team {info.team!r}", ""

    def list_teams(session: Session) -> Output:
        listing = teams.list_teams(session, principal=ADMIN).items
        return "\n".join(f"{team.name}\t{_when(team.created_at)}" for team in listing), ""

    return {
        "create-team": create_team,
        "create-token": create_token,
        "list-tokens": list_tokens,
        "revoke-token": revoke_token,
        "list-teams": list_teams,
    }[args.command]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings()
    engine = make_engine(settings)
    upgrade_to_head(engine)
    if args.command == "migrate":
        print("database is at the latest migration")
        return 0
    command = _command(args)
    try:
        with transaction(make_session_factory(engine)) as session:
            out, note = command(session)
    except DomainError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    if out:
        print(out)
    if note:
        print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
