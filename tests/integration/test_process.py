"""`sheetq process` through the CLI: handler outcomes, backoff, breaker, leases (§5, §7)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.cli_helpers import assert_log_matches_queue, enqueue_task, set_now
from tests.conftest import Book, handler_script, run_cli, write_config

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §11)

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
COUNTER = """
import json, os, sys, pathlib
task = json.load(sys.stdin)
log = pathlib.Path(os.environ["CALLS"])
with log.open("a") as f:
    f.write(os.environ["SHEETQ_TASK_ID"] + " " + os.environ["SHEETQ_ATTEMPT"] + "\\n")
"""


def _fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command of the test runs on one FakeClock: sleeps pass at once, time moves."""
    from sheetq.clock import FakeClock

    clock = FakeClock(NOW)
    monkeypatch.setattr("sheetq.cli._context.clock_from_env", lambda: clock)


def _on_pg(book: Book) -> bool:
    """The book is a PostgreSQL queue (conftest may be imported under two names)."""
    return type(book).__name__ == "PgBook"


def _exit_handler(tmp_path: Path, name: str, code: int, out: str = "", err: str = "") -> str:
    return handler_script(
        tmp_path,
        name,
        f"import sys\nsys.stdin.read()\nprint({out!r})\n"
        f"sys.stderr.write({err!r})\nsys.exit({code})\n",
    )


@pytest.mark.parametrize(
    ("code", "status", "error_class", "retry_count"),
    [
        (0, "done", "", "0"),
        (75, "retry", "transient", "1"),
        (65, "failed", "permanent", "1"),
        (77, "failed", "auth", "1"),
        (1, "retry", "transient", "1"),
        (3, "retry", "transient", "1"),
    ],
)
def test_command_exit_codes(
    book: Book,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    status: str,
    error_class: str,
    retry_count: str,
) -> None:
    """sysexits: 0 done, 75 transient, 65 permanent, 77 auth, anything else transient."""
    set_now(monkeypatch, NOW)
    cmd = _exit_handler(tmp_path, "h", code, out="the result", err="stderr tail says why")
    write_config(f"[types.job]\ncommand = {cmd}\n")
    task = enqueue_task({"n": 1})
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    row = book.row_of(task)
    assert (row["status"], row["error_class"], row["retry_count"]) == (
        status,
        error_class,
        retry_count,
    )
    if status == "done":
        assert row["result"] == "the result" and row["last_error"] == ""
    else:
        assert "stderr tail says why" in row["last_error"]
    if status == "retry":
        due = datetime.fromisoformat(row["next_retry_at"])
        assert NOW + timedelta(seconds=96) <= due <= NOW + timedelta(seconds=144)
    else:
        assert row["next_retry_at"] == ""
    assert row["lease_owner"] == "" and row["lease_until"] == ""
    assert book.log(task)[-1]["event"] == status


@pytest.mark.parametrize(
    ("line", "status", "error_class"),
    [
        ('{"status": "done", "result": {"crm_id": 42}}', "done", ""),
        ('{"status": "skipped", "error": "not a customer"}', "skipped", ""),
        ('{"status": "retry", "error": "busy", "retry_after": 3600}', "retry", "transient"),
        (
            '{"status": "retry", "error": "slow down", "error_class": "rate_limited"}',
            "retry",
            "rate_limited",
        ),
        ('{"status": "failed", "error": "no phone"}', "failed", "permanent"),
        ('{"status": "failed", "error": "key revoked", "error_class": "auth"}', "failed", "auth"),
    ],
)
def test_json_status_line_decides(
    book: Book,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    status: str,
    error_class: str,
) -> None:
    """A last stdout line that is a JSON object with a status decides, whatever the exit code."""
    set_now(monkeypatch, NOW)
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'h', 1, out=line)}\n")
    task = enqueue_task({"n": 1})
    assert run_cli(["process"]).code == 0
    row = book.row_of(task)
    assert (row["status"], row["error_class"]) == (status, error_class)
    if status == "done":
        assert json.loads(row["result"]) == {"crm_id": 42}
    if "3600" in line:
        assert row["next_retry_at"] == "2026-01-05T10:00:00Z"


