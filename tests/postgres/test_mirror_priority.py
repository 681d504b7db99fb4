"""A manager moves a task forward in the spreadsheet mirror of a PostgreSQL queue
(docs/design.md §12, §14): an integer typed into a row's `priority` cell is saved in
PostgreSQL (the next claim honours it); anything else typed there is put back, warned."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.conftest import run_cli, write_config
from tests.postgres.test_mirror import NOW, Mirrored, mirrored  # noqa: F401  (the fixture)

pytestmark = pytest.mark.postgres


def test_a_priority_typed_in_the_mirror_is_saved_and_honoured(mirrored: Mirrored) -> None:  # noqa: F811
    """7 typed over the newest of three waiting tasks: saved with a new updated_at and no
    log row, counted in priorities_saved, named at -v, kept in the sheet; the next claim
    takes that task first."""
    write_config('[types.job]\ncommand = ["true"]\n')
    first, _, last = mirrored.enqueue(3)
    mirrored.passed()
    logged = mirrored.sql("SELECT count(*) FROM sheetq_log")
    mirrored.book.set_cell("Queue", int(mirrored.row(last)["_row"]), "priority", 7)
    later = NOW + timedelta(minutes=5)
    mirrored.at(later)
    result = run_cli(["-v", "mirror", "--json"])
    assert result.code == 0, result.stderr
    doc = result.json()
    assert (doc["priorities_saved"], doc["put_back"]) == (1, 0), doc
    assert f"{last}: priority 0 -> 7 saved" in result.stderr
    assert mirrored.sql(
        "SELECT priority, updated_at FROM sheetq_tasks WHERE task_id = %s", (last,)
    ) == [(7, later)]
    assert mirrored.sql("SELECT count(*) FROM sheetq_log") == logged, "no QueueLog row"
    assert mirrored.row(last)["priority"] == "7"
    again = run_cli(["mirror", "--json"])
    assert again.json()["priorities_saved"] == 0 and again.json()["put_back"] == 0
    r = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"])
    assert r.code == 0 and r.json()["done"] == 1, r.stderr
    done = mirrored.sql("SELECT task_id FROM sheetq_tasks WHERE status = 'done'")
    assert done == [(last,)] and first != last


def test_words_typed_into_a_priority_in_the_mirror_are_put_back(mirrored: Mirrored) -> None:  # noqa: F811
    """ "high" typed into a priority cell cannot be saved: put back with one warning naming
    the priority column; PostgreSQL keeps 0."""
    write_config('[types.job]\ncommand = ["true"]\n')
    (task_id,) = mirrored.enqueue(1)
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "priority", "high")
    result = mirrored.mirror()
    assert result.code == 0 and result.json()["put_back"] == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if "put back" in line]
    assert len(lines) == 1 and "priority" in lines[0], result.stderr
    assert mirrored.row(task_id)["priority"] == "0"
    assert mirrored.sql("SELECT priority FROM sheetq_tasks") == [(0,)]
