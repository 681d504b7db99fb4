"""Connecting to Google Sheets: the spreadsheet key, credentials, and the HTTP session.

Credentials: a service-account JSON key named by ``GOOGLE_APPLICATION_CREDENTIALS``,
else Application Default Credentials (google-auth). ``SHEETQ_SHEETS_API_URL`` points the
session at another endpoint with the same API (an emulator or a proxy); an ``http://``
loopback URL without credentials is used without authentication, like the
``*_EMULATOR_HOST`` variables of Google's own client libraries.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sheetq.errors import ConfigError

if TYPE_CHECKING:
    from sheetq.config import Settings

GOOGLE_API = "https://sheets.googleapis.com"
SCOPES = ["https://www.googleapis.com/auth/spreadsheets"]


def spreadsheet_key(target: str) -> str:
    """The key from a Google Sheets URL, or the key itself. Raises ``ConfigError`` (exit 2)
    for anything else, without echoing a database URL (it may carry a password)."""
    target = target.strip()
    if target.lower().startswith(("postgres://", "postgresql://")):  # never echoed: a password
        raise ConfigError(
            "SHEETQ_SPREADSHEET holds a PostgreSQL URL: set it as SHEETQ_DATABASE_URL "
            "(SHEETQ_SPREADSHEET names the spreadsheet, a Google URL or local:PATH)"
        )
    if "/" in target or target.startswith("http"):
        from gspread.utils import extract_id_from_url

        try:
            return str(extract_id_from_url(target))
        except Exception as exc:  # gspread raises NoValidUrlKeyFound
            raise ConfigError(
                f"SHEETQ_SPREADSHEET: cannot find a spreadsheet key in {target!r}; use the URL "
                "https://docs.google.com/spreadsheets/d/KEY/edit or the KEY itself"
            ) from exc
    if not target or any(c.isspace() for c in target):
        raise ConfigError(f"SHEETQ_SPREADSHEET: {target!r} is not a spreadsheet key")
    return target


def is_loopback_http(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def session_for(base_url: str, credentials: Any | None) -> Any:
    """A requests session for gspread that sends Google's URLs to ``base_url``."""
    import requests

    if credentials is None:
        parent: type = requests.Session
    else:
        from google.auth.transport.requests import AuthorizedSession

        parent = AuthorizedSession

    class RedirectingSession(parent):  # type: ignore[misc]  # base chosen at run time
        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if base_url != GOOGLE_API and url.startswith(GOOGLE_API):
                url = base_url + url[len(GOOGLE_API) :]
            return super().request(method, url, *args, **kwargs)

    session = RedirectingSession() if credentials is None else RedirectingSession(credentials)
    session.trust_env = not is_loopback_http(base_url)
    return session


def credentials_for(settings: Settings) -> Any | None:
    """Service-account JSON from GOOGLE_APPLICATION_CREDENTIALS, else Application Default
    Credentials; ``None`` for an ``http://`` loopback endpoint without credentials."""
    path = settings.credentials
    if not path and is_loopback_http(settings.sheets_api_url):
        return None
    try:
        if path:
            from google.oauth2.service_account import Credentials

            return Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                path, scopes=SCOPES
            )
        import google.auth

        creds, _project = google.auth.default(scopes=SCOPES)
        return creds
    except FileNotFoundError:
        raise ConfigError(f"GOOGLE_APPLICATION_CREDENTIALS: no such file {path!r}") from None
    except (ValueError, KeyError) as exc:
        raise ConfigError(
            f"GOOGLE_APPLICATION_CREDENTIALS: {path!r} is not a service-account JSON key ({exc})"
        ) from None
    except Exception as exc:  # google.auth.exceptions.DefaultCredentialsError
        raise ConfigError(
            "no Google credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service-account "
            f"JSON key file, or configure Application Default Credentials ({exc})"
        ) from None
