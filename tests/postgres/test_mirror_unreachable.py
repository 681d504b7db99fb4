"""The mirror with Google unreachable (docs/design.md §12): one failing pass is one line
under 200 characters, `status` repeats it, and a pass gives up within `[mirror] interval`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import make_google, run_cli, write_config
from tests.postgres.test_mirror import Mirrored

pytestmark = [pytest.mark.postgres, pytest.mark.google]


@pytest.fixture
def mirrored(pg_url: str, sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Mirrored:
    book = make_google(sheets_emulator, monkeypatch)
    return Mirrored(pg_url, book, monkeypatch)


def test_unreachable_google_is_one_short_line(
    mirrored: Mirrored, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at the Sheets API URL: `mirror` exits 1 with one stderr line under
    200 characters (no URL, no field mask) saying what failed and that the next pass
    catches up; `status` repeats that short reason."""
    mirrored.enqueue(2)
    monkeypatch.setenv("SHEETQ_SHEETS_API_URL", "http://127.0.0.1:9")
    r = run_cli(["mirror"])
    assert r.code == 1
    (line,) = r.stderr.splitlines()
    assert len(line) < 200, line
    assert line.startswith("sheetq: error: mirror: ") and line.endswith("the next pass retries")
    assert "fields=" not in line and "%2C" not in line and "127.0.0.1:9" not in line
    assert "Connection refused" in line or "ConnectionError" in line
    status = run_cli(["status"])
    said = next(x for x in status.stdout.splitlines() if x.startswith("mirror:"))
    assert "last attempt failed" in said and len(said) < 300, said
    assert "fields=" not in said


@pytest.mark.slow
def test_a_pass_gives_up_within_the_interval(mirrored: Mirrored) -> None:
    """Google accepts the connection but answers late (5 s): the pass gives up within
    `[mirror] interval` (here 1s) instead of waiting (up to the 90 s read timeout, retried)."""
    write_config('[mirror]\ninterval = "1s"\n')
    mirrored.enqueue(1)
    mirrored.emulator.delay_next(5, times=20)
    started = time.monotonic()
    r = run_cli(["mirror"])
    took = time.monotonic() - started
    mirrored.emulator.clear_faults()
    assert r.code == 1 and took < 3, (took, r.stderr)
    (line,) = r.stderr.splitlines()
    assert len(line) < 200 and "[mirror] interval" in line, line
