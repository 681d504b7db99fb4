"""The storage port: shaped like what a spreadsheet offers (docs/design.md §10).

* ``open()`` — the workbook: worksheet titles, header rows, time zone, leases.
* ``read(reads)`` — the columns asked for, with sheet row numbers, in one round trip.
* ``open_with(reads, layout)`` — ``open()`` and ``read(reads)`` together; on Google one
  round trip when the key columns sit where ``layout`` says (``init``'s order).
* ``apply(changes)`` — one atomic change set: cell updates (rows re-located by
  their key right before writing), row appends, row deletions and a lease
  compare-and-set, across worksheets. All or nothing.
* ``read_then_apply(reads, plan)`` — a read, change sets planned from it, and their
  writes, in order; where the backend has transactions (the local one) all of it is one
  transaction, so a key checked free is still free when its row is inserted.

Row numbers are 1-based sheet rows; row 1 is the header. Values are what a
cell holds: ``str``, ``int``/``float`` (numbers), ``bool``, or ``None``/``""``
for empty. The queue logic above this never imports an adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sheetq.errors import SchemaError

# re-exported: the values a worksheet holds
from sheetq.model import CellValue as CellValue
from sheetq.model import Row as Row
from sheetq.model import cell_text as cell_text

# What ``str.strip()`` strips (every character whose ``isspace()`` is true), spelled out for
# a backend whose own trim must agree with it (SQLite's ``trim(X, Y)``).
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


class Formula(str):
    """A cell written as a spreadsheet formula (``formulaValue``). Everything else sheetq
    writes is data; only the Dashboard (`sheetq init --dashboard`) writes formulas. The
    local backend, which has no formula engine, stores the formula text."""

    __slots__ = ()


def column_letter(index: int) -> str:
    """0 → ``A``, 25 → ``Z``, 26 → ``AA``."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


@dataclass(frozen=True)
class SheetInfo:
    """A worksheet: title, numeric id, and its header row as text (``""`` for blank cells);
    ``row_count`` × ``column_count`` is its grid (cells Google counts; 0 on the local
    backend, which has no grid)."""

    title: str
    sheet_id: int
    header: tuple[str, ...]
    row_count: int = 0
    column_count: int = 0

    def columns(self, owned: Sequence[str] = ()) -> dict[str, int]:
        """Header name → 0-based column index. Blank headers are ignored.

        Raises ``SchemaError`` when one of the ``owned`` names appears twice,
        naming the columns: sheetq cannot tell which one to use.
        """
        found: dict[str, int] = {}
        for index, name in enumerate(self.header):
            if not name:
                continue
            if name in found and name in owned:
                raise SchemaError(
                    f"worksheet '{self.title}': column '{name}' appears twice (columns "
                    f"{column_letter(found[name])} and {column_letter(index)}); rename or remove "
                    "one of them"
                )
            found.setdefault(name, index)
        return found

    def missing(self, required: Sequence[str]) -> list[str]:
        present = set(self.header)
        return [name for name in required if name not in present]


@dataclass(frozen=True)
class WorkbookInfo:
    title: str
    sheets: Mapping[str, SheetInfo]
    time_zone: str = "UTC"
    locale: str = "en_US"
    url: str = ""
    leases: Mapping[str, str] = field(default_factory=dict)

    def sheet(self, title: str) -> SheetInfo:
        try:
            return self.sheets[title]
        except KeyError:
            raise SchemaError(
                f"worksheet '{title}' not found in '{self.title}'; run `sheetq init` to create it"
            ) from None


@dataclass(frozen=True)
class Read:
    """Columns of a worksheet. ``columns=None``: every named column; ``rows=None``:
    every data row (``planned``: every row a batch plan can need)."""

    worksheet: str
    columns: tuple[str, ...] | None = None
    rows: tuple[int, ...] | None = None
    # Only the rows a `process` batch plan can need (``sheetq.sheet.plan.plan_needs``): a
    # backend that can filter where the rows are (the local one) leaves the others out and
    # answers a snapshot that is not ``whole``; one that cannot returns every row.
    planned: bool = False


@dataclass
class Snapshot:
    """Rows of one worksheet as read. ``columns``: the column names the read asked for and
    got (``None``: unknown, e.g. rows read by position); ``whole``: every data row was
    read (not only some row numbers), so the snapshot can re-locate any task."""

    worksheet: str
    header: tuple[str, ...]
    rows: list[Row]
    columns: tuple[str, ...] | None = None
    whole: bool = False

    def covers(self, columns: Iterable[str]) -> bool:
        """Whether this is a whole-worksheet read holding all of ``columns``."""
        return self.whole and self.columns is not None and set(columns) <= set(self.columns)


