"""`sheetq init` cosmetics for a Google spreadsheet, as one list of batchUpdate requests.

Frozen header row; a drop-down of the six statuses on ``status``; rows coloured by status
(failed red, retry amber, processing blue, done green); a warning-only protection on the
columns sheetq writes; readable column widths. Idempotent: sheetq's own rules and
protections are recognised and replaced, a manager's are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, Status
from sheetq.sheet.store import WorkbookInfo, column_letter

PROTECTION = "sheetq: written by sheetq — edit status or owner to steer a task"
LOG_PROTECTION = "sheetq: audit log, append-only"
PEOPLE_COLUMNS = frozenset({"status", "owner"})  # managers may edit these
COLOURS = {  # status → background (Google's light palette)
    "failed": {"red": 0.957, "green": 0.8, "blue": 0.8},
    "retry": {"red": 1.0, "green": 0.898, "blue": 0.6},
    "processing": {"red": 0.788, "green": 0.855, "blue": 0.973},
    "done": {"red": 0.851, "green": 0.918, "blue": 0.827},
}
WIDTHS = {
    "task_id": 230,
    "created_at": 160,
    "type": 100,
    "payload_json": 320,
    "status": 95,
    "retry_count": 80,
    "next_retry_at": 160,
    "last_error": 320,
    "idempotency_key": 220,
    "updated_at": 160,
    "error_class": 100,
    "result": 200,
    "lease_owner": 220,
    "lease_until": 160,
    "payload_hash": 140,
    "alerted_at": 160,
    "owner": 90,
    "ts": 160,
    "event": 90,
    "message": 360,
    "run_id": 220,
    "duration_ms": 90,
}


def _formula(letter: str, status: str) -> str:
    return f'=TRIM(LOWER(${letter}2))="{status}"'


def _ours(rule: Mapping[str, Any]) -> bool:
    values = rule.get("booleanRule", {}).get("condition", {}).get("values", [])
    text = str(values[0].get("userEnteredValue", "")) if values else ""
    return text.startswith("=TRIM(LOWER($") and any(f'="{s}"' in text for s in COLOURS)


def _runs(indexes: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def _sheet_requests(
    meta: Mapping[str, Any],
    sheet_id: int,
    header: Sequence[str],
    *,
    owned: Sequence[str],
    is_log: bool,
) -> tuple[list[dict[str, Any]], list[str]]:
    requests: list[dict[str, Any]] = []
    done: list[str] = []
    props = meta.get("properties", {})
    grid = props.get("gridProperties", {})
    if int(grid.get("frozenRowCount", 0)) != 1:
        requests.append(
            {
                "updateSheetProperties": {
                    "properties": {"sheetId": sheet_id, "gridProperties": {"frozenRowCount": 1}},
                    "fields": "gridProperties.frozenRowCount",
                }
            }
        )
        done.append("header row frozen")
    columns = {name: i for i, name in enumerate(header) if name in owned}
    for index in columns.values():
        requests.append(
            {
                "repeatCell": {
                    "range": {
                        "sheetId": sheet_id,
                        "startRowIndex": 0,
                        "endRowIndex": 1,
                        "startColumnIndex": index,
                        "endColumnIndex": index + 1,
                    },
                    "cell": {"userEnteredFormat": {"textFormat": {"bold": True}}},
                    "fields": "userEnteredFormat.textFormat.bold",
                }
            }
        )
    status = columns.get("status")
    if status is not None and not is_log:
        requests.append(
            {
                "setDataValidation": {
                    "range": {
                        "sheetId": sheet_id,
                        "startRowIndex": 1,  # unbounded below: rows a person adds or
                        "startColumnIndex": status,  # deletes meanwhile change nothing
                        "endColumnIndex": status + 1,
                    },
                    "rule": {
                        "condition": {
                            "type": "ONE_OF_LIST",
                            "values": [{"userEnteredValue": s.value} for s in Status],
                        },
                        "showCustomUi": True,
                        "strict": False,
                        "inputMessage": "pending or retry runs the task again",
                    },
                }
            }
        )
        done.append("status drop-down")
        existing = meta.get("conditionalFormats", []) or []
        for index in reversed(range(len(existing))):
            if _ours(existing[index]):
                requests.append(
                    {"deleteConditionalFormatRule": {"sheetId": sheet_id, "index": index}}
                )
        width = max(len(header), 1)
        letter = column_letter(status)
        for name, colour in COLOURS.items():
            requests.append(
                {
                    "addConditionalFormatRule": {
                        "index": 0,
                        "rule": {
                            "ranges": [
                                {
                                    "sheetId": sheet_id,
                                    "startRowIndex": 1,
                                    "startColumnIndex": 0,
                                    "endColumnIndex": width,
                                }
                            ],
                            "booleanRule": {
                                "condition": {
                                    "type": "CUSTOM_FORMULA",
                                    "values": [{"userEnteredValue": _formula(letter, name)}],
                                },
                                "format": {"backgroundColor": colour},
                            },
                        },
                    }
                }
            )
        done.append("rows coloured by status")
    ours = [
        p
        for p in meta.get("protectedRanges", []) or []
        if str(p.get("description", "")).startswith("sheetq:")
    ]
    for protected in ours:
        requests.append(
            {"deleteProtectedRange": {"protectedRangeId": protected["protectedRangeId"]}}
        )
    description = LOG_PROTECTION if is_log else PROTECTION
    protect = [i for n, i in columns.items() if is_log or n not in PEOPLE_COLUMNS]
    for lo, hi in _runs(protect):
        requests.append(
            {
                "addProtectedRange": {
                    "protectedRange": {
                        "range": {
                            "sheetId": sheet_id,
                            "startColumnIndex": lo,
                            "endColumnIndex": hi + 1,
                        },
                        "description": description,
                        "warningOnly": True,
                    }
                }
            }
        )
    if protect:
        done.append("warning-only protection on sheetq's columns")
    if not ours:  # first formatting only: later, widths are the manager's
        for name, index in columns.items():
            requests.append(
                {
                    "updateDimensionProperties": {
                        "range": {
                            "sheetId": sheet_id,
                            "dimension": "COLUMNS",
                            "startIndex": index,
                            "endIndex": index + 1,
                        },
                        "properties": {"pixelSize": WIDTHS.get(name, 120)},
                        "fields": "pixelSize",
                    }
                }
            )
        done.append("column widths")
    return requests, done


def format_requests(
    meta: Mapping[str, Any], info: WorkbookInfo, queue: str, log: str, archive: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The requests that format the three worksheets, and one line per worksheet."""
    by_title = {s["properties"]["title"]: s for s in meta.get("sheets", [])}
    requests: list[dict[str, Any]] = []
    lines: list[str] = []
    for title, owned, is_log in (
        (queue, QUEUE_COLUMNS, False),
        (log, LOG_COLUMNS, True),
        (archive, QUEUE_COLUMNS, False),
    ):
        sheet_meta = by_title.get(title)
        sheet = info.sheets.get(title)
        if sheet_meta is None or sheet is None:
            continue
        more, done = _sheet_requests(
            sheet_meta, sheet.sheet_id, sheet.header, owned=owned, is_log=is_log
        )
        requests += more
        if done:
            lines.append(f"{title}: " + ", ".join(done))
    return requests, lines
