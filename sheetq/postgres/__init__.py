"""The PostgreSQL backend (docs/design.md §11): the queue in tables, claimed with
``FOR UPDATE SKIP LOCKED``, every change committed with its log row.

* ``connection`` — connecting with psycopg 3, errors that never print the password;
* ``schema`` — the tables, created and upgraded by numbered migrations (``sheetq init``);
* ``codec`` — database values ↔ the §2 cell texts the shared queue policy reads and writes;
* ``store`` — ``PgStore``: the worksheet-shaped ``Store`` port over the tables, one
  transaction per change set, so every command's pure planning runs unchanged.

Nothing outside this package imports psycopg.
"""
