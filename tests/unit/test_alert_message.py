"""The alert message builder: template, escaping, redaction, the 4,096-character limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from sheetq.alerts.message import (
    MAX_CHARS,
    TemplateError,
    build_message,
    default_template,
    load_template,
    parse_template,
    probe_message,
)
from sheetq.port import AlertItem
from tests.fakes.telegram_fake import parse_entities

TOKEN = "123456:TEST-token_abcdefghijklmnopqrstuvwxyz012345"
GOOGLE_LINK = "https://docs.google.com/spreadsheets/d/KEY/edit#gid=0&range=A{row}"


def item(
    n: int = 1,
    *,
    error: str = "bad data",
    error_class: str = "permanent",
    owner: str = "",
    link: str = "",
    task_type: str = "lead",
) -> AlertItem:
    task_id = f"t_{n:04d}"
    return AlertItem(
        task_id=task_id,
        type=task_type,
        error_class=error_class,
        attempts=2,
        error=error,
        row=n + 1,
        owner=owner,
        link=link or task_id,
    )


def visible(html_text: str) -> str:
    plain, _ = parse_entities(html_text, "HTML")  # raises if Telegram would refuse it
    return plain


def test_lists_count_and_every_field() -> None:
    """The message gives the count, then task id, type, error class, attempts, error, link."""
    msg = build_message([item(1, owner="sales"), item(2)], queue="Queue", spreadsheet="CRM")
    text = visible(msg.html)
    assert text.startswith("🚨 sheetq: 2 tasks failed in Queue (CRM)")
    for part in (
        "t_0001",
        "lead",
        "permanent after 2 attempt(s)",
        "bad data",
        "owner: sales",
        "row 2",
        "t_0002",
        "row 3",
    ):
        assert part in text
    assert msg.covered == ["t_0001", "t_0002"] and msg.listed == 2


def test_line_with_only_empty_placeholders_is_dropped() -> None:
    """A row without an owner has no "owner:" line."""
    msg = build_message([item(1)])
    assert "owner:" not in msg.html and "owner:" not in msg.plain


def test_dynamic_values_are_escaped() -> None:
    """<, > and & in any value are escaped; the template's own tags stay tags."""
    hostile = item(1, error="<b>x</b> & <script> _*[]`", task_type="a<b>&c", owner="<i>")
    msg = build_message([hostile], queue="Q&A <1>", spreadsheet="<b>")
    text = visible(msg.html)
    assert "<b>x</b> & <script> _*[]`" in text
    assert "a<b>&c" in text and "Q&A <1>" in text and "owner: <i>" in text
    assert "&lt;script&gt;" in msg.html and "<b>sheetq:" in msg.html


@pytest.mark.parametrize("length", range(294, 306))
def test_truncation_never_splits_an_entity(length: int) -> None:
    """Errors are cut before escaping, so a cut can never leave half an &amp; or tag."""
    error = ("&<>" * 200)[:length]
    visible(build_message([item(1, error=error)]).html)


def test_errors_are_shortened_and_on_one_line() -> None:
    """A long multi-line error is one line of at most 300 characters ending in …."""
    msg = build_message([item(1, error="line one\nline two\t" + "x" * 5000)])
    line = next(ln for ln in visible(msg.html).splitlines() if ln.startswith("line one"))
    assert line.startswith("line one line two x") and line.endswith("…") and len(line) == 300


def test_token_and_secrets_are_redacted() -> None:
    """The bot token (given or by its shape) and bearer tokens never reach the message."""
    msg = build_message(
        [item(1, error=f"url /bot{TOKEN}/x Bearer abcdefghijklmnop", task_type=TOKEN)],
        secrets=[TOKEN],
    )
    for text in (msg.html, msg.plain):
        assert TOKEN not in text and "abcdefghijklmnop" not in text
        assert "[redacted]" in text


def test_auth_failures_first_with_a_call_to_action() -> None:
    """Auth failures are listed first and the message says a person must fix credentials."""
    items = [item(1), item(2, error_class="auth", task_type="crm"), item(3)]
    text = visible(build_message(items).html)
    assert "1 task failed on credentials (crm): a person must fix them" in text
    assert text.index("t_0002") < text.index("t_0001") < text.index("t_0003")
    assert text.index("credentials") < text.index("t_0002")


def test_no_auth_section_without_auth_failures() -> None:
    """The credentials call-out appears only when a row failed on auth."""
    assert "credentials" not in build_message([item(1)]).html


def test_google_link_is_an_anchor() -> None:
    """A row URL becomes a link (its & escaped); the plain variant shows the bare URL."""
    url = GOOGLE_LINK.format(row=5)
    msg = build_message([item(4, link=url)])
    plain, entities = parse_entities(msg.html, "HTML")
    assert "open row 5" in plain
    assert {"type": "text_link", "url": url} in [
        {k: e[k] for k in ("type", "url")} for e in entities if e["type"] == "text_link"
    ]
    assert url in msg.plain


