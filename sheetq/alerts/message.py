"""The failure alert text: one digest message per run, built from a template (docs/design.md §9).

The template (``sheetq/templates/alert.html``; documented at its top) has sections
``[header]``, ``[auth]``, ``[row]``, ``[more]`` and ``[footer]`` with ``string.Template``
placeholders. Every dynamic value is redacted, shortened, and only then HTML-escaped, so
a cut can never split an entity or a tag. The text is kept within Telegram's 4,096
characters by counting the raw HTML (markup included), which is never shorter than what
Telegram counts; rows that do not fit are summarised by ``[more]`` and still count as
covered. A plain-text variant (tags removed, values unescaped, errors shorter) is built
beside it for the fallback when Telegram refuses the HTML.

Pure functions, no I/O except reading a template file; never imports telegram.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from sheetq.errors import ConfigError
from sheetq.redact import redact, shorten

if TYPE_CHECKING:
    from sheetq.port import AlertItem

MAX_CHARS = 4096  # Telegram's limit for one message, in code points after markup
HTML_ERROR_CHARS = 300  # per row, before escaping
PLAIN_ERROR_CHARS = 200  # per row in the plain-text fallback ("shortened")
AUTH = "auth"

_SECTIONS = ("header", "auth", "row", "more", "footer")
_REQUIRED = ("header", "row")
_COMMON = (
    "count",
    "tasks",
    "queue",
    "spreadsheet",
    "auth_count",
    "auth_tasks",
    "auth_types",
    "requeue",
)
_REQUEUE_IN_SHEET = "type pending into the status cell or run: sheetq requeue --task ID"
_REQUEUE_BY_CLI = "run: sheetq requeue --task ID"
_ROW = ("task_id", "type", "error_class", "attempts", "error", "owner", "row", "link")
_ALLOWED = {
    "header": set(_COMMON),
    "auth": set(_COMMON),
    "footer": set(_COMMON),
    "more": {*_COMMON, "more"},
    "row": {*_COMMON, *_ROW},
}
_SECTION_LINE = re.compile(r"^\[(header|auth|row|more|footer)\]\s*$")
_TAG = re.compile(r"<[^<>]*>")


class TemplateError(ConfigError):
    """The alert template is not valid."""


@dataclass(frozen=True)
class AlertTemplate:
    """A parsed template: section name → text (lines joined with ``\\n``)."""

    sections: Mapping[str, str]
    source: str = "default"


@dataclass(frozen=True)
class AlertMessage:
    """A message ready to send.

    ``html`` is for ``parse_mode="HTML"``, ``plain`` for the fallback without a parse
    mode; both are at most ``MAX_CHARS`` long. ``covered`` lists every task id the
    message reports, listed or summarised as "and N more" (all of them are to be marked
    ``alerted_at``); ``listed`` is how many rows ``html`` writes out.
    """

    html: str
    plain: str
    covered: list[str]
    listed: int


# --- templates ---------------------------------------------------------------------


def default_template_text() -> str:
    """The packaged default template (``sheetq/templates/alert.html``)."""
    return (resources.files("sheetq") / "templates" / "alert.html").read_text(encoding="utf-8")


def parse_template(text: str, source: str = "default") -> AlertTemplate:
    """Parse template text. Raises ``TemplateError`` naming the problem and ``source``."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("##"):
            continue
        match = _SECTION_LINE.match(line)
        if match:
            current = match.group(1)
            if current in sections:
                raise TemplateError(
                    f"alert template {source}: line {number}: [{current}] appears twice"
                )
            sections[current] = []
            continue
        if current is None:
            if line.strip():
                raise TemplateError(
                    f"alert template {source}: line {number}: text before "
                    "the first section; start with [header]"
                )
            continue
        sections[current].append(line)
    joined = {name: "\n".join(lines).rstrip() for name, lines in sections.items()}
    for name in _REQUIRED:
        if name not in joined:
            raise TemplateError(f"alert template {source}: the [{name}] section is missing")
    for name, body in joined.items():
        tpl = string.Template(body)
        if not tpl.is_valid():
            raise TemplateError(
                f"alert template {source}: [{name}]: a '$' that is not a "
                "placeholder (write $$ for a literal $)"
            )
        unknown = sorted(set(tpl.get_identifiers()) - _ALLOWED[name])
        if unknown:
            raise TemplateError(
                f"alert template {source}: [{name}]: unknown placeholder(s) "
                f"{', '.join('$' + u for u in unknown)}; allowed: "
                f"{', '.join('$' + a for a in sorted(_ALLOWED[name]))}"
            )
    return AlertTemplate(joined, source)


