"""``sheetq doctor``: check configuration, credentials, access, headers, Telegram."""

from __future__ import annotations

from sheetq.errors import SheetqError


def doctor() -> None:
    """Check configuration, credentials, spreadsheet access, headers and Telegram.

    Example:

      sheetq doctor
    """
    raise SheetqError("doctor: not built yet")
