"""Operator commands: `python -m api.admin create-team NAME` prints the team's token once."""

from __future__ import annotations

import argparse
import sys

from api.database import make_engine, make_session_factory, transaction
from api.errors import DomainError
from api.migrate import upgrade_to_head
from api.settings import Settings
from api.teams import service as teams


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.admin")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create-team", help="create a team and print its token once")
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="the team's token may administer")
    token = commands.add_parser("create-token", help="print a new token for an existing team")
    token.add_argument("name")
    commands.add_parser("migrate", help="apply database migrations")
    args = parser.parse_args(argv)

    settings = Settings()
    engine = make_engine(settings)
    upgrade_to_head(engine)
    if args.command == "migrate":
        print("database is at the latest migration")
        return 0
    factory = make_session_factory(engine)
    try:
        with transaction(factory) as session:
            if args.command == "create-team":
                _, secret = teams.create_team(session, name=args.name, is_admin=args.admin)
            else:
                secret = teams.create_token(session, name=args.name)
    except DomainError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    print(secret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
