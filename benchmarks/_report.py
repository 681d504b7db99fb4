"""The one table: plain aligned text, Markdown or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

COLUMNS = ("section", "measure", "value", "unit", "note")


@dataclass
class Measure:
    """One row of the table. ``value`` is a number, or ``"n/a"`` when it could not be taken."""

    section: str
    measure: str
    value: float | int | str
    unit: str
    note: str = ""


def _cells(m: Measure) -> list[str]:
    value = m.value
    if isinstance(value, float):
        text = f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    return [m.section, m.measure, text, m.unit, m.note]


def render_text(rows: Sequence[Measure], title: str) -> str:
    """Aligned columns, values right-aligned."""
    cells = [list(COLUMNS)] + [_cells(m) for m in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = [title]
    for n, row in enumerate(cells):
        parts = [
            c.rjust(widths[i]) if i == 2 and n else c.ljust(widths[i]) for i, c in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(rows: Sequence[Measure], title: str) -> str:
    lines = [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |", "|---|---|--:|---|---|"]
    for m in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(m)) + " |")
    return "\n".join(lines)


def render_json(rows: Sequence[Measure], title: str) -> str:
    return json.dumps({"title": title, "rows": [asdict(m) for m in rows]}, ensure_ascii=False)
