"""Reading the text files a person writes (``sheetq.toml``, ``.env``): UTF-8, a BOM allowed.

One rule for both, so a file saved in another encoding gets the same one-line answer
wherever it is read: the file, the line and the byte that is not UTF-8 (exit code 2).
"""

from __future__ import annotations

from pathlib import Path

from sheetq.errors import ConfigError


def read_utf8(path: Path) -> str:
    """The text of ``path`` without a leading BOM.

    Raises ``ConfigError`` (exit 2) naming ``path`` when it cannot be read, or when it is
    not UTF-8: then with the line (1-based) and byte offset (0-based, from the start of
    the file) of the first byte that is not, and that byte's value.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (line {line}, byte {exc.start}: {data[exc.start]:#04x}); "
            "save it as UTF-8"
        ) from None
