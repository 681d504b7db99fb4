"""``python -m sheetq`` — the same as the ``sheetq`` command."""

from sheetq.cli.app import main

main()