def test_many_rows_fit_in_one_message() -> None:
    """300 rows: ≤ 4,096 characters, the rest as "and N more", all 300 covered."""
    items = [
        item(n, error="e" * 400, owner="ops", link=GOOGLE_LINK.format(row=n + 1))
        for n in range(300)
    ]
    msg = build_message(items)
    assert len(msg.html) <= MAX_CHARS and len(msg.plain) <= MAX_CHARS
    assert len(visible(msg.html)) <= MAX_CHARS
    assert 0 < msg.listed < 300
    assert f"…and {300 - msg.listed} more" in visible(msg.html)
    assert msg.covered == [i.task_id for i in items]
    assert "…and" in msg.plain


@pytest.mark.parametrize("limit", [150, 400, 1000])
def test_respects_any_limit(limit: int) -> None:
    """Whatever the limit, both variants stay within it."""
    msg = build_message([item(n, error="x" * 300) for n in range(20)], limit=limit)
    assert len(msg.html) <= limit and len(msg.plain) <= limit
    visible(msg.html)


def test_plain_variant_has_no_markup() -> None:
    """The fallback text has the template's tags removed and values unescaped."""
    msg = build_message([item(1, error="a < b & c")])
    assert "<b>" not in msg.plain and "<code>" not in msg.plain
    assert "a < b & c" in msg.plain and "&amp;" not in msg.plain


def test_template_comments_are_not_sent() -> None:
    """Lines starting with ## document the template and never reach the chat."""
    msg = build_message([item(1)])
    assert "##" not in msg.html and "Placeholders" not in msg.plain


def test_custom_template(tmp_path: Path) -> None:
    """A custom template file is read and its sections used."""
    path = tmp_path / "t.html"
    path.write_text(
        "## mine\n[header]\n<b>$count</b> in $queue\n[row]\n* $task_id $$5\n[more]\n+$more\n",
        encoding="utf-8",
    )
    msg = build_message([item(1), item(2)], template=load_template(path), queue="Leads")
    assert visible(msg.html) == "2 in Leads\n* t_0001 $5\n* t_0002 $5"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[header]\nx\n", "[row] section is missing"),
        ("[row]\n$task_id\n", "[header] section is missing"),
        ("hello\n[header]\nx\n[row]\ny\n", "text before the first section"),
        ("[header]\n$task_id\n[row]\nx\n", "unknown placeholder(s) $task_id"),
        ("[header]\nx\n[row]\ncost 5$\n", "write $$ for a literal $"),
        ("[header]\nx\n[row]\ny\n[row]\nz\n", "[row] appears twice"),
    ],
)
def test_invalid_templates_are_refused(text: str, problem: str) -> None:
    """A template with a problem is refused with a message naming it."""
    with pytest.raises(TemplateError, match=None) as caught:
        parse_template(text, "t.html")
    assert problem in caught.value.message and "t.html" in caught.value.message


def test_missing_template_file(tmp_path: Path) -> None:
    """A template path that does not exist is a TemplateError naming the path."""
    with pytest.raises(TemplateError, match="cannot be read"):
        load_template(tmp_path / "nope.html")


def test_oversized_template_still_fits() -> None:
    """A header longer than the limit gives a short built-in text, never an oversized one."""
    tpl = parse_template("[header]\n" + "h" * 5000 + "\n[row]\n$task_id\n")
    msg = build_message([item(1)], template=tpl)
    assert len(msg.html) <= MAX_CHARS and "1 task failed" in msg.html
    assert msg.covered == ["t_0001"]


def test_default_template_is_valid_and_documented() -> None:
    """The packaged template parses and documents every placeholder it accepts."""
    tpl = default_template()
    assert {"header", "auth", "row", "more", "footer"} <= set(tpl.sections)
    text = (Path(__file__).resolve().parents[2] / "sheetq" / "templates" / "alert.html").read_text(
        encoding="utf-8"
    )
    for name in (
        "$count",
        "$tasks",
        "$queue",
        "$spreadsheet",
        "$auth_count",
        "$auth_tasks",
        "$auth_types",
        "$task_id",
        "$type",
        "$error_class",
        "$attempts",
        "$error",
        "$owner",
        "$row",
        "$link",
        "$more",
    ):
        assert name in text


def test_probe_message_is_valid() -> None:
    """The `alert --test` message is valid HTML and names the host."""
    msg = probe_message(host="web-1", queue="Queue")
    assert "sheetq test alert from web-1" in visible(msg.html)
    assert msg.covered == []
