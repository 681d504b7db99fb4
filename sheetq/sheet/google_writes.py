"""Writes of the Google adapter, every row addressed by its key (docs/design.md §5).

``apply`` locates the rows (or takes the caller's fresh baseline), writes one atomic
``spreadsheets:batchUpdate`` asking Google to echo what it wrote, and when the echo
disagrees (or is missing) verifies with a read and repairs: rows a sort or an insertion
put under the write get their pre-image back, targets are written where they are now, a
column moved mid-write is undone cell by cell. ``VerifiedWrites`` is a mixin of
``GoogleStore``; it uses the store's transport (``_call``), reads and sheet cache.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sheetq.errors import (
    LeaseConflict,
    StoreError,
)
from sheetq.sheet.google_cells import (
    _ECHO_FIELDS,
    _blank,
    _cell_data,
    _column_spans,
    _columns,
    _delete_rows,
    _echo,
    _grid,
    _holds,
    _index_rows,
    _keyless_preimage,
    _positions,
    _runs,
    _same,
    _Sheet,
    _Written,
    quote_title,
)
from sheetq.sheet.store import (
    ApplyResult,
    CellValue,
    ChangeSet,
    DeleteRow,
    MoveRow,
    Read,
    Row,
    Snapshot,
    UpdateRow,
    cell_text,
)

REPAIR_ROUNDS = 3  # verify-and-repair rounds of one write before giving up


class VerifiedWrites:
    """``apply`` and ``read_then_apply`` of ``GoogleStore`` (see the module docstring)."""

    key: str
    _http: Any
    _titles: tuple[str, ...]
    _sheets: dict[str, _Sheet]
    _rng: random.Random
    _tails: dict[str, int]
    _move_plan: list[tuple[str, int, int]]
    _move_sources: list[tuple[str, int, str, int]]

    if TYPE_CHECKING:

        def read(self, reads: Sequence[Read]) -> list[Snapshot]: ...
        def _sheet(self, title: str) -> _Sheet: ...
        def _url_for(self, suffix: str = "") -> str: ...
        def _batch_get(self, ranges: list[str], what: str) -> list[dict[str, Any]]: ...
        @staticmethod
        def _header_from(answer: Mapping[str, Any]) -> tuple[str, ...]: ...
        def _call(
            self, what: str, send: Callable[[], Any], applied: Callable[[], bool] | None = None
        ) -> Any: ...

    def apply(
        self,
        changes: ChangeSet,
        *,
        baseline: Sequence[Snapshot] = (),
    ) -> ApplyResult:
        """One atomic ``spreadsheets:batchUpdate``, every row addressed by its key.

        The API writes only by position and has no compare-and-set on cells, so (docs/design.md
        §5, "Rows are addressed by task_id"):

        1. *locate*: one ``values:batchGet`` of the whole key column and of every column the
           write changes (the *pre-image* of every row), and the target rows whole at the
           rows where they were last seen (their full pre-image), unless ``baseline``
           snapshots already hold them;
        2. *write*: the updates at the rows just located, appends, moves, the lease CAS. The
           request asks Google to echo, atomically with the write, the header rows and the
           rows it wrote (``includeSpreadsheetInResponse`` + ``responseRanges``): if every
           written row holds its target and the headers are those the write assumed, the
           write is verified at no extra request;
        3. otherwise (or when the endpoint sends no echo) *verify* by reading the same
           columns again: each target must hold what was written; a row that is not a
           target but holds exactly what was meant for one (a person sorted or inserted rows
           between 1 and 2) gets its pre-image back and the target is written again where it
           is now; if a person moved a column between 1 and 2, every written row gets its
           full pre-image and its values back, column by name. Then verified again (at most
           ``REPAIR_ROUNDS`` rounds).

        Moves (archive) copy and delete by position in the same request, so whatever rows
        were really at those positions are kept in the destination; what arrived there is
        read back and rows that were not meant are returned in ``misplaced``.
        """
        result = ApplyResult()
        if not changes:
            return result
        keyed = [u for u in changes.updates if u.key is not None]
        if not keyed and not changes.deletes and not changes.moves:
            if changes:
                written = self._write(changes, {}, result)
                if written.echo is None and written.appends:
                    self._refresh_headers(sorted(written.appends))  # no echo: ask instead
                    if written.headers_moved(self._current_headers()):
                        self._realign_appends(written, result)
                elif written.echo is not None and written.headers_moved():
                    self._realign_appends(written, result)
            return result
        wanted = self._verify_columns(changes)
        before, full = self._located(wanted, baseline, keyed)
        written = self._write(changes, before, result)
        self._result_positions(changes, keyed, before, result)
        if not changes.moves and written.verified_by_echo():
            return result
        moved_to = self._move_plan
        self._move_plan = []
        move_reads = [Read(to, None, rows=tuple(range(lo, hi + 1))) for to, lo, hi in moved_to]
        rounds = 0
        # rows this write appended: not "a row a person added meanwhile" to a repair
        added = {(a.worksheet, cell_text(a.values.get("task_id")).strip()) for a in changes.appends}
        restores: dict[tuple[str, str], UpdateRow] = {}
        keyless: list[UpdateRow] = []  # restores of rows without a key, by position
        if move_reads and written.echo is not None and written.headers_moved():
            self._realign_moves(before, result)
        while True:
            # A column moved before the write (the echo says so): read the written rows whole
            # in the same request, so their repair is planned from the verifying read itself.
            echo_moved = written.echo is not None and written.headers_moved()
            whole = [
                Read(title, None, rows=tuple(sorted(rows)))
                for title, rows in written.cells.items()
                if echo_moved
            ]
            after, extra = self._verify_read(wanted, [*whole, *move_reads])
            prefetched, extra = extra[: len(whole)], extra[len(whole) :]
            if move_reads and self._column_moved(written) and not echo_moved:
                self._realign_moves(before, result)  # no echo: the read just showed it
                after, extra = self._verify_read(wanted, move_reads)
            if move_reads:
                self._check_moves(changes, extra, result)
                move_reads = []
            if self._column_moved(written):
                # A column moved around the write (the echo, atomic with it, says before; with
                # no echo it may have been after): each written row is put right by name.
                repair = self._realign(
                    written,
                    keyed,
                    full,
                    before,
                    after,
                    result,
                    trust=written.echo is not None,
                    prefetched=prefetched,
                )
                repair.extend(self._check(keyed, restores, before, after, result, keyless, added))
            else:
                repair = self._check(keyed, restores, before, after, result, keyless, added)
            if not repair:
                break
            rounds += 1
            if rounds > REPAIR_ROUNDS:
                raise StoreError(
                    "rows kept moving while sheetq wrote to the sheet (a person sorting or "
                    f"inserting rows); {len(repair.updates)} row(s) may need a look: "
                    + ", ".join(sorted(str(u.key) for u in repair.updates if u.key)[:10])
                )
            written = self._write(repair, after, result, repair=True, echo=False)
        result.positions = {}
        for title, snap in after.items():
            column = self._key_column(changes, title)
            result.positions[title] = _positions(snap, column)
        self._result_positions(changes, keyed, after, result)
        return result

    def _result_positions(
        self,
        changes: ChangeSet,
        keyed: Sequence[UpdateRow],
        located: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> None:
        """``result.positions`` and ``result.rows`` from a whole-worksheet read."""
        for title, snap in located.items():
            if snap.whole and title not in result.positions:
                result.positions[title] = _positions(snap, self._key_column(changes, title))
        for update in keyed:
            row = result.positions.get(update.worksheet, {}).get(str(update.key))
            if row is not None and update.key_column == "task_id":
                result.rows[str(update.key)] = row

    def _refresh_headers(self, titles: Sequence[str]) -> None:
        """Read the header rows of ``titles`` (one ``values:batchGet``)."""
        answers = self._batch_get([f"{quote_title(t)}!1:1" for t in titles], "read")
        for title, answer in zip(titles, answers, strict=True):
            header = self._header_from(answer)
            sheet = self._sheet(title)
            if header != sheet.header:
                self._sheets[title] = _Sheet(title, sheet.sheet_id, header, _columns(header))

    def _column_moved(self, written: _Written) -> bool:
        """Whether a person moved a column around ``written``: before it, by its echo; with no
        echo, before or after it, by the headers read since."""
        if written.echo is not None:
            return written.headers_moved()
        return written.headers_moved(self._current_headers())

    def _current_headers(self) -> dict[str, tuple[str, ...]]:
        return {title: sheet.header for title, sheet in self._sheets.items()}

    @staticmethod
    def _key_column(changes: ChangeSet, title: str) -> str:
        items: list[UpdateRow | DeleteRow | MoveRow] = [
            *changes.updates,
            *changes.deletes,
            *changes.moves,
        ]
        for item in items:
            if item.worksheet == title and item.key is not None:
                return item.key_column
        return "task_id"

    @staticmethod
    def _lease_failed(message: str, count: int) -> bool:
        import re

        match = re.search(r"requests\[(\d+)\]\.(\w+)", message)
        if match:
            return int(match.group(1)) < count
        return "named range" in message.lower() or "namedrange" in message.lower()

    def _verify_columns(self, changes: ChangeSet) -> dict[str, tuple[str, ...]]:
        """Worksheet → the columns that locate and verify this write: the key columns, and
        every column an update writes (their pre-image is what a repair puts back)."""
        wanted: dict[str, dict[str, None]] = {}
        for update in changes.updates:
            if update.key is None:
                continue
            cols = wanted.setdefault(update.worksheet, {"task_id": None})
            cols[update.key_column] = None
            for name in update.values:
                cols[name] = None
        removals: list[DeleteRow | MoveRow] = [*changes.deletes, *changes.moves]
        for item in removals:
            cols = wanted.setdefault(item.worksheet, {"task_id": None})
            cols[item.key_column] = None
        for move in changes.moves:
            wanted.setdefault(move.to, {"task_id": None})
        return {title: tuple(cols) for title, cols in wanted.items()}

    def _located(
        self,
        wanted: Mapping[str, tuple[str, ...]],
        baseline: Sequence[Snapshot],
        keyed: Sequence[UpdateRow],
    ) -> tuple[dict[str, Snapshot], dict[str, dict[str, Row]]]:
        """Step 1: per worksheet, a whole-column read (or the caller's fresh baseline), and
        the full pre-image of each target (worksheet → key → its whole row): from a
        baseline that read the rows whole, else read at the rows where they were last
        seen, in the same request."""
        out: dict[str, Snapshot] = {}
        full: dict[str, dict[str, Row]] = {}
        for snap in baseline:
            cols = wanted.get(snap.worksheet)
            if cols is not None and snap.covers(cols) and snap.worksheet not in out:
                out[snap.worksheet] = snap
            elif not snap.whole and snap.columns is not None:
                _index_rows(full, snap, keyed)
        titles = [t for t in wanted if t not in out]
        hints: dict[str, tuple[int, ...]] = {}
        for update in keyed:
            if update.key not in full.get(update.worksheet, {}):
                hints.setdefault(update.worksheet, ())
                hints[update.worksheet] += (update.row,)
        reads = [Read(t, wanted[t]) for t in titles]
        reads += [Read(t, None, rows=tuple(sorted(set(rows)))) for t, rows in hints.items()]
        if reads:
            snaps = self.read(reads)
            out.update(zip(titles, snaps[: len(titles)], strict=True))
            for snap in snaps[len(titles) :]:
                _index_rows(full, snap, keyed)
        return out, full

    def _verify_read(
        self, wanted: Mapping[str, tuple[str, ...]], more: Sequence[Read]
    ) -> tuple[dict[str, Snapshot], list[Snapshot]]:
        """The verifying read: ``wanted`` columns of whole worksheets and the ``more`` reads,
        in one request."""
        titles = list(wanted)
        snaps = self.read([*(Read(t, wanted[t]) for t in titles), *more])
        return dict(zip(titles, snaps[: len(titles)], strict=True)), snaps[len(titles) :]

    def _write(
        self,
        changes: ChangeSet,
        located: Mapping[str, Snapshot],
        result: ApplyResult,
        *,
        repair: bool = False,
        echo: bool = True,
    ) -> _Written:
        """Step 2: build the batchUpdate from positions in ``located`` and send it, asking
        for the echo of the header rows and of the rows it writes (see ``apply``)."""
        positions = {
            title: _positions(snap, self._key_column(changes, title))
            for title, snap in located.items()
        }
        written = _Written(headers=self._current_headers())
        lease = self._lease_requests(changes)
        requests = lease + self._update_requests(changes, positions, result, written, repair=repair)
        requests += self._move_requests(changes, positions, located, result)
        requests += self._delete_requests(changes, positions, result)
        requests += self._append_requests(changes)
        for append in changes.appends:
            written.appends.setdefault(append.worksheet, []).append(append.values)
        if not requests:
            return written
        body: dict[str, Any] = {"requests": requests}
        params: dict[str, str] = {}
        for move in changes.moves:
            written.moved.update((move.worksheet, move.to))
        titles = sorted({*written.cells, *written.appends, *written.moved})
        # Deletions come after the updates in the request, so a written row is echoed where
        # it ends up: its number less the deleted rows above it (rows written and deleted by
        # the same request are not echoed, and then the write is verified by a read).
        gone = self._deleted_rows(changes, positions) if changes.deletes else {}
        shifted = {
            title: {row: _after_deletes(row, gone.get(title, [])) for row in rows}
            for title, rows in written.cells.items()
        }
        if echo and titles:
            ranges = [f"{quote_title(t)}!1:1" for t in titles]
            for title, rows in shifted.items():
                ranges += [
                    f"{quote_title(title)}!{lo}:{hi}"
                    for lo, hi in _runs(n for n in rows.values() if n is not None)
                ]
            body.update(
                includeSpreadsheetInResponse=True,
                responseIncludeGridData=True,
                responseRanges=ranges,
            )
            params["fields"] = _ECHO_FIELDS
        try:
            reply = self._call(
                "write",
                lambda: self._http.request(
                    "post", self._url_for(":batchUpdate"), json=body, params=params
                ).json(),
                applied=lambda: self._was_applied(changes),
            )
        except StoreError as exc:
            if lease and self._lease_failed(str(exc), len(lease)):
                raise LeaseConflict(f"the queue's run lease changed: {exc}") from None
            raise
        if "includeSpreadsheetInResponse" in body and isinstance(reply, dict):
            written.echo = _echo(reply.get("updatedSpreadsheet"))
            if gone and written.echo is not None:
                written.echo = _before_deletes(written.echo, shifted)
        return written

    @staticmethod
    def _deleted_rows(
        changes: ChangeSet, positions: Mapping[str, Mapping[str, int]]
    ) -> dict[str, list[int]]:
        """Worksheet → the sorted row numbers the deletions of ``changes`` remove."""
        out: dict[str, set[int]] = {}
        for delete in changes.deletes:
            row = (
                delete.row
                if delete.key is None
                else positions.get(delete.worksheet, {}).get(delete.key)
            )
            if row is not None:
                out.setdefault(delete.worksheet, set()).add(row)
        return {title: sorted(rows) for title, rows in out.items()}

    def _realign(
        self,
        written: _Written,
        keyed: Sequence[UpdateRow],
        full: Mapping[str, Mapping[str, Row]],
        before: Mapping[str, Snapshot],
        after: Mapping[str, Snapshot],
        result: ApplyResult,
        *,
        trust: bool,
        prefetched: Sequence[Snapshot] = (),
    ) -> ChangeSet:
        """A person moved a column around the write, so the write's cells may have gone into
        other columns of the rows it wrote. Each row meant gets, column by name, its full
        pre-image with the meant values on top; every other cell of it that changed is put
        back. Appended rows are found by their values and rewritten. Returns the repair.

        Each meant row is found by its task where it is now (``after``, the verifying read;
        rows may also have moved since the write), read whole, and fixed *by its key*, so a
        later sort cannot send the fix to another row. Only a row whose key cell the write
        itself overwrote is fixed by position, and only when the echo (``trust``) proved the
        column moved before the write, so the row at that position is the one meant."""
        repair = ChangeSet()
        meant: dict[tuple[str, str], Mapping[str, CellValue]] = {
            (u.worksheet, str(u.key)): u.values for u in keyed
        }
        wanted: dict[str, dict[str, tuple[int, bool]]] = {}  # title → key → (row, by key?)
        for title, targets in written.targets.items():
            key_column = written.key_columns.get(title, "task_id")
            snap = after.get(title)
            now = _positions(snap, key_column) if snap is not None else {}
            for number, key in targets.items():
                if key in now:
                    wanted.setdefault(title, {})[key] = (now[key], True)
                elif trust:
                    wanted.setdefault(title, {})[key] = (number, False)
                else:
                    result.repaired.append(
                        f"{title}: {key} not found after a column moved mid-write; check it"
                    )
        have = {(snap.worksheet, row.number): row for snap in prefetched for row in snap.rows}
        reads = [
            Read(title, None, rows=need)
            for title, rows in wanted.items()
            if (need := tuple(sorted({n for n, _ in rows.values() if (title, n) not in have})))
        ]
        for snap in self.read(reads) if reads else []:
            have.update({(snap.worksheet, row.number): row for row in snap.rows})
        for title, rows in wanted.items():
            key_column = written.key_columns.get(title, "task_id")
            for key, (number, by_key) in rows.items():
                row = have.get((title, number))
                if row is None or (by_key and row.text(key_column).strip() != key):
                    continue  # moved again since: the next round finds it
                old = full.get(title, {}).get(key)
                desired: dict[str, CellValue] = {}
                if old is not None:
                    desired.update({n: v for n, v in old.values.items() if n})
                else:
                    pre = {r.text("task_id").strip(): r for r in before[title].rows}.get(key)
                    if pre is not None:
                        desired.update(pre.values)
                    result.repaired.append(
                        f"{title} row {row.number} ({key}): its cells outside sheetq's write "
                        "could not be checked (no full pre-image)"
                    )
                desired.update(meant.get((title, key), {}))
                fixes = {
                    name: ("" if value is None else value)
                    for name, value in desired.items()
                    if name in row.values and not _same(row.values.get(name), value)
                }
                if by_key:
                    fixes.pop(key_column, None)
                if fixes:
                    repair.updates.append(
                        UpdateRow(title, key if by_key else None, row.number, fixes, key_column)
                    )
                    result.repaired.append(
                        f"{title} row {row.number} ({key}): a column moved mid-write; "
                        f"{len(fixes)} cell(s) put back by column name"
                    )
        self._realign_appends(written, result, repair)
        return repair

    def _realign_moves(self, before: Mapping[str, Snapshot], result: ApplyResult) -> None:
        """A person moved a column between archive's read and its write, so the copy put
        cells under other headers. Rows did not move: each copied row is written again in
        its destination, column by name, from the whole row read before the write."""
        repair = ChangeSet()
        for to_title, dest_row, source_title, source_row in self._move_sources:
            snap = before.get(source_title)
            row = next((r for r in snap.rows if r.number == source_row), None) if snap else None
            if row is None:
                continue
            header = self._sheet(to_title).header
            values = {
                name: ("" if row.values.get(name) is None else row.values.get(name))
                for name in header
                if name
            }
            repair.updates.append(UpdateRow(to_title, None, dest_row, values))
        if repair:
            self._write(repair, {}, result, echo=False)
            result.repaired.append(
                f"a column moved while rows were archived: {len(repair.updates)} archived "
                "row(s) rewritten by column name"
            )

    def _realign_appends(
        self, written: _Written, result: ApplyResult, repair: ChangeSet | None = None
    ) -> None:
        """Appended rows written under a header a person changed meanwhile: find each in the
        rows after the worksheet's last known row (its values are all there, in other
        columns) and write it again by column name; the cells it put elsewhere are cleared."""
        now = self._current_headers() if written.echo is None else written.echo_headers()
        own = repair is None
        repair = ChangeSet() if repair is None else repair
        for title, rows in written.appends.items():
            if now.get(title, written.headers.get(title)) == written.headers.get(title):
                continue
            if written.echo is not None:
                self._sheets[title] = _Sheet(
                    title, self._sheet(title).sheet_id, now[title], _columns(now[title])
                )
            tail = self._tails.get(title)
            if tail is None:
                result.repaired.append(
                    f"{title}: a column moved while rows were appended; they may need a look"
                )
                continue
            (snap,) = self.read(
                [Read(title, None, rows=tuple(range(tail + 1, tail + len(rows) + 50)))]
            )
            for values in rows:
                texts = sorted(cell_text(v) for v in values.values() if cell_text(v) != "")
                for row in snap.rows:
                    got = sorted(cell_text(v) for v in row.values.values() if cell_text(v) != "")
                    if got != texts:
                        continue
                    fixes = {
                        name: ("" if values.get(name) is None else values.get(name))
                        for name in row.values
                        if not _same(row.values.get(name), values.get(name))
                    }
                    if fixes:
                        repair.updates.append(UpdateRow(title, None, row.number, fixes))
                        result.repaired.append(
                            f"{title} row {row.number}: appended while a column moved; "
                            "rewritten by column name"
                        )
                    break
        if own and repair:
            self._write(repair, {}, result, echo=False)

    def _check(
        self,
        updates: Sequence[UpdateRow],
        restores: dict[tuple[str, str], UpdateRow],
        before: Mapping[str, Snapshot],
        after: Mapping[str, Snapshot],
        result: ApplyResult,
        keyless: list[UpdateRow] | None = None,
        added: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    ) -> ChangeSet:
        """Step 3: compare the fresh read with what was meant. Returns the repair (empty:
        all is well): each target that does not hold its values is written again where it
        is now, and each other row that holds exactly the values of any write sent (a
        target's, or a repair's), which it did not hold before (the write landed on it),
        gets its pre-image back. Restores found in earlier rounds (``restores`` by key,
        ``keyless`` by position; both updated here) are checked like targets, so a repair
        that a second edit sent astray is repaired too."""
        keyless = [] if keyless is None else keyless
        repair = ChangeSet()
        missing = set(result.missing)
        for title, snap in after.items():
            mine = [u for u in updates if u.worksheet == title]
            if not mine:
                continue
            column = mine[0].key_column
            expected: dict[str, UpdateRow] = {str(u.key): u for u in mine}
            expected.update({k: u for (t, k), u in restores.items() if t == title})
            rows_of: dict[str, Row] = {}
            for row in snap.rows:
                rows_of.setdefault(row.text(column).strip(), row)
            old = before.get(title)
            pre: dict[str, Row] = {}
            if old is not None:
                for row in old.rows:
                    pre.setdefault(row.text(column).strip(), row)
            union = list(dict.fromkeys(name for u in mine for name in u.values))
            originals = {str(u.key) for u in mine}
            for key, update in expected.items():
                now_at = rows_of.get(key)
                if now_at is None:
                    if key not in missing:
                        missing.add(key)
                        result.missing.append(key)
                    continue
                if not _holds(now_at, update.values):
                    values = dict(update.values)
                    earlier = pre.get(key)
                    if key in originals and earlier is not None:
                        # another target's write may have landed here: its other columns
                        # get this row's pre-image back, then this row's own values
                        values = {n: _blank(earlier.values.get(n)) for n in union} | values
                    repair.updates.append(UpdateRow(title, key, now_at.number, values, column))
            blank_pre = _keyless_preimage(old, column, union) if old is not None else None
            for row in snap.rows:
                key = row.text(column).strip()
                if key in expected or (key and (title, key) in added):
                    continue
                sent = [
                    *mine,
                    *(u for (t, _k), u in restores.items() if t == title),
                    *(u for u in keyless if u.worksheet == title),
                ]
                hit = next((u for u in sent if _holds(row, u.values)), None)
                if hit is None:
                    continue
                earlier = pre.get(key) if key else None
                if earlier is not None and _holds(earlier, hit.values):
                    continue  # it held these values before the write: not our doing
                if earlier is not None:
                    restore = {name: _blank(earlier.values.get(name)) for name in union}
                elif key:
                    restore = dict.fromkeys(union, "")  # a row a person added meanwhile
                elif blank_pre is not None:
                    restore = dict(blank_pre)
                else:
                    result.repaired.append(
                        f"{title} row {row.number} (a row without {column}) got a write meant "
                        f"for {hit.key} (rows moved mid-write) and could not be put back: "
                        "check it by hand"
                    )
                    continue
                if _holds(row, restore):
                    continue  # already as it was
                fix = UpdateRow(title, key or None, row.number, restore, column)
                repair.updates.append(fix)
                if key:
                    restores[(title, key)] = fix
                else:
                    keyless.append(fix)
                result.repaired.append(
                    f"{title} row {row.number} ({key or 'a row without ' + column}) got a write "
                    f"meant for {hit.key} (rows moved mid-write): put back"
                )
        return repair

    def read_then_apply(
        self,
        reads: Sequence[Read],
        plan: Callable[[list[Snapshot]], Sequence[ChangeSet]],
        *,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> list[ApplyResult]:
        """One ``values:batchGet`` (none when ``snapshots`` of ``reads`` are given), then one
        atomic ``batchUpdate`` per planned change set, in order (Google has no
        transactions; see ``Store.read_then_apply``)."""
        read = list(snapshots) if snapshots is not None else self.read(reads)
        return [self.apply(c) for c in plan(read) if c]

    @staticmethod
    def _check_moves(changes: ChangeSet, arrived: Sequence[Snapshot], result: ApplyResult) -> None:
        """What the moves' copy really carried: the destination rows it filled, read back.
        Rows that were not meant go to ``result.misplaced`` (with ``_worksheet`` and
        ``_row``: where they are now) for the caller to put back."""
        meant = {m.key for m in changes.moves}
        column = changes.moves[0].key_column if changes.moves else "task_id"
        for snap in arrived:
            for row in snap.rows:
                key = row.text(column).strip()
                if key in meant and key not in result.moved:
                    result.moved.append(key)
                elif any(cell_text(v).strip() for v in row.values.values()):
                    values: dict[str, CellValue] = {
                        n: v for n, v in row.values.items() if cell_text(v) != ""
                    }
                    values["_worksheet"] = snap.worksheet
                    values["_row"] = row.number
                    result.misplaced.append(values)

    def _lease_requests(self, changes: ChangeSet) -> list[dict[str, Any]]:
        lease = changes.lease
        if lease is None:
            return []
        queue = self._sheets.get(self._titles[0]) if self._titles else None
        sheet_id = queue.sheet_id if queue else 0
        grid = {
            "sheetId": sheet_id,
            "startRowIndex": 0,
            "endRowIndex": 1,
            "startColumnIndex": 0,
            "endColumnIndex": 1,
        }
        out: list[dict[str, Any]] = []
        if lease.replaces is not None:
            out.append({"deleteNamedRange": {"namedRangeId": lease.replaces}})
        if lease.token is not None:
            out.append(
                {
                    "addNamedRange": {
                        "namedRange": {
                            "namedRangeId": lease.token,
                            "name": lease.name,
                            "range": grid,
                        }
                    }
                }
            )
        elif lease.replaces is None:
            # assert that no run holds the lease: add and remove it in the same atomic batch
            probe = f"9{self._rng.randrange(10**15):015d}"
            out.append(
                {
                    "addNamedRange": {
                        "namedRange": {"namedRangeId": probe, "name": lease.name, "range": grid}
                    }
                }
            )
            out.append({"deleteNamedRange": {"namedRangeId": probe}})
        return out

    def _update_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        result: ApplyResult,
        written: _Written,
        *,
        repair: bool = False,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for update in changes.updates:
            if update.key is None:
                row: int | None = update.row
            else:
                row = positions.get(update.worksheet, {}).get(update.key)
                if row is None and repair:
                    row = update.row  # a repair's row was read just now
            if row is None:
                result.missing.append(str(update.key))
                continue
            sheet = self._sheet(update.worksheet)
            cells = {sheet.columns[n]: v for n, v in update.values.items() if n in sheet.columns}
            mine = dict(written.cells.setdefault(update.worksheet, {}).get(row, {}))
            mine.update(update.values)
            written.cells[update.worksheet][row] = mine
            if update.key is not None:
                written.targets.setdefault(update.worksheet, {})[row] = str(update.key)
                written.key_columns[update.worksheet] = update.key_column
            for lo, hi in _runs(cells):
                out.append(
                    {
                        "updateCells": {
                            "start": {
                                "sheetId": sheet.sheet_id,
                                "rowIndex": row - 1,
                                "columnIndex": lo,
                            },
                            "rows": [{"values": [_cell_data(cells[c]) for c in range(lo, hi + 1)]}],
                            "fields": "userEnteredValue",
                        }
                    }
                )
        return out

    def _move_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        located: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> list[dict[str, Any]]:
        """Copy the rows at the located positions to the end of the destination, column by
        column (header names may be in another order there), then delete those positions:
        one atomic request, so whatever was really at those positions is kept."""
        self._move_plan = []
        self._move_sources: list[tuple[str, int, str, int]] = []
        if not changes.moves:
            return []
        by_pair: dict[tuple[str, str], list[int]] = {}
        for move in changes.moves:
            row = positions.get(move.worksheet, {}).get(move.key)
            if row is None:
                result.missing.append(move.key)
                continue
            by_pair.setdefault((move.worksheet, move.to), []).append(row)
        out: list[dict[str, Any]] = []
        deletes: list[dict[str, Any]] = []
        for (source_title, to_title), rows in by_pair.items():
            source, dest = self._sheet(source_title), self._sheet(to_title)
            tail = located.get(to_title)
            # the destination's last keyed row (1-based; rows below it are pushed down)
            keyed = tail.rows if tail is not None else []
            end = max((r.number for r in keyed if r.text("task_id").strip()), default=1)
            runs = _runs(rows)
            count = sum(hi - lo + 1 for lo, hi in runs)
            out.append(
                {
                    "insertDimension": {
                        "range": {
                            "sheetId": dest.sheet_id,
                            "dimension": "ROWS",
                            "startIndex": end,
                            "endIndex": end + count,
                        },
                        "inheritFromBefore": False,
                    }
                }
            )
            at = end  # 0-based index of the next destination row
            spans = _column_spans(source.columns, dest.columns)
            for lo, hi in runs:
                for offset in range(hi - lo + 1):
                    self._move_sources.append(
                        (to_title, at + offset + 1, source_title, lo + offset)
                    )
                for src_col, dst_col, width in spans:
                    out.append(
                        {
                            "copyPaste": {
                                "source": _grid(source.sheet_id, lo - 1, hi, src_col, width),
                                "destination": _grid(
                                    dest.sheet_id, at, at + hi - lo + 1, dst_col, width
                                ),
                                "pasteType": "PASTE_VALUES",
                                "pasteOrientation": "NORMAL",
                            }
                        }
                    )
                at += hi - lo + 1
            for lo, hi in reversed(runs):
                deletes.append(_delete_rows(source.sheet_id, lo, hi))
            self._move_plan.append((to_title, end + 1, end + count))
        return out + deletes

    def _delete_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        result: ApplyResult,
    ) -> list[dict[str, Any]]:
        by_sheet: dict[str, set[int]] = {}
        for delete in changes.deletes:
            if delete.key is None:
                row: int | None = delete.row
            else:
                row = positions.get(delete.worksheet, {}).get(delete.key)
            if row is None:
                result.missing.append(str(delete.key))
            else:
                by_sheet.setdefault(delete.worksheet, set()).add(row)
        out: list[dict[str, Any]] = []
        for title, rows in by_sheet.items():
            sheet = self._sheet(title)
            for lo, hi in reversed(_runs(rows)):
                out.append(_delete_rows(sheet.sheet_id, lo, hi))
        return out

    def _append_requests(self, changes: ChangeSet) -> list[dict[str, Any]]:
        by_sheet: dict[str, list[dict[str, Any]]] = {}
        for append in changes.appends:
            sheet = self._sheet(append.worksheet)
            width = max(sheet.columns.values(), default=-1) + 1
            cells = [{} for _ in range(width)]  # type: list[dict[str, Any]]
            for name, value in append.values.items():
                if name in sheet.columns:
                    cells[sheet.columns[name]] = _cell_data(value)
            by_sheet.setdefault(append.worksheet, []).append({"values": cells})
        return [
            {
                "appendCells": {
                    "sheetId": self._sheet(title).sheet_id,
                    "rows": rows,
                    "fields": "userEnteredValue",
                }
            }
            for title, rows in by_sheet.items()
        ]

    def _was_applied(self, changes: ChangeSet) -> bool:
        """After a lost reply: did the (atomic) write happen? One marker is enough."""
        lease = changes.lease
        if lease is not None:
            body = self._http.request(
                "get", self._url_for(), params={"fields": "namedRanges(namedRangeId,name)"}
            ).json()
            ids = {str(r.get("namedRangeId")) for r in body.get("namedRanges", []) or []}
            if lease.token is not None:
                return lease.token in ids
            if lease.replaces is not None:
                return lease.replaces not in ids
        marker = next(
            (
                a
                for a in changes.appends
                if a.values.get("task_id") and a.worksheet != self._log_title()
            ),
            None,
        )
        if marker is not None:
            (snap,) = self.read([Read(marker.worksheet, ("task_id",))])
            return any(r.text("task_id") == marker.values["task_id"] for r in snap.rows)
        log_rows = [a for a in changes.appends if a.worksheet == self._log_title()]
        if log_rows:
            first = log_rows[0].values
            keys = ("ts", "task_id", "event", "run_id")
            (snap,) = self.read([Read(log_rows[0].worksheet, keys)])
            want = tuple(str(first.get(k, "")) for k in keys)
            return any(tuple(r.text(k) for k in keys) == want for r in snap.rows)
        return False  # updates only: sending them again is harmless

    def _log_title(self) -> str:
        return self._titles[1] if len(self._titles) > 1 else "QueueLog"


def _after_deletes(row: int, deleted: Sequence[int]) -> int | None:
    """Where row ``row`` is once the sorted rows ``deleted`` are gone (``None``: deleted)."""
    import bisect

    at = bisect.bisect_left(deleted, row)
    if at < len(deleted) and deleted[at] == row:
        return None
    return row - at


def _before_deletes(
    echo: dict[str, dict[int, list[CellValue]]], shifted: Mapping[str, Mapping[int, int | None]]
) -> dict[str, dict[int, list[CellValue]]]:
    """The echo of a write with deletions, renumbered as the rows were before it (header rows
    kept); a written row that was deleted is absent, so the echo does not verify it."""
    out: dict[str, dict[int, list[CellValue]]] = {}
    for title, rows in echo.items():
        moves = shifted.get(title)
        if moves is None:
            out[title] = rows
            continue
        renumbered = {1: rows[1]} if 1 in rows else {}
        for before, after in moves.items():
            if after is not None and after in rows:
                renumbered[before] = rows[after]
        out[title] = renumbered
    return out