def default_template() -> AlertTemplate:
    return parse_template(default_template_text(), "default")


def load_template(path: Path | None) -> AlertTemplate:
    """The template at ``path`` (``[telegram] template``), else the default one.

    Raises ``TemplateError`` when the file cannot be read or is not a valid template.
    """
    if path is None:
        return default_template()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"alert template {path}: cannot be read ({exc.strerror})") from None
    return parse_template(text, str(path))


# --- values --------------------------------------------------------------------------


def _tasks(n: int, word: str = "task") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _clean(value: object, limit: int, secrets: Sequence[str]) -> str:
    """Redacted, on one line, shortened to ``limit`` characters (not yet escaped)."""
    text = " ".join(redact(str(value or ""), secrets=secrets).split())
    return shorten(text, limit)


def _is_url(link: str) -> bool:
    return link.startswith(("https://", "http://")) and len(link) <= 2000 and " " not in link


def _row_values(
    item: AlertItem, *, error_chars: int, secrets: Sequence[str], as_html: bool
) -> dict[str, str]:
    esc: Callable[[str], str] = html.escape if as_html else (lambda s: s)
    raw = {
        "task_id": _clean(item.task_id, 60, secrets),
        "type": _clean(item.type, 60, secrets),
        "error_class": _clean(item.error_class, 30, secrets),
        "attempts": str(item.attempts),
        "error": _clean(item.error, error_chars, secrets),
        "owner": _clean(item.owner, 60, secrets),
        "row": str(item.row),
    }
    values = {name: esc(value) for name, value in raw.items()}
    link = redact(item.link or "", secrets=secrets)
    if _is_url(link):
        values["link"] = (
            f'<a href="{html.escape(link)}">open row {item.row}</a>' if as_html else link
        )
    elif link and link != item.task_id:
        values["link"] = esc(_clean(link, 200, secrets))
    else:
        values["link"] = f"row {item.row}"
    return values


def _common(
    items: Sequence[AlertItem],
    queue: str,
    spreadsheet: str,
    secrets: Sequence[str],
    as_html: bool,
    sheet_edits: bool,
) -> dict[str, str]:
    esc: Callable[[str], str] = html.escape if as_html else (lambda s: s)
    auth = [i for i in items if i.error_class == AUTH]
    types = sorted({i.type for i in auth if i.type})
    return {
        "count": str(len(items)),
        "tasks": _tasks(len(items)),
        "queue": esc(_clean(queue, 100, secrets)),
        "spreadsheet": esc(_clean(spreadsheet, 100, secrets)),
        "auth_count": str(len(auth)),
        "auth_tasks": _tasks(len(auth)),
        "auth_types": esc(_clean(", ".join(types) or "unknown type", 200, secrets)),
        "requeue": _REQUEUE_IN_SHEET if sheet_edits else _REQUEUE_BY_CLI,
    }


# --- rendering -------------------------------------------------------------------------


def _plain_section(body: str) -> str:
    """A section for plain text: tags removed, the template's own entities decoded."""
    return "\n".join(html.unescape(_TAG.sub("", line)) for line in body.split("\n"))