@pytest.mark.slow
def test_timeout_is_unknown_outcome(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler killed by its timeout: outcome unknown; idempotent types retry, others fail."""
    set_now(monkeypatch, NOW)
    slow = handler_script(tmp_path, "slow", "import time\ntime.sleep(30)\n")
    write_config(
        f"[types.safe]\ncommand = {slow}\ntimeout = '0.5s'\nidempotent = true\n"
        f"[types.risky]\ncommand = {slow}\ntimeout = '0.5s'\n"
    )
    safe = enqueue_task({"n": 1}, "safe")
    risky = enqueue_task({"n": 2}, "risky")
    r = run_cli(["process", "--batch-size", "5", "--json"])
    assert r.code == 0, r.stderr
    row = book.row_of(safe)
    assert (row["status"], row["error_class"], row["retry_count"]) == ("retry", "unknown", "1")
    row = book.row_of(risky)
    assert (row["status"], row["error_class"], row["retry_count"]) == ("failed", "unknown", "1")
    assert "timed out" in row["last_error"]


def test_retries_then_fails_after_max_attempts(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failed attempt adds one to retry_count; the row is not due before its backoff."""
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'h', 75)}\nmax_attempts = 3\n")
    now = NOW
    set_now(monkeypatch, now)
    task = enqueue_task({"n": 1})
    for attempt in (1, 2, 3):
        set_now(monkeypatch, now)
        doc = run_cli(["process", "--json"]).json()
        assert doc["claimed"] == 1, (attempt, doc)
        row = book.row_of(task)
        assert row["retry_count"] == str(attempt)
        if attempt < 3:
            due = datetime.fromisoformat(row["next_retry_at"])
            set_now(monkeypatch, due - timedelta(seconds=1))
            assert run_cli(["process", "--json"]).json()["claimed"] == 0
            now = due
    assert book.row_of(task)["status"] == "failed"
    assert book.row_of(task)["error_class"] == "transient"
    events = [e["event"] for e in book.log(task)]
    assert events == ["enqueued", "claimed", "retry", "claimed", "retry", "claimed", "failed"]


