"""Reading the values of command-line flags, one rule for every command."""

from __future__ import annotations

from sheetq.errors import UsageError


def duration_flag(text: str, flag: str) -> float:
    """Seconds of a duration flag written with a unit (``--poll 5s``, ``--for 2h``).

    Raises ``UsageError`` (exit 2) naming ``flag`` for text that is not such a duration
    (``sheetq.times.parse_duration``)."""
    from sheetq.times import parse_duration

    try:
        return parse_duration(text, what=flag, require_unit=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
