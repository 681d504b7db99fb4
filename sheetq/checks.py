"""One line of ``sheetq doctor``: what was checked, what was found, how to fix it.

Every backend reports its own checks (``QueuePort.checks``) in these values;
``sheetq.doctor`` adds the configuration, handlers and Telegram.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One line of ``sheetq doctor``: what was checked, what was found, how to fix it."""

    ok: bool
    check: str
    detail: str
    fix: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "check": self.check, "detail": self.detail, "fix": self.fix}


def fine(check: str, detail: str, fix: str = "") -> Check:
    """An ok line (a ``fix`` is then a hint)."""
    return Check(True, check, detail, fix)


def problem(check: str, detail: str, fix: str = "") -> Check:
    """A problem line: ``sheetq doctor`` exits 1."""
    return Check(False, check, detail, fix)
