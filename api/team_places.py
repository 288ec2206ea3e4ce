"""What a team may hold at once of something the server pays for while it lasts: a followed log
stream costs a poll a second, an estimate computing seconds of CPU. A team gets a bounded number
of places; one more is told to come back (429 with Retry-After), so one team never takes what
every team shares (the admission places, the thread pool)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from api.errors import TooManyRequests


@dataclass
class TeamPlaces:
    limit: int
    refusal: str  # what a team with every place taken is told; "{limit}" is filled in
    _held: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, *, team_id: str) -> Lease:
        with self._lock:
            if self._held[team_id] >= self.limit:
                raise TooManyRequests(self.refusal.format(limit=self.limit))
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
    """One place; releasing it twice gives it back once."""

    def __init__(self, places: TeamPlaces, team_id: str) -> None:
        self._places = places
        self._team_id = team_id
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._places._give_back(self._team_id)
