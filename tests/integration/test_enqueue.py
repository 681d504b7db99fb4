"""`sheetq enqueue` through the CLI: idempotency, real payloads, round-trips (docs/design.md §4)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from sheetq.idempotency import canonical_json
from tests.conftest import SHARED, Book, run_cli

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

LEADS = SHARED / "data" / "leads.jsonl"
WEBHOOKS = SHARED / "data" / "github-webhooks"
needs_shared = pytest.mark.skipif(not LEADS.exists(), reason=f"{LEADS} is not here")


def _queue_set(book: Book) -> set[tuple[str, str, str, str]]:
    return {
        (r["type"], r["idempotency_key"], r["payload_json"], r["payload_hash"])
        for r in book.records()
    }


@pytest.mark.slow
@needs_shared
def test_leads_one_by_one_equals_one_jsonl_batch(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leads enqueued one call at a time give the same tasks, keys and outcomes as the
    whole file in one --jsonl call. Local takes every lead one by one; Google and
    PostgreSQL (a round trip per call) every lead of a repeated key and every fifth other."""
    from tests.conftest import LocalBook

    lines = [line for line in LEADS.read_text(encoding="utf-8").splitlines() if line.strip()]
    under_test = {k: v for k, v in os.environ.items() if k.startswith("SHEETQ_")}
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'batch.db'}")
    monkeypatch.delenv("SHEETQ_DATABASE_URL", raising=False)
    assert run_cli(["init"]).code == 0
    r = run_cli(["enqueue", "lead", "--jsonl", "--file", str(LEADS), "--json"])
    assert r.code == 3  # the data holds conflicting re-submissions
    batch = r.json()
    assert len(batch["results"]) == len(lines)
    per_key = Counter(res["idempotency_key"] for res in batch["results"])
    assert max(per_key.values()) > 1 and batch["conflict"] > 0 and batch["duplicate"] > 0
    every = isinstance(book, LocalBook)
    chosen = [
        i
        for i, res in enumerate(batch["results"])
        if every or per_key[res["idempotency_key"]] > 1 or i % 5 == 0
    ]
    for name, value in under_test.items():
        monkeypatch.setenv(name, value)
    if "SHEETQ_DATABASE_URL" not in under_test:
        monkeypatch.delenv("SHEETQ_DATABASE_URL", raising=False)
    for i in chosen:
        r = run_cli(["enqueue", "lead", lines[i], "--json"])
        assert r.code in (0, 3), r.stderr
        doc = r.json()
        assert (r.code == 3) == (doc["outcome"] == "conflict")
        want = batch["results"][i]
        assert (doc["outcome"], doc["idempotency_key"]) == (
            want["outcome"],
            want["idempotency_key"],
        ), f"line {i + 1}"
    keys = {batch["results"][i]["idempotency_key"] for i in chosen}
    from_batch = {row for row in _queue_set(LocalBook(tmp_path / "batch.db")) if row[1] in keys}
    assert _queue_set(book) == from_batch
    print(f"leads.jsonl: {len(chosen)} of {len(lines)} one by one;", per_key.most_common(1))


@pytest.mark.slow
@needs_shared
def test_github_webhooks_round_trip_and_deduplicate(book: Book) -> None:
    """Each webhook payload reads back as its canonical JSON; delivered again (the first of
    each event type as its file, `--file`), it is a duplicate and adds nothing."""
    files = sorted(WEBHOOKS.glob("*.json"))
    assert files
    by_event: dict[str, list[Path]] = {}
    for path in files:
        by_event.setdefault(path.name.split("__")[0], []).append(path)
    expected: dict[str, str] = {}
    for event, paths in by_event.items():  # the first delivery: one --jsonl batch per event
        payloads = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
        lines = "\n".join(json.dumps(p, ensure_ascii=False) for p in payloads)
        r = run_cli(["enqueue", event, "--jsonl", "--json"], input=lines)
        assert r.code == 0, (event, r.stderr)
        for result, payload in zip(r.json()["results"], payloads, strict=True):
            expected[result["task_id"]] = canonical_json(payload)
    rows = {r["task_id"]: r["payload_json"] for r in book.records()}
    assert len(rows) == len(expected)
    for task_id, canonical in expected.items():
        assert rows[task_id] == canonical
        assert json.loads(rows[task_id]) == json.loads(canonical)
    for event, paths in by_event.items():  # the second delivery, as the file itself
        r = run_cli(["enqueue", event, "--file", str(paths[0]), "--json"])
        assert r.code == 0, (paths[0].name, r.stderr)
        assert r.json()["outcome"] == "duplicate", paths[0].name
    assert len(book.records()) == len(expected)