@dataclass(frozen=True)
class UpdateRow:
    """Write ``values`` (by column name) into the row whose ``key_column`` holds ``key``.

    ``row`` is where it was last seen; the adapter re-locates it by key right
    before writing. ``key=None`` writes at ``row`` as is (only for `init`).
    """

    worksheet: str
    key: str | None
    row: int
    values: Mapping[str, CellValue]
    key_column: str = "task_id"


@dataclass(frozen=True)
class AppendRow:
    worksheet: str
    values: Mapping[str, CellValue]


@dataclass(frozen=True)
class DeleteRow:
    """Delete the row holding ``key`` (re-located like ``UpdateRow``; ``key=None``: the row
    at ``row``, read moments ago — only for a row without a key, like a manager's note)."""

    worksheet: str
    key: str | None
    row: int
    key_column: str = "task_id"


@dataclass(frozen=True)
class MoveRow:
    """Move the row holding ``key`` (last seen at ``row``) from ``worksheet`` to the end of
    ``to``, every named column by header name, and delete it from ``worksheet``.

    A destructive change: the Google adapter copies and deletes *by position* in one atomic
    request (the API has no delete by content), so what it really removed is always kept in
    ``to``; it then reads back what arrived and reports rows that were not the ones meant
    (``ApplyResult.misplaced``) for the caller to put back. The local backend re-locates by
    key inside its transaction."""

    worksheet: str
    to: str
    key: str
    row: int
    key_column: str = "task_id"


@dataclass(frozen=True)
class LeaseChange:
    """Compare-and-set on a named lease: expect ``replaces`` (``None``: absent), set ``token``
    (``None``: release). Fails with ``LeaseConflict`` and changes nothing otherwise."""

    name: str
    token: str | None
    replaces: str | None


@dataclass
class ChangeSet:
    updates: list[UpdateRow] = field(default_factory=list)
    appends: list[AppendRow] = field(default_factory=list)
    deletes: list[DeleteRow] = field(default_factory=list)
    lease: LeaseChange | None = None
    moves: list[MoveRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.updates or self.appends or self.deletes or self.lease or self.moves)

    def extend(self, other: ChangeSet) -> None:
        self.updates.extend(other.updates)
        self.appends.extend(other.appends)
        self.deletes.extend(other.deletes)
        self.moves.extend(other.moves)
        if other.lease is not None:
            self.lease = other.lease


@dataclass
class ApplyResult:
    """What an ``apply`` did.

    * ``missing``: keys of updates / deletes / moves whose row was gone (a person deleted it);
    * ``rows``: key → the row an update holds now (after verification);
    * ``positions``: worksheet → {key → row} for every keyed row, when the adapter read
      the whole key column (so the caller knows where every task is now);
    * ``moved``: keys of moves that arrived in their destination;
    * ``misplaced``: rows a move carried that were not the ones meant (a person sorted or
      inserted rows between the read and the write), as {column: value}; they are in the
      destination worksheet and the caller puts them back;
    * ``repaired``: human-readable lines about writes that landed on the wrong rows and
      were put right (Google only).
    """

    missing: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    misplaced: list[dict[str, CellValue]] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)


@dataclass
class BlockMoved:
    """What ``move_block`` did: ``moved`` rows of the block arrived in the destination;
    ``stray`` rows that were not in the block arrived too (rows moved under the write;
    never lost, never doubled), listed in ``strays`` as they are in the destination (their
    numbers are rows there) for the caller to put back."""

    moved: int = 0
    stray: int = 0
    strays: list[Row] = field(default_factory=list)


def row_identity(row: Row, columns: Sequence[str]) -> tuple[str, ...]:
    """A row's cells in ``columns`` as text: what tells two log rows apart."""
    return tuple(row.text(name).strip() for name in columns)


@runtime_checkable
class Gridded(Protocol):
    """A store whose worksheets are grids that count against a cell limit (Google)."""

    def grid_sizes(self) -> dict[str, tuple[int, int]]:
        """Every worksheet's grid, title → (rows, columns), a manager's own worksheets
        included: what Google counts against its cell limit. One ``spreadsheets.get`` of the
        worksheets' properties only (no ranges, no cells)."""
        ...


