"""How full the spreadsheet is: Google's cell limit, for ``sheetq status``.

A Google spreadsheet holds at most 10,000,000 cells, counted over every worksheet's grid
(rows × columns, empty cells included): "Spreadsheets: Up to 10 million cells or 18,278
columns" (Google Drive Help, "Files you can store in Google Drive",
https://support.google.com/drive/answer/37603). Past it, Google refuses the writes that
would grow a grid, so appends (new tasks, log rows) fail.

What is counted: every worksheet's grid (``rowCount`` × ``columnCount``) — Queue, QueueLog,
QueueArchive, QueueLogArchive, the Dashboard and a manager's own worksheets alike — from one
``spreadsheets.get`` of the worksheets' properties (``Gridded.grid_sizes``), the second of
``status``'s two requests.

The rate: tasks whose ``created_at`` is within the last ``RATE_WINDOW`` (7 days), from the
Queue read ``status`` makes anyway (tasks archived within the window are missed: archive
moves rows older than its cutoff, 30 days by default), times the cells one task adds: its
Queue row plus ``LOG_ROWS_PER_TASK`` (3: enqueued, claimed, done) QueueLog rows, at the
widths of those grids. ``full_at`` is when the used cells reach the limit at that rate;
``None`` without tasks in the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from sheetq.port import CellUsage

CELL_LIMIT = (
    10_000_000  # cells per Google spreadsheet (https://support.google.com/drive/answer/37603)
)
WARN_AT = 0.8  # `status` warns from this share of the limit
RATE_WINDOW = timedelta(days=7)
LOG_ROWS_PER_TASK = 3  # enqueued, claimed, done: a task that succeeds at its first attempt


def cell_usage(
    grids: Mapping[str, tuple[int, int]],
    queue: str,
    log: str,
    created: Iterable[datetime | None],
    now: datetime,
) -> CellUsage | None:
    """The usage of every worksheet's grid (``grids``: title → (rows, columns)); ``None``
    without grids (the local backend). ``created``: the Queue rows' ``created_at``."""
    if not any(columns for _rows, columns in grids.values()):
        return None
    used = sum(rows * columns for rows, columns in grids.values())
    since = now - RATE_WINDOW
    recent = sum(1 for c in created if c is not None and since <= c <= now)
    full_at = None
    queue_width = grids.get(queue, (0, 0))[1]
    log_width = grids.get(log, (0, 0))[1]
    per_task = queue_width + LOG_ROWS_PER_TASK * log_width
    if recent and per_task:
        per_second = recent * per_task / RATE_WINDOW.total_seconds()
        left = max(0, CELL_LIMIT - used)
        full_at = now + timedelta(seconds=left / per_second)
    return CellUsage(used, CELL_LIMIT, full_at, WARN_AT)