def _render(body: str, values: Mapping[str, str]) -> str:
    """Substitute ``values``; a line whose placeholders all came out empty is left out."""
    lines = []
    for line in body.split("\n"):
        names = string.Template(line).get_identifiers()
        if names and not any(values.get(n, "") for n in names):
            continue
        lines.append(string.Template(line).substitute(values))
    return "\n".join(lines)


def _compose(
    tpl: AlertTemplate,
    items: Sequence[AlertItem],
    common: Mapping[str, str],
    rows: Sequence[Mapping[str, str]],
    as_html: bool,
    limit: int,
) -> tuple[str, int]:
    """The message text and how many rows it lists (the rest go to ``[more]``)."""

    def section(name: str) -> str:
        body = tpl.sections.get(name, "")
        return _plain_section(body) if not as_html and body else body

    head = [_render(section("header"), common)]
    if any(i.error_class == AUTH for i in items) and section("auth"):
        head.append(_render(section("auth"), common))
    footer = _render(section("footer"), common) if section("footer") else ""
    more_body = section("more") or "\n…and $more more"

    def more(n: int) -> str:
        return _render(more_body, {**common, "more": str(n)}) if n else ""

    def text(parts: list[str]) -> str:
        return "\n".join(p for p in parts if p).strip()

    listed: list[str] = []
    for index, values in enumerate(rows):
        candidate = [*head, *listed, _render(section("row"), {**common, **values})]
        rest = len(rows) - index - 1
        if len(text([*candidate, more(rest), footer])) > limit:
            break
        listed.append(candidate[-1])
    message = text([*head, *listed, more(len(rows) - len(listed)), footer])
    if len(message) > limit or not message:  # a template too long to hold even the summary
        message = shorten(
            f"sheetq: {common['tasks']} failed in {common['queue']}; "
            "see `sheetq list --status failed` (the alert template is too long)",
            limit,
        )
        return message, 0
    return message, len(listed)


def build_message(
    items: Sequence[AlertItem],
    *,
    queue: str = "Queue",
    spreadsheet: str = "",
    template: AlertTemplate | None = None,
    secrets: Sequence[str] = (),
    limit: int = MAX_CHARS,
    sheet_edits: bool = True,
) -> AlertMessage:
    """The digest for ``items`` (auth failures first), in HTML and in plain text.

    ``sheet_edits``: a person can requeue by typing into a status cell (a sheet queue, or
    a PostgreSQL queue with a mirror); else ``$requeue`` names only the CLI.

    ``secrets`` are literal strings (the bot token) masked in every value on top of
    ``redact``'s patterns. ``limit`` is in characters (code points) of the raw text.
    Never raises for odd data; an invalid ``template`` is the caller's to report.
    """
    tpl = template or default_template()
    ordered = sorted(items, key=lambda i: i.error_class != AUTH)  # stable: keeps given order
    parts = []
    for as_html, chars in ((True, HTML_ERROR_CHARS), (False, PLAIN_ERROR_CHARS)):
        common = _common(ordered, queue, spreadsheet, secrets, as_html, sheet_edits)
        rows = [
            _row_values(i, error_chars=chars, secrets=secrets, as_html=as_html) for i in ordered
        ]
        parts.append(_compose(tpl, ordered, common, rows, as_html, limit))
    (html_text, listed), (plain_text, _) = parts
    return AlertMessage(
        html=html_text, plain=plain_text, covered=[i.task_id for i in ordered], listed=listed
    )


def probe_message(*, host: str, queue: str, secrets: Sequence[str] = ()) -> AlertMessage:
    """The short message ``sheetq alert --test`` sends (HTML and plain)."""
    where = _clean(f"{host}, queue {queue}", 200, secrets)
    plain = f"sheetq test alert from {where}: failure alerts will arrive in this chat."
    text = (
        f"✅ <b>sheetq test alert</b> from {html.escape(where)}: failure alerts will "
        "arrive in this chat."
    )
    return AlertMessage(html=text, plain=plain, covered=[], listed=0)
