"""Role-aware batching: the next batch holds work of one role (one voice), picked by priority.

``RoleScheduler`` keeps the waiting jobs of a worker.  ``next_batch(now)`` takes
the best-scored job (``PriorityPolicy``), then more jobs of the same batch key in
order of arrival, up to ``max_batch`` jobs and ``token_budget`` tokens (the first
job always goes, however long).  ``expired(now)`` takes out the jobs whose
deadline has passed, for the caller to drop with an event.  ``fifo=True`` is the
baseline: the oldest job, and the jobs of its key that directly follow it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from schedulers.priority import PriorityPolicy


@dataclass(frozen=True, slots=True)
class Job:
    key: Hashable            # the caller's handle on the work
    role: str
    arrival_ms: int
    tokens: int = 1
    weight: float = 1.0      # the role's effective weight (PriorityPolicy.weight)
    deadline_ms: int = 0     # 0: none
    batch_key: Hashable = None  # what may share a batch (role and voice); None: the role
    payload: Any = field(default=None, compare=False)

    @property
    def group(self) -> Hashable:
        return self.role if self.batch_key is None else self.batch_key


def tokens_of(text: str) -> int:
    """A token count for scheduling: words, or characters for text without spaces (Chinese)."""
    words = len(text.split())
    return max(1, words if words > 1 or text.isascii() else len(text) // 2)


class RoleScheduler:
    """The waiting jobs of one worker and the choice of its next batch."""

    def __init__(
        self, policy: PriorityPolicy | None = None, max_batch: int = 8, token_budget: int = 512,
        fifo: bool = False,
    ) -> None:
        if max_batch < 1 or token_budget < 1:
            raise ValueError("max_batch and token_budget must be at least 1")
        self.policy = policy or PriorityPolicy()
        self.max_batch = max_batch
        self.token_budget = token_budget
        self.fifo = fifo
        self._jobs: dict[int, Job] = {}   # insertion order is arrival order
        self._order = itertools.count()
        self._deadlines: list[tuple[int, int]] = []
        self.last_role: str | None = None
        self.last_end_ms: int | None = None

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def add(self, job: Job) -> None:
        n = next(self._order)
        self._jobs[n] = job
        if job.deadline_ms:
            heapq.heappush(self._deadlines, (job.deadline_ms, n))

    def expired(self, now_ms: int) -> list[Job]:
        """Take out and return the jobs whose deadline is before ``now_ms``."""
        out = []
        while self._deadlines and self._deadlines[0][0] < now_ms:
            _, n = heapq.heappop(self._deadlines)
            job = self._jobs.pop(n, None)
            if job is not None:
                out.append(job)
        return out

    def score(self, job: Job, now_ms: int) -> float:
        p = self.policy
        return p.score(job.weight, now_ms - job.arrival_ms,
                       p.continuing(job.role, self.last_role, self.last_end_ms, now_ms))

    def next_batch(self, now_ms: int) -> list[Job]:
        """The next batch to run (empty when nothing waits); its jobs leave the queue."""
        if not self._jobs:
            return []
        items = list(self._jobs.items())
        if self.fifo:
            first_n, first = items[0]
            chosen = [first_n]
            tokens = first.tokens
            for n, job in items[1:]:
                if job.group != first.group or len(chosen) >= self.max_batch or tokens + job.tokens > self.token_budget:
                    break
                chosen.append(n)
                tokens += job.tokens
        else:
            # Best score; ties go to the earlier arrival (items are in arrival order).
            first_n, first = max(items, key=lambda it: (self.score(it[1], now_ms), -it[0]))
            chosen = [first_n]
            tokens = first.tokens
            # Companions keep the aging bound too: none arrived more than D after the oldest job.
            latest = min(j.arrival_ms for _, j in items) + self.policy.overtake_bound_ms
            for n, job in items:
                if len(chosen) >= self.max_batch or job.arrival_ms > latest:
                    break
                if n == first_n or job.group != first.group or tokens + job.tokens > self.token_budget:
                    continue
                chosen.append(n)
                tokens += job.tokens
        return [self._jobs.pop(n) for n in chosen]

    def served(self, role: str, end_ms: int) -> None:
        """Tell the scheduler a batch of ``role`` finished at ``end_ms`` (for the continuity bonus)."""
        self.last_role, self.last_end_ms = role, end_ms