class Store(Protocol):
    """What sheetq needs from a spreadsheet backend."""

    def open(self) -> WorkbookInfo:
        """The workbook, its worksheets' headers and leases. One round trip."""
        ...

    def read(self, reads: Sequence[Read]) -> list[Snapshot]:
        """Several column reads in one round trip, in order."""
        ...

    def open_with(
        self, reads: Sequence[Read], *, layout: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[WorkbookInfo, list[Snapshot]]:
        """``open()`` and ``read(reads)`` (whole-column reads) as one snapshot.

        ``layout``: worksheet → the header it usually has (``init``'s column order). Google
        asks for the header rows and the columns at those guessed positions in the same
        ``spreadsheets.get``: one round trip when the header confirms the guess, one more
        (``read``) for reads whose columns a person moved. A worksheet that does not exist
        gives an empty snapshot (no header, no rows); the caller's schema check names it.
        The local backend opens and reads in one transaction.
        """
        ...

    def apply(
        self,
        changes: ChangeSet,
        *,
        baseline: Sequence[Snapshot] = (),
    ) -> ApplyResult:
        """Apply all changes atomically, every row addressed by its key (docs/design.md §5).

        The local backend re-locates rows inside its transaction. The Google adapter, whose
        API writes only by position, re-locates every keyed row right before the write (a
        whole-column read; a snapshot in ``baseline``, a whole-worksheet read made moments
        ago that covers the key and written columns, stands in for it), and verifies right
        after, by the write's echo or a read: a write that a person's sort, insertion or
        column drag sent elsewhere is put right (the other rows get their values back, the
        targets get theirs), in at most a few rounds. Raises ``LeaseConflict`` if the lease
        compare-and-set fails (nothing written), ``StoreError`` for other failures.
        """
        ...

    def read_then_apply(
        self,
        reads: Sequence[Read],
        plan: Callable[[list[Snapshot]], Sequence[ChangeSet]],
        *,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> list[ApplyResult]:
        """Read, let ``plan`` turn the snapshots into change sets, apply those in order.

        ``snapshots``: ``reads`` as just read (by ``open_with``). Google plans from them
        instead of reading again; the local backend reads again inside its transaction, so
        its check and insert stay one step.

        The local backend runs all of it in one ``BEGIN IMMEDIATE`` transaction: no other
        writer comes between the read and the writes (so enqueue's key check and insert are
        one step, docs/design.md §4), and the change sets commit together. Google has no
        transactions: one read, then one atomic ``batchUpdate`` per change set, so a failure
        between two leaves the earlier ones applied and the later ones not.
        """
        ...

    def move_block(self, worksheet: str, to: str, rows: Sequence[Row], to_end: int) -> BlockMoved:
        """Move consecutive rows, as read (``rows``, whole, numbers ``lo``..``hi``), from
        ``worksheet`` to after row ``to_end`` of ``to``, every named column by header name:
        one atomic write. For rows without a unique key (QueueLog): Google copies and
        deletes *by position* in one ``batchUpdate`` (what it removes is always kept), then
        reads back what arrived and compares each row whole with ``rows``; the local
        backend moves, in one transaction, only the rows still equal to ``rows``. A lost
        reply is checked by that read-back before a resend, so nothing is doubled."""
        ...

    def ensure_worksheets(self, spec: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """Create missing worksheets and append missing header cells; returns what was added
        (worksheet → column names; a new worksheet lists all). Never destroys data."""
        ...

    def fit_grids(self, titles: Sequence[str]) -> list[str]:
        """Trim the grids of ``titles`` to their columns: remove trailing columns beyond
        the last header cell that hold no value in any row (Google counts every grid cell
        against its per-spreadsheet limit). Returns one line per change; the local backend,
        which has no grid, does nothing."""
        ...

    def format_worksheets(self, queue: str, log: str, archive: str) -> list[str]:
        """Cosmetics for people (frozen header, status drop-down, colours, protection).
        Returns what was done, one line each; the local backend does nothing."""
        ...

    def close(self) -> None: ...

    @property
    def requests_made(self) -> int:
        """Round trips to the backend so far (for ``--json`` and benchmarks)."""
        ...

    @property
    def survives_power_loss(self) -> bool:
        """Whether a write this store acknowledged survives a power loss of this host (Google:
        yes; the local workbook: a killed process loses nothing, a power loss may roll back
        its last commits). The host journal fsyncs its records only when it does."""
        ...

    def version(self) -> int | None:
        """A number that changes whenever someone else (another program, another
        connection) commits to the store; this store's own writes leave it as it is. Equal
        numbers at two moments: nothing but this store's writes came in between. ``None``:
        the store cannot tell without reading (Google). The local workbook answers with
        SQLite's ``PRAGMA data_version``, which costs no request."""
        ...

    def link(self, info: WorkbookInfo, worksheet: str, row: int, task_id: str) -> str:
        """Where a person finds the row: a URL for Google, the task id for local."""
        ...