VALUES = [
    "=1+1",
    "+380501234567",
    "007",
    "2026-01-05",
    "TRUE",
    "line one\nline two\n\ttabbed",
    "Юлія Шевчук",
    "🦄 emoji 🇺🇦",
    '=IMPORTXML("http://x","//a")',
    "  padded  ",
    "0.10",
]


def test_values_round_trip_unchanged(book: Book) -> None:
    """Formulas, phone numbers, leading zeros, dates, booleans, multi-line, Cyrillic, emoji."""
    payload = {f"v{i}": v for i, v in enumerate(VALUES)}
    r = run_cli(["enqueue", "t", json.dumps(payload, ensure_ascii=False), "--json"])
    assert r.code == 0, r.stderr
    row = book.row_of(r.json()["task_id"])
    assert json.loads(row["payload_json"]) == payload
    r = run_cli(["enqueue", "t", "{}", "--key", VALUES[0], "--json"])
    assert book.row_of(r.json()["task_id"])["idempotency_key"] == "t:=1+1"


def test_duplicate_and_conflict_outcomes_and_log(book: Book) -> None:
    """Same key and payload: duplicate, exit 0; new payload: conflict, exit 3; both logged."""
    first = run_cli(["enqueue", "lead", '{"lead_id": "L-9", "a": 1}', "--json"]).json()
    dup = run_cli(["enqueue", "lead", '{"a": 1, "lead_id": "L-9"}', "--json"])
    assert dup.code == 0 and dup.json() == {**first, "outcome": "duplicate"}
    conflict = run_cli(["enqueue", "lead", '{"lead_id": "L-9", "a": 2}'])
    assert conflict.code == 3
    assert first["task_id"] in conflict.stderr
    events = [e["event"] for e in book.log(first["task_id"])]
    assert events == ["enqueued", "duplicate", "conflict"]
    assert len(book.records()) == 1
    other_type = run_cli(["enqueue", "crm", '{"lead_id": "L-9", "a": 2}', "--json"])
    assert other_type.code == 0 and other_type.json()["outcome"] == "enqueued"


def test_jsonl_batch_duplicates_within_batch(book: Book) -> None:
    """Lines of one batch deduplicate against each other; other lines still go in."""
    text = '{"lead_id": 1}\n\n{"lead_id": 1}\n{"lead_id": 1, "x": 2}\n{"lead_id": 2}\n'
    r = run_cli(["enqueue", "lead", "--jsonl", "-", "--json"], input=text)
    assert r.code == 3
    doc = r.json()
    assert (doc["enqueued"], doc["duplicate"], doc["conflict"]) == (2, 1, 1)
    assert [x["line"] for x in doc["results"]] == [1, 3, 4, 5]
    assert len(book.records()) == 2


def test_jsonl_bad_line_rejects_whole_batch(book: Book) -> None:
    """One line that is not a JSON object rejects the batch, naming the line; nothing written."""
    text = '{"a": 1}\n[1, 2]\n{"b": 2}\n{"c":\n'
    r = run_cli(["enqueue", "t", "--jsonl"], input=text)
    assert r.code == 2
    assert "line 2" in r.stderr and "array" in r.stderr and "line 4" in r.stderr
    assert book.records() == [] and book.log() == []


def test_payload_too_large_writes_nothing(book: Book) -> None:
    """A payload over 50,000 characters as compact JSON: exit 2, nothing written."""
    big = json.dumps({"text": "x" * 50_000})
    r = run_cli(["enqueue", "t", big])
    assert r.code == 2 and "50,000" in r.stderr
    assert book.records() == [] and book.log() == []
    ok = json.dumps({"t": "x" * (50_000 - 8)})
    assert len(canonical_json(json.loads(ok))) == 50_000
    assert run_cli(["enqueue", "t", ok]).code == 0


def test_delay_and_at(book: Book, monkeypatch: pytest.MonkeyPatch) -> None:
    """--delay and --at set next_retry_at on a pending row: it is not claimed before then."""
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    a = run_cli(["enqueue", "t", '{"a": 1}', "--delay", "10m", "--json"]).json()
    b = run_cli(["enqueue", "t", '{"a": 2}', "--at", "2026-01-06T12:00:00+02:00", "--json"]).json()
    assert book.row_of(a["task_id"])["next_retry_at"] == "2026-01-05T09:10:00Z"
    assert book.row_of(b["task_id"])["next_retry_at"] == "2026-01-06T10:00:00Z"
    assert book.row_of(a["task_id"])["status"] == "pending"
    assert run_cli(["enqueue", "t", "{}", "--delay", "soon"]).code == 2
    assert run_cli(["enqueue", "t", "{}", "--delay", "1m", "--at", "2026-01-01"]).code == 2
