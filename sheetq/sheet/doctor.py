"""``sheetq doctor`` on a sheet: the workbook is reachable, has sheetq's worksheets and
columns, takes a write, and who holds the run lease.

* local — the file exists and is a sheetq workbook, headers, write access;
* Google — credentials (a service-account key: its e-mail is printed), the spreadsheet is
  reachable (403 and 404 explained in plain words), headers, write access (a named range
  added and removed in one atomic ``batchUpdate``, the run lease's mechanism), the run
  lease, the spreadsheet's time zone.

Cost on Google: 2 Sheets API requests (4 before ``sheetq init``: opening retries without
the missing worksheets), and one more to read the ``Connectors`` rows when the
configuration has a ``[connectors.NAME]`` table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sheetq.checks import Check, fine, problem
from sheetq.config import Settings
from sheetq.connectors import State
from sheetq.errors import ConfigError, LeaseConflict, SchemaError, SheetqError
from sheetq.model import CONNECTOR_COLUMNS, CONNECTORS_SHEET, LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.sheet import LOCAL_PREFIX, is_local
from sheetq.sheet.store import ChangeSet, LeaseChange, Read, Store, WorkbookInfo
from sheetq.sheet.workbook_file import refusal

PROBE_RANGE = "sheetq_doctor_probe"  # the named range the write probe adds and removes
FIX_KEY_FILE = (
    "download a JSON key (Google Cloud console → IAM → Service accounts → Keys) and set "
    "GOOGLE_APPLICATION_CREDENTIALS to its path"
)
FIX_KEY = (
    "copy the key from the sheet's address, https://docs.google.com/spreadsheets/d/KEY/edit, "
    "into SHEETQ_SPREADSHEET"
)
FIX_SHARE = "open the spreadsheet, press Share and add {who} as Editor"


def check_sheet(settings: Settings) -> list[Check]:
    """The local workbook's or the Google spreadsheet's lines."""
    if is_local(settings.spreadsheet):
        return check_local(settings)
    return check_google(settings)


# --- the workbook, on either backend -----------------------------------------------------


def check_headers(info: WorkbookInfo, settings: Settings) -> list[Check]:
    """Queue, QueueLog and QueueArchive exist with every column sheetq needs, none twice;
    QueueLogArchive too once `archive --log-older-than` has made it (until then it is not
    needed); Connectors when the configuration has a ``[connectors.NAME]`` table."""
    checks: list[Check] = []
    wanted = [
        (settings.queue_sheet, QUEUE_COLUMNS),
        (settings.log_sheet, LOG_COLUMNS),
        (settings.archive_sheet, QUEUE_COLUMNS),
        (settings.log_archive_sheet, LOG_COLUMNS),
    ]
    if settings.connectors_sheet:
        wanted.append((CONNECTORS_SHEET, CONNECTOR_COLUMNS))
    for title, columns in wanted:
        what, sheet = f"worksheet {title}", info.sheets.get(title)
        if sheet is None and title == settings.log_archive_sheet:
            detail = f"'{title}' not made yet: `archive --log-older-than` makes it"
            checks.append(fine(what, detail))
            continue
        if sheet is None:
            checks.append(problem(what, f"'{title}' does not exist", "run `sheetq init`"))
            continue
        try:
            found = sheet.columns(columns)
        except SchemaError as exc:
            checks.append(problem(what, exc.message, "rename or remove one of the two"))
            continue
        missing = sheet.missing(columns)
        if missing:
            detail = f"'{title}' lacks column(s) {', '.join(missing)}"
            fix = "run `sheetq init`: it adds them at the end and keeps every cell"
            checks.append(problem(what, detail, fix))
            continue
        own = len(set(found) - set(columns))
        extra = f", plus {own} column(s) of your own" if own else ""
        checks.append(fine(what, f"'{title}' has all {len(columns)} columns{extra}"))
    return checks


def check_connector_states(store: Store, info: WorkbookInfo, settings: Settings) -> list[Check]:
    """Each ``state`` typed in the Connectors worksheet is one sheetq knows (a person may
    type ``closed`` or ``paused``; anything else is not honoured and is put back by the
    next run). One read, only when the configuration has a ``[connectors.NAME]`` table and
    the worksheet has its ``name`` and ``state`` columns."""
    sheet = info.sheets.get(CONNECTORS_SHEET)
    if not settings.connectors_sheet or sheet is None or sheet.missing(("name", "state")):
        return []
    what = "connector states"
    try:
        (snap,) = store.read([Read(CONNECTORS_SHEET, ("name", "state"))])
    except SheetqError as exc:
        return [problem(what, f"'{CONNECTORS_SHEET}' not read: {exc.message}")]
    known = [s.value for s in State]
    checks: list[Check] = []
    count = 0
    for row in snap.rows:
        name = row.text("name").strip()
        typed = row.text("state").strip()
        if not name and not typed:
            continue
        count += 1
        if typed.lower() not in known:
            where = f"'{CONNECTORS_SHEET}' row {row.number} ({name or 'no name'})"
            detail = f"{where}: state {typed!r} is not one sheetq knows ({', '.join(known)})"
            fix = "type `closed` (resume) or `paused` (pause until resumed) into the cell"
            checks.append(problem(what, detail, fix))
    if not checks:
        checks.append(fine(what, f"{count} connector row(s), every state one sheetq knows"))
    return checks


def check_write(store: Store, who: str, *, local: bool = False) -> Check:
    """A harmless write: the lease ``PROBE_RANGE`` taken and given back in one atomic
    change, the compare-and-set the run lease is built on (a named range on Google, a row
    of the workbook's lease table in one SQLite transaction when ``local``). ``who`` names
    the account."""
    from sheetq.sheet.google import AccessDenied

    what = "write access"
    try:
        store.apply(ChangeSet(lease=LeaseChange(PROBE_RANGE, None, None)))
    except AccessDenied:
        detail = "sheetq can read the spreadsheet but not write it: it is shared read-only"
        return problem(what, detail, f"share it as Editor (not Viewer or Commenter) with {who}")
    except LeaseConflict:
        if local:
            detail = (
                f"the workbook already holds a lease '{PROBE_RANGE}': another doctor is running"
            )
            return problem(what, detail, "run doctor again when it has finished")
        detail = f"a named range '{PROBE_RANGE}' already exists, so the probe could not run"
        return problem(what, detail, "delete it (Data → Named ranges), then run doctor again")
    except SheetqError as exc:
        return problem(what, f"the write probe failed: {exc.message}")
    if local:
        return fine(
            what, "a lease was taken and given back in one SQLite transaction (leases work)"
        )
    return fine(what, "a named range was added and removed in one atomic request (leases work)")


def check_lease(info: WorkbookInfo, settings: Settings) -> Check:
    """Who holds the queue's run lease right now (no request: read by ``open``)."""
    from datetime import UTC, datetime

    from sheetq.sheet.runner import lease_expiry, lease_name
    from sheetq.times import format_ts

    token = info.leases.get(lease_name(settings.queue_sheet))
    if token is None:
        return fine("run lease", "free: no run is processing this queue")
    expiry = lease_expiry(token)
    if expiry is not None and expiry > datetime.now(UTC):
        return fine("run lease", f"held by a running `process` until {format_ts(expiry)}")
    return fine("run lease", "left by a run that ended uncleanly; the next run replaces it")


def check_time_zone(info: WorkbookInfo) -> Check:
    """The spreadsheet's time zone is known here (typed times without offset are read in it)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    name = info.time_zone or "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        detail = f"time zone {name!r} is unknown on this computer: typed times are read as UTC"
        fix = "install tzdata (pip install tzdata) or pick a standard zone in File → Settings"
        return problem("time zone", detail, fix)
    return fine("time zone", f"{name}: times typed without an offset are read in it")


def _workbook_checks(
    store: Store, info: WorkbookInfo, settings: Settings, who: str, *, local: bool = False
) -> list[Check]:
    """Headers, write access, lease and time zone of an opened workbook (``local``: a
    SQLite workbook, not a Google spreadsheet)."""
    checks = check_headers(info, settings)
    checks += check_connector_states(store, info, settings)
    checks.append(check_write(store, who, local=local))
    checks.append(check_lease(info, settings))
    checks.append(check_time_zone(info))
    return checks


# --- local -------------------------------------------------------------------------------------


def check_local(settings: Settings) -> list[Check]:
    """The SQLite workbook: exists, is a sheetq workbook, writable, complete."""
    from sheetq.sheet.sqlite import SqliteStore

    raw = settings.spreadsheet[len(LOCAL_PREFIX) :].strip()
    path, what = Path(raw).expanduser(), "local workbook"
    if not raw:
        return [problem(what, "local: names no file", "give a path: local:sheetq.db")]
    refused = refusal(path)  # what `status` and `init` would say, read-only
    if refused is not None:
        return [problem(what, *refused)]
    checks = [fine(what, f"{path.resolve()} is a sheetq workbook")]
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        fix = "let this user write the file and its folder (SQLite adds -wal and -shm files)"
        return [*checks, problem("write access", f"cannot write {path} or its folder", fix)]
    try:
        store = SqliteStore(path)
    except SheetqError as exc:
        return [*checks, problem(what, exc.message)]
    try:
        return checks + _workbook_checks(store, store.open(), settings, "this user", local=True)
    except SheetqError as exc:
        return [*checks, problem(what, exc.message)]
    finally:
        store.close()


# --- Google ----------------------------------------------------------------------------------


def check_google(settings: Settings) -> list[Check]:
    """Credentials, reachability, headers, write access, lease and time zone of a spreadsheet."""
    from sheetq.sheet.google import AccessDenied, GoogleStore, SpreadsheetNotFound

    credentials, email = check_credentials(settings)
    if not credentials.ok:
        return [credentials]
    who = f"the service account {email}" if email else "the account sheetq uses"
    try:
        store = GoogleStore.from_settings(settings, extra_titles=(settings.log_archive_sheet,))
    except SheetqError as exc:
        return [credentials, problem("spreadsheet", exc.message)]
    try:
        info = store.open()
    except AccessDenied as exc:
        return [credentials, _denied(exc.status, who, email)]
    except SpreadsheetNotFound:
        detail = f"no spreadsheet with key {store.key!r} (404): the key is wrong"
        return [credentials, problem("spreadsheet", detail, FIX_KEY)]
    except Exception as exc:  # unreachable, refused credentials…: a line, not a crash
        text = exc.message if isinstance(exc, SheetqError) else f"{type(exc).__name__}: {exc}"
        fix = "check the network or proxy, SHEETQ_SHEETS_API_URL and the credentials"
        return [credentials, problem("spreadsheet", f"Google Sheets not reached: {text}", fix)]
    else:
        reachable = fine("spreadsheet", f"'{info.title}' is reachable ({info.url})")
        return [credentials, reachable, *_workbook_checks(store, info, settings, who)]
    finally:
        store.close()


def _denied(status: int, who: str, email: str) -> Check:
    if status == 401:
        fix = "create a new key for the service account; point GOOGLE_APPLICATION_CREDENTIALS at it"
        return problem("spreadsheet", "Google refused the credentials (401)", fix)
    detail = f"Google refused access (403): the spreadsheet is not shared with {who}"
    return problem("spreadsheet", detail, FIX_SHARE.format(who=email or "that e-mail"))


def check_credentials(settings: Settings) -> tuple[Check, str]:
    """The credentials line and the service account's e-mail (``""`` when unknown)."""
    from sheetq.sheet.google_auth import credentials_for

    path, email, what = settings.credentials, "", "credentials"
    if path:
        try:
            data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        except FileNotFoundError:
            return problem(what, f"{path}: no such file", FIX_KEY_FILE), ""
        except OSError as exc:
            fix = "let this user read the file (chmod 600, owned by this user)"
            return problem(what, f"{path}: cannot read ({exc.strerror})", fix), ""
        except ValueError:
            return problem(what, f"{path} is not a JSON key file", FIX_KEY_FILE), ""
        kind = data.get("type") if isinstance(data, dict) else None
        if kind != "service_account":
            found = f"a {kind!r} credentials file" if kind else "not a Google credentials file"
            return problem(what, f"{path} is {found}, not a service-account key", FIX_KEY_FILE), ""
        email = str(data.get("client_email", ""))
    try:
        credentials = credentials_for(settings)
    except ConfigError as exc:
        return problem(what, exc.message, FIX_KEY_FILE), email
    if credentials is None:
        detail = f"none: requests to the loopback endpoint {settings.sheets_api_url} go unsigned"
        return fine(what, detail), ""
    email = email or str(getattr(credentials, "service_account_email", "") or "")
    if path:
        return fine(what, f"service account {email} ({path})"), email
    return fine(what, f"Application Default Credentials {email}".strip()), email
