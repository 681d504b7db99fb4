"""A run recovers only what it is configured for (docs/design.md §11): after a kill -9 of the
worker whose configuration has `invoice`, a run on a host whose configuration has only
`lead` leaves the invoice's expired lease alone (no `failed`/unknown with default settings);
a run that knows `invoice` recovers it per its own `on_unknown`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PgBook, handler_script, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

BLOCK = """
import os, pathlib, sys, time
sys.stdin.read()
pathlib.Path(os.environ["BEGAN"]).touch()
time.sleep(30)
"""


def test_a_run_leaves_expired_leases_of_a_type_it_is_not_configured_for(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = tmp_path / "began"
    monkeypatch.setenv("BEGAN", str(began))
    block = handler_script(tmp_path, "block", BLOCK)
    host_b = tmp_path / "b.toml"  # invoice's team: idempotent, so a lost attempt is retried
    host_b.write_text(
        f'[types.invoice]\ncommand = {block}\nidempotent = true\nlease = "1s"\ntimeout = "2s"\n'
        '[types.lead]\ncommand = ["true"]\n',
        encoding="utf-8",
    )
    host_a = tmp_path / "a.toml"  # another team's host: only lead
    host_a.write_text('[types.lead]\ncommand = ["true"]\n', encoding="utf-8")
    monkeypatch.setenv("SHEETQ_CONFIG", str(host_b))
    r = run_cli(["enqueue", "invoice", '{"n": 1}', "--json"])
    assert r.code == 0, r.stderr
    invoice = r.json()["task_id"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "worker", "--poll", "0.2s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 20
        while not began.exists():
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.02)
    finally:
        worker.kill()
        worker.communicate(timeout=20)
    time.sleep(3.5)  # the invoice's lease (1 s + 2 s) has run out
    monkeypatch.setenv("SHEETQ_CONFIG", str(host_a))
    doc = run_cli(["process", "--json"]).json()
    assert (doc["recovered"], doc["failed"]) == (0, 0), doc
    book = PgBook(pg_url)
    row = book.row_of(invoice)
    assert (row["status"], row["error_class"]) == ("processing", "")
    assert "recovered" not in [e["event"] for e in book.log(invoice)]
    said = run_cli(["status"])  # host A tells a person why the invoice waits
    assert said.code == 0, said.stderr
    assert "invoice: no run here is configured for it" in said.stdout, said.stdout
    monkeypatch.setenv("SHEETQ_CONFIG", str(host_b))
    doc = run_cli(["process", "--json"]).json()
    assert doc["recovered"] == 1, doc
    row = book.row_of(invoice)
    assert (row["status"], row["error_class"], row["retry_count"]) == ("retry", "unknown", "1")
