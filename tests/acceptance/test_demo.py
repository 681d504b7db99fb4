"""`sheetq demo`: the README's first command."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli, run_proc


def test_demo_runs_fast_and_shows_the_tour(tmp_path: Path) -> None:
    """The demo enqueues, shows a duplicate and a conflict, retries then succeeds, fails one,
    and prints the alert text; no network, no configuration, exit 0."""
    r = run_proc(["demo", "--dir", str(tmp_path / "d")], timeout=30)
    assert r.code == 0, r.stderr
    for fragment in ("duplicate", "CONFLICT", "1 retry", "INV-2026-0077", "failed", "🚨"):
        assert fragment in r.stdout, fragment
    assert (tmp_path / "d" / "demo.db").exists()
    again = run_cli(["demo", "--dir", str(tmp_path / "d")])
    assert again.code == 0  # an earlier demo directory may be reused


def test_demo_refuses_a_directory_with_other_files(tmp_path: Path) -> None:
    """--dir on a folder with the user's own files (or on a file) is refused, nothing touched."""
    (tmp_path / "sheetq.toml").write_text("[queue]\n", encoding="utf-8")
    r = run_cli(["demo", "--dir", str(tmp_path)])
    assert r.code == 2 and "not empty" in r.stderr
    assert (tmp_path / "sheetq.toml").read_text(encoding="utf-8") == "[queue]\n"
    assert not (tmp_path / "demo.db").exists()
    r = run_cli(["demo", "--dir", str(tmp_path / "sheetq.toml")])
    assert r.code == 2 and "not a directory" in r.stderr
