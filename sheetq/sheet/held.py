"""Rows held by a gone run: what ``status`` tells a person after a crash (docs/design.md §5).

A run holds the queue's run lease (a named range whose token carries its expiry, the
same second as its rows' ``lease_until``) from its claim to its results write. So a
``processing`` row belongs to a run that is gone when no live lease exists, when the live
lease is another run's (its expiry differs from the row's ``lease_until``), when the
row's own ``lease_until`` has passed, or when this host's journal names the run and
nobody holds the host lock (it was killed here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime

from sheetq.config import Settings
from sheetq.model import Status
from sheetq.policy import will_do
from sheetq.port import HeldGroup
from sheetq.sheet.plan import QueueRow


def held_by_gone_runs(
    rows: Sequence[QueueRow],
    *,
    lease_expires: datetime | None,
    now: datetime,
    settings: Settings,
    killed_here: Iterable[str] = (),
    run_lease: bool = True,
) -> list[HeldGroup]:
    """Group ``processing`` rows by run id and keep the runs that are gone (see the module
    docstring). ``lease_expires``: the expiry of the queue's run lease, ``None`` if absent;
    ``killed_here``: run ids in this host's journal while no process holds the host lock.
    ``run_lease=False`` (PostgreSQL, docs/design.md §11: no run lease, any number of runs): a
    run counts as gone only once its rows' lease has passed."""
    killed = set(killed_here)
    live = lease_expires is not None and lease_expires > now
    by_run: dict[str, list[QueueRow]] = {}
    for row in rows:
        if row.status is Status.PROCESSING:
            by_run.setdefault(row.lease_owner, []).append(row)
    out: list[HeldGroup] = []
    for run_id, held in sorted(by_run.items()):
        times = [r.lease_until for r in held]
        readable = [t for t in times if isinstance(t, datetime)]
        until = max(readable) if readable and len(readable) == len(times) else None
        expired = until is not None and until <= now
        running = (not run_lease and until is not None and not expired) or (
            live
            and until is not None
            and not expired
            and lease_expires is not None
            and abs((until - lease_expires).total_seconds()) < 1
            and run_id not in killed
        )
        if running:
            continue
        types = Counter(r.type or "(empty)" for r in held)
        out.append(
            HeldGroup(
                run_id=run_id,
                count=len(held),
                lease_until=until,
                expired=expired or until is None,
                on_unknown={t: will_do(settings, t) for t in sorted(types)},
                by_type=dict(sorted(types.items())),
                journal=run_id in killed,
            )
        )
    return out
