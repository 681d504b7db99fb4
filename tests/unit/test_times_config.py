"""Timestamps people type, durations, and the configuration file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sheetq.config import load_settings
from sheetq.errors import ConfigError
from sheetq.times import Unparseable, format_ts, parse_duration, parse_ts, zone


def test_format_is_utc_z_seconds() -> None:
    """Written timestamps are UTC, second precision, with Z."""
    assert format_ts(datetime(2026, 1, 5, 9, 0, 7, 999, tzinfo=UTC)) == "2026-01-05T09:00:07Z"


def test_parse_what_people_type() -> None:
    """ISO with offset, naive ISO in the sheet's zone (DST included), locale forms, serials."""
    kyiv = zone("Europe/Kyiv")
    assert parse_ts("2026-01-05T09:00:00Z") == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert parse_ts("2026-01-05 11:00", kyiv) == datetime(2026, 1, 5, 9, tzinfo=UTC)  # UTC+2
    assert parse_ts("2026-07-05 11:00", kyiv) == datetime(2026, 7, 5, 8, tzinfo=UTC)  # UTC+3
    assert parse_ts("05.01.2026 11:00", kyiv, "uk_UA") == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert parse_ts("1/5/2026 9:00", zone("UTC"), "en_US") == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert parse_ts(46027.375, zone("UTC")) == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert parse_ts("") is None
    assert isinstance(parse_ts("tomorrow"), Unparseable)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("72h", 259200), ("1h30m", 5400), ("30d", 2592000), ("15", 15)],
)
def test_durations(text: str, seconds: float) -> None:
    """Durations in s, m, h, d, combined, or plain seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10 minutes", "m10", "-5", "1h 30x"])
def test_bad_durations(text: str) -> None:
    """Anything else is refused with an example of the right form."""
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def test_config_full(tmp_path: Path) -> None:
    """Every documented key is read; per-type values override [defaults]."""
    path = tmp_path / "sheetq.toml"
    path.write_text(
        """
[queue]
queue_sheet = "Jon's Queue"
[defaults]
max_attempts = 3
backoff = ["1m", "5m"]
timeout = "30s"
owner = "ops"
[types.lead]
command = "python push.py --fast"
key_fields = ["lead_id"]
idempotent = true
owner = "sales"
rate_limit = "30/min"
[types.order]
http = { url = "https://crm.example.com/o", headers = { Authorization = "Bearer ${CRM_TOKEN}" } }
on_unknown = "reconcile"
reconcile = { command = ["python", "find.py"] }
max_attempts = 7
""",
        encoding="utf-8",
    )
    s = load_settings(config=str(path), env={"SHEETQ_SPREADSHEET": "local:x.db"})
    assert s.queue_sheet == "Jon's Queue"
    lead = s.type_config("lead")
    assert lead.handler is not None and lead.handler.command == ("python", "push.py", "--fast")
    assert lead.on_unknown == "retry" and lead.owner == "sales"
    assert lead.policy.max_attempts == 3 and lead.policy.backoff == (60.0, 300.0)
    assert lead.rate_limit is not None and lead.rate_limit.interval == 2.0
    order = s.type_config("order")
    assert order.on_unknown == "reconcile" and order.policy.max_attempts == 7
    assert order.owner == "ops"
    assert s.type_config("nope").handler is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[types.lead]\ncomand = 'x'\n", "unknown key 'comand' (did you mean 'command'?)"),
        ("[types.lead]\ncommand = 'x'\npython = 'a:b'\n", "give one handler"),
        ("[defaults]\nbackoff = ['soon']\n", "expected a duration"),
        ("[types.x]\nrate_limit = 'lots'\n", "expected a rate"),
        ("[types.x]\ncommand='a'\non_unknown = 'reconcile'\n", "needs reconcile"),
        ("[queue\n", "not valid TOML"),
        ("[types.x]\ncommand='a'\nkey_fields = ['']\n", "key_fields: an empty field name"),
        ("[defaults]\ncomand = 'x'\n", "'command' is a type's own key: put it under [types"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    """A bad configuration is refused with the section, key and what was expected."""
    path = tmp_path / "sheetq.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config=str(path), env={"SHEETQ_SPREADSHEET": "local:x"})
    assert fragment in info.value.message


def test_missing_spreadsheet_names_both_forms() -> None:
    """No SHEETQ_SPREADSHEET: an error naming a Google URL/key and local:PATH."""
    with pytest.raises(ConfigError) as info:
        load_settings(env={})
    assert "SHEETQ_SPREADSHEET" in info.value.message and "local:PATH" in info.value.message


def test_a_relative_lock_dir_is_the_config_files_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[queue] lock_dir = "locks"` is beside sheetq.toml wherever sheetq is started from (cron
    starts in $HOME), as a type's `cwd` is; SHEETQ_LOCK_DIR is taken as given."""
    from sheetq.config import load_settings

    app = tmp_path / "app"
    app.mkdir()
    config = app / "sheetq.toml"
    config.write_text('[queue]\nlock_dir = "locks"\n', encoding="utf-8")
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = load_settings(config=str(config), env={}, require_spreadsheet=False)
    assert settings.lock_dir == app.resolve() / "locks"
    env = {"SHEETQ_LOCK_DIR": "/srv/locks"}
    assert load_settings(config=str(config), env=env, require_spreadsheet=False).lock_dir == (
        Path("/srv/locks")
    )
