"""How many `logs?follow=true` streams each team holds: a follower costs a poll a second, so a
team gets a bounded number and the rest are told to come back (429)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from api.errors import TooManyRequests


@dataclass
class Followers:
    limit: int
    _held: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, *, team_id: str) -> Lease:
        with self._lock:
            if self._held[team_id] >= self.limit:
                raise TooManyRequests(
                    f"this team already follows {self.limit} log streams; close one or "
                    "read without follow=true"
                )
            self._held[team_id] += 1
        return Lease(self, team_id)

    def held(self, team_id: str) -> int:
        with self._lock:
            return self._held[team_id]

    def _give_back(self, team_id: str) -> None:
        with self._lock:
            self._held[team_id] -= 1
            if self._held[team_id] <= 0:
                del self._held[team_id]


class Lease:
    """One follower's place; releasing it twice gives it back once."""

    def __init__(self, followers: Followers, team_id: str) -> None:
        self._followers = followers
        self._team_id = team_id
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._followers._give_back(self._team_id)
