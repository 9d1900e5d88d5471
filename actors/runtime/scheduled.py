"""The queue of a scheduled actor: inputs wait in a role-aware scheduler and leave in one-role
batches, best priority first (no NATS here: the runtime and the in-memory harness share it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from actors.base import Context, ScheduledActor, Work
from schedulers.batching import Job, RoleScheduler
from schedulers.priority import PriorityPolicy

T = TypeVar("T")


class WorkQueue(Generic[T]):
    """A ``RoleScheduler`` holding payloads (deliveries), with the count of those being worked on."""

    def __init__(self, actor: ScheduledActor, fifo: bool = False) -> None:
        self.sched = RoleScheduler(PriorityPolicy(), actor.max_batch, actor.token_budget, fifo=fifo)
        self.working = 0

    def __len__(self) -> int:
        return len(self.sched)

    @property
    def waiting(self) -> int:
        """Inputs queued or in the batch being handled."""
        return len(self.sched) + self.working

    def add(self, key: int, payload: T, work: Work, ctx: Context, run: str, now_ms: int) -> None:
        assert ctx.run is not None
        deadline = ctx.run.started_at_ms + work.deadline_ms if work.deadline_ms else 0
        self.sched.add(Job(
            key=key, role=work.role, arrival_ms=now_ms, tokens=work.tokens,
            weight=self.sched.policy.weight(work.weight), deadline_ms=deadline,
            batch_key=(run, work.role, work.batch_key), payload=payload,
        ))

    def expired(self, now_ms: int) -> list[T]:
        return [job.payload for job in self.sched.expired(now_ms)]

    def next_batch(self, now_ms: int) -> tuple[str, list[T]] | None:
        """The next batch (its role and payloads), or None when nothing is ready."""
        batch = self.sched.next_batch(now_ms)
        if not batch:
            return None
        return batch[0].role, [job.payload for job in batch]

    def served(self, role: str, now_ms: int) -> None:
        self.sched.served(role, now_ms)

    def jobs(self) -> Iterator[Job]:
        return iter(self.sched)