def test_auth_opens_circuit_and_releases_claimed(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An auth failure fails its task; the type's other rows stay untouched, no attempt used."""
    set_now(monkeypatch, NOW)
    write_config(
        f"[types.crm]\ncommand = {_exit_handler(tmp_path, 'h', 77)}\n"
        f"[types.other]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n"
    )
    crm = [enqueue_task({"n": i}, "crm") for i in range(3)]
    other = enqueue_task({"n": 9}, "other")
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["failed"] == 1 and doc["done"] == 1
    # PostgreSQL claims a task only as it starts it (§11): nothing claimed, nothing to release
    assert doc["released"] == (0 if _on_pg(book) else 2)
    assert "crm" in doc["open_circuits"]
    assert book.row_of(crm[0])["status"] == "failed"
    for task in crm[1:]:
        row = book.row_of(task)
        assert (row["status"], row["retry_count"], row["lease_owner"]) == ("pending", "0", "")
    assert book.row_of(other)["status"] == "done"


def test_breaker_opens_after_consecutive_transient(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After breaker_threshold transient failures of a type in a run, its other rows wait."""
    set_now(monkeypatch, NOW)
    write_config(
        f"[types.job]\ncommand = {_exit_handler(tmp_path, 'h', 75)}\nbreaker_threshold = 2\n"
    )
    for i in range(5):
        enqueue_task({"n": i})
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["retry"] == 2 and doc["released"] == (0 if _on_pg(book) else 3)
    assert "2 consecutive transient failures" in doc["open_circuits"]["job"]


def test_rate_limit_spaces_calls(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rate_limit = "30/min" spaces handler starts 2 s apart (on the injected clock)."""
    _fake_clock(monkeypatch)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS", str(calls))
    write_config(
        f"[types.job]\ncommand = {handler_script(tmp_path, 'c', COUNTER)}\nrate_limit = '30/min'\n"
    )
    for i in range(4):
        enqueue_task({"n": i})
    doc = run_cli(["process", "--batch-size", "4", "--json"]).json()
    assert doc["done"] == 4
    assert doc["seconds"] >= 6.0  # three waits of 2 s on the fake clock


def test_max_age_expires_without_running(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task older than max_age fails as expired and its handler never runs."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS", str(calls))
    write_config(
        f"[types.job]\ncommand = {handler_script(tmp_path, 'c', COUNTER)}\nmax_age = '1h'\n"
    )
    set_now(monkeypatch, NOW)
    task = enqueue_task({"n": 1})
    set_now(monkeypatch, NOW + timedelta(hours=2))
    doc = run_cli(["process", "--json"]).json()
    assert doc["expired"] == 1 and doc["claimed"] == 0
    row = book.row_of(task)
    assert (row["status"], row["error_class"]) == ("failed", "expired")
    assert not calls.exists()
    assert [e["event"] for e in book.log(task)] == ["enqueued", "expired"]


def test_oldest_first_batches_and_until_empty(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches claim oldest first; --max-batches and --until-empty bound the run."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS", str(calls))
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'c', COUNTER)}\n")
    tasks = []
    for i in range(7):
        set_now(monkeypatch, NOW + timedelta(minutes=i))
        tasks.append(enqueue_task({"n": i}))
    set_now(monkeypatch, NOW + timedelta(hours=1))
    doc = run_cli(["process", "--batch-size", "2", "--max-batches", "2", "--json"]).json()
    assert (doc["batches"], doc["done"]) == (2, 4)
    ran = [line.split()[0] for line in calls.read_text().splitlines()]
    assert ran == tasks[:4]
    doc = run_cli(["process", "--batch-size", "2", "--until-empty", "--json"]).json()
    assert (doc["batches"], doc["done"]) == (2, 3)
    assert run_cli(["process", "--json"]).json()["claimed"] == 0


def test_types_without_handler_are_reported(book: Book, tmp_path: Path) -> None:
    """A row whose type has no handler is not claimed; the run says how many wait."""
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n")
    enqueue_task({"n": 1}, "jbo")
    r = run_cli(["process"])
    assert r.code == 0
    assert "1 waiting without handler (jbo: 1)" in r.stdout
    assert run_cli(["process", "--json"]).json()["without_handler"] == 1


def test_type_filter_and_dry_run(book: Book, tmp_path: Path) -> None:
    """--type limits the run to those types; --dry-run shows the claim and changes nothing."""
    ok = _exit_handler(tmp_path, "ok", 0)
    write_config(f"[types.a]\ncommand = {ok}\n[types.b]\ncommand = {ok}\n")
    a, b = enqueue_task({"n": 1}, "a"), enqueue_task({"n": 2}, "b")
    before = book.records()
    doc = run_cli(["process", "--dry-run", "--json"]).json()
    assert [w["task_id"] for w in doc["would_claim"]] == [a, b]
    assert book.records() == before
    doc = run_cli(["process", "--type", "b", "--json"]).json()
    assert doc["done"] == 1
    assert book.row_of(a)["status"] == "pending" and book.row_of(b)["status"] == "done"


def test_racing_duplicate_rows_resolved_to_skipped(book: Book, tmp_path: Path) -> None:
    """Two rows with one key (racing enqueues): the earliest runs, the other is skipped."""
    if _on_pg(book):
        pytest.skip("PostgreSQL's key constraint makes two tasks with one key impossible")
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n")
    first = enqueue_task({"order_id": 5})
    rows = book.records()
    header = book.grid("Queue")[0]
    late = dict(rows[0])
    late["task_id"] = "t_ZZZZ_racer"
    late["created_at"] = "2026-12-31T00:00:00Z"
    book_row = len(rows) + 2
    for column in header:
        if column:
            book.set_cell("Queue", book_row, column, late.get(column, ""))
    doc = run_cli(["process", "--batch-size", "5", "--json"]).json()
    assert doc["done"] == 1 and doc["skipped"] == 1
    loser = book.row_of("t_ZZZZ_racer")
    assert (loser["status"], loser["error_class"]) == ("skipped", "duplicate")
    assert first in loser["last_error"]
    assert book.row_of(first)["status"] == "done"


