"""What a fresh user met: global options after the command, terminals
safe from bidi tricks in payloads, and `show` with the history `archive` moved away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Book, run_cli

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

TRICKS = "\u202eevil\u202c \u2066x\u2069 \u200f\u2028"  # RLO/PDF, LRI/PDI, RLM, LSEP


def _enqueue(payload: dict[str, object]) -> str:
    r = run_cli(["enqueue", "job", json.dumps(payload, ensure_ascii=False), "--json"])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--spreadsheet", "{target}"],
        ["status", "--spreadsheet={target}"],
        ["status", "-S", "{target}"],
        ["list", "--json", "-S", "{target}", "-q"],
    ],
    ids=["--opt VALUE", "--opt=VALUE", "-S VALUE", "among own options"],
)
def test_spreadsheet_option_works_after_the_command(tmp_path: Path, args: list[str]) -> None:
    """`sheetq status --spreadsheet X` means `sheetq --spreadsheet X status`, as the error
    message without a spreadsheet tells the user to do."""
    target = f"local:{tmp_path / 'book.db'}"
    assert run_cli(["init", "--spreadsheet", target]).code == 0
    missing = run_cli(["status"])
    assert missing.code == 2 and "pass --spreadsheet" in missing.stderr
    r = run_cli([a.replace("{target}", target) for a in args])
    assert r.code == 0, r.stderr


def test_global_option_after_the_command_without_a_value_is_a_usage_error(book: Book) -> None:
    """`sheetq status --database-url` (nothing after it): exit 2, one line naming it."""
    r = run_cli(["status", "--database-url"])
    assert r.code == 2 and r.stderr.strip().splitlines() == [
        "sheetq: error: --database-url needs a value (see `sheetq --help`)"
    ]


def test_config_option_after_the_command(book: Book, tmp_path: Path) -> None:
    """`--config FILE` after the command reads that file (a missing one: exit 2 naming it)."""
    r = run_cli(["status", "--config", str(tmp_path / "nowhere.toml")])
    assert r.code == 2 and "nowhere.toml: configuration file not found" in r.stderr


def test_help_says_the_global_options_may_follow_the_command() -> None:
    """`sheetq --help` lists the options a user may also write after the command."""
    r = run_cli(["--help"])
    assert r.code == 0
    text = " ".join(r.stdout.split())
    for option in ("--spreadsheet", "--database-url", "--config"):
        start = text.index(option)
        assert "May also follow the command" in text[start : start + 200], option


def test_show_escapes_bidi_and_control_characters_but_json_keeps_them(book: Book) -> None:
    """A payload's U+202E and friends are printed as \\u escapes by `show` and `list`, never
    raw; `--json` carries the payload as stored."""
    task = _enqueue({"name": TRICKS})
    for args in (["show", task], ["list"]):
        r = run_cli(args)
        assert r.code == 0, r.stderr
        for raw in ("\u202e", "\u202c", "\u2066", "\u2069", "\u200f", "\u2028"):
            assert raw not in r.stdout, (args, raw)
    shown = run_cli(["show", task]).stdout
    assert "\\u202eevil\\u202c" in shown and "\\u2066x\\u2069" in shown
    doc = run_cli(["show", task, "--json"]).json()
    assert json.loads(doc["rows"][0]["payload_json"]) == {"name": TRICKS}


def test_show_includes_the_history_archive_moved_to_the_log_archive(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `archive --log-older-than`, `show ID` still gives the task's whole history,
    the moved rows first and marked with the log archive's worksheet in `--json`."""
    if type(book).__name__ == "GoogleBook":
        pytest.skip("on Google, show reads QueueLog only: QueueLogArchive costs a request more")
    task = _enqueue({"n": 1})
    monkeypatch.setenv("SHEETQ_NOW", "2099-01-01T00:00:00Z")
    moved = run_cli(["archive", "--log-older-than", "1d", "--json"])
    assert moved.code == 0 and moved.json()["log_archived"] == 1, moved.stdout + moved.stderr
    assert run_cli(["skip", "--task", task]).code == 0
    doc = run_cli(["show", task, "--json"]).json()
    assert [e["event"] for e in doc["log"]] == ["enqueued", "skipped"]
    assert doc["log"][0]["worksheet"] == "QueueLogArchive"
    assert "worksheet" not in doc["log"][1]
    human = run_cli(["show", task]).stdout
    assert "enqueued" in human.split("history", 1)[1]