def test_python_handler_signals(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """python handlers: return → done; RetryTask/FailTask/SkipTask; other exceptions transient."""
    set_now(monkeypatch, NOW)
    (tmp_path / "work").mkdir(exist_ok=True)
    module = Path.cwd() / "myhandlers.py"
    module.write_text(
        "from sheetq import FailTask, RetryTask, SkipTask\n"
        "def run(task):\n"
        "    kind = task.payload['kind']\n"
        "    if kind == 'ok': return {'id': task.attempt}\n"
        "    if kind == 'retry': raise RetryTask('later', after=7200)\n"
        "    if kind == 'fail': raise FailTask('bad data')\n"
        "    if kind == 'skip': raise SkipTask('nothing to do')\n"
        "    raise KeyError('boom')\n",
        encoding="utf-8",
    )
    write_config("[types.py]\npython = 'myhandlers:run'\n")
    ids = {k: enqueue_task({"kind": k}, "py") for k in ("ok", "retry", "fail", "skip", "crash")}
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["done"] == 1 and doc["failed"] == 1 and doc["skipped"] == 1 and doc["retry"] == 2
    assert json.loads(book.row_of(ids["ok"])["result"]) == {"id": 1}
    assert book.row_of(ids["retry"])["next_retry_at"] == "2026-01-05T11:00:00Z"
    assert book.row_of(ids["fail"])["error_class"] == "permanent"
    assert "KeyError: 'boom'" in book.row_of(ids["crash"])["last_error"]


def test_secrets_redacted_from_errors(book: Book, tmp_path: Path) -> None:
    """Bearer tokens and configured redact_fields never reach last_error or the log."""
    err = "auth with Bearer abcdefghijklmnop123 for +380501234567 failed"
    write_config(
        f"[types.job]\ncommand = {_exit_handler(tmp_path, 'h', 65, err=err)}\n"
        "redact_fields = ['phone']\n"
    )
    task = enqueue_task({"phone": "+380501234567"})
    run_cli(["process"])
    row = book.row_of(task)
    assert "abcdefghijklmnop123" not in row["last_error"]
    assert "+380501234567" not in row["last_error"]
    assert "[redacted]" in row["last_error"]
    assert all("abcdefghijklmnop123" not in e["message"] for e in book.log(task))


@pytest.mark.slow
def test_log_matches_queue_after_every_run(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every task, the last QueueLog status equals the Queue status."""
    set_now(monkeypatch, NOW)
    write_config(
        f"[types.a]\ncommand = {_exit_handler(tmp_path, 'a', 0)}\n"
        f"[types.b]\ncommand = {_exit_handler(tmp_path, 'b', 75)}\n"
        f"[types.c]\ncommand = {_exit_handler(tmp_path, 'c', 65)}\n"
    )
    for i in range(4):
        for t in "abc":
            enqueue_task({"n": i}, t)
    run_cli(["process", "--until-empty", "--batch-size", "3"])
    assert_log_matches_queue(book)


def test_max_runtime_releases_unstarted_and_claims_no_new_batch(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past --max-runtime no task is started (released, no attempt used) and no batch claimed."""
    _fake_clock(monkeypatch)
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\nrate_limit = '1/s'\n")
    ids = [enqueue_task({"n": i}) for i in range(7)]
    # the rate limit makes each start wait 1 s on the injected clock: starts at 0, 1, 2, 3 s
    doc = run_cli(
        ["process", "--batch-size", "5", "--until-empty", "--max-runtime", "2.5s", "--json"]
    ).json()
    on_pg = _on_pg(book)  # PostgreSQL claims as it starts: nothing to release
    assert (doc["batches"], doc["done"], doc["released"]) == (1, 4, 0 if on_pg else 1)
    statuses = [book.row_of(t)["status"] for t in ids]
    assert statuses == ["done"] * 4 + ["pending"] * 3
    assert book.row_of(ids[4])["retry_count"] == "0"
    if not on_pg:
        assert "max-runtime" in book.log(ids[4])[-1]["message"]
    assert_log_matches_queue(book)


def test_max_age_counts_from_due_time_for_delayed_and_requeued(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task delayed past max_age, or requeued days later, runs instead of expiring."""
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'h', 65)}\nmax_age = '1h'\n")
    set_now(monkeypatch, NOW)
    delayed = run_cli(["enqueue", "job", '{"n": 1}', "--delay", "5h", "--json"]).json()["task_id"]
    failed = enqueue_task({"n": 2})
    assert run_cli(["process", "--json"]).json()["failed"] == 1
    set_now(monkeypatch, NOW + timedelta(hours=5, minutes=1))
    doc = run_cli(["process", "--batch-size", "5", "--json"]).json()
    assert doc["expired"] == 0 and doc["claimed"] == 1
    assert book.row_of(delayed)["error_class"] == "permanent"
    set_now(monkeypatch, NOW + timedelta(days=3))
    assert run_cli(["requeue", "--task", failed]).code == 0
    doc = run_cli(["process", "--json"]).json()
    assert doc["expired"] == 0 and doc["claimed"] == 1


def test_at_in_the_past_runs_now(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--at a time long past is due at once; it does not expire before running."""
    set_now(monkeypatch, NOW)
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n")
    task = run_cli(["enqueue", "job", "{}", "--at", "2020-01-01T00:00:00Z", "--json"]).json()
    doc = run_cli(["process", "--json"]).json()
    assert doc["expired"] == 0 and doc["done"] == 1
    assert book.row_of(task["task_id"])["status"] == "done"


@pytest.mark.parametrize("status", ["pending", "retry"])
def test_unparseable_next_retry_at_is_due_and_warned(
    book: Book, tmp_path: Path, status: str
) -> None:
    """A next_retry_at a person typed as 'not a date': the row runs (counted as due), and
    both `status` and `process` say so on stderr (docs/design.md §2)."""
    if _on_pg(book):
        pytest.skip("a PostgreSQL timestamptz cannot hold text a person typed into a cell")
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n")
    task = enqueue_task({"n": 1})
    row = int(book.row_of(task)["_row"])
    book.set_cell("Queue", row, "status", status)
    book.set_cell("Queue", row, "next_retry_at", "not a date")
    r = run_cli(["status", "--json"])
    assert r.code == 0
    assert r.json()["unparseable_next_retry_at"] == [task]
    assert "unparseable next_retry_at" in r.stderr and task in r.stderr
    r = run_cli(["process"])
    assert r.code == 0
    assert f"{task}: next_retry_at 'not a date'; treated as due" in r.stderr
    assert book.row_of(task)["status"] == "done"


def test_a_delay_never_ends_early_though_cells_hold_whole_seconds(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enqueued at 09:00:00.5 with `--delay 2s`: not due at 09:00:02.2 (a sheet's cell holds
    seconds: the not-before time is rounded up, never down), due at 09:00:03."""
    write_config(f"[types.job]\ncommand = {_exit_handler(tmp_path, 'ok', 0)}\n")
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00.500000Z")
    r = run_cli(["enqueue", "job", "{}", "--delay", "2s", "--json"])
    assert r.code == 0, r.stderr
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:02.200000Z")
    r = run_cli(["process", "--json"])
    assert r.code == 0 and r.json()["claimed"] == 0, r.json()
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:03Z")
    r = run_cli(["process", "--json"])
    assert r.code == 0 and r.json()["done"] == 1, r.json()
