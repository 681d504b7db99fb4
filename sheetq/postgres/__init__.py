"""The PostgreSQL backend (docs/design.md §11): the queue in tables, claimed with
``FOR UPDATE SKIP LOCKED``, every change committed with its log row.

* ``connection`` — connecting with psycopg 3, errors that never print the password;
* ``schema`` — the tables, created and upgraded by numbered migrations (``sheetq init``);
* ``codec`` — database values ↔ the §2 cell texts the shared queue policy reads and writes;
* ``queries`` — every statement by name, from ``queries/*.sql``;
* ``run`` — the run path of ``process`` and ``worker``: one claim statement, one settle
  statement (each outcome fenced by its lease), recovery and ``max_age`` for the types a
  run is configured for, every time the server's (``runner``: ``process``; ``worker``:
  ``sheetq worker``; ``slots``: the worker's handler threads, where a Python handler runs
  on the slot's own thread and one past its timeout is left behind and replaced);
* ``session`` — the connection of the commands that manage and read a queue (one
  transaction at a time, the server's clock unless ``SHEETQ_NOW`` pretends);
* ``manage`` — ``requeue``, ``skip``, ``archive`` as one set-based statement each;
* ``alerts`` — the alert digest: a committed claim, the send outside any transaction, the
  mark in a new one;
* ``presence`` — each worker's and run's advisory lock, so a gone one is named;
* ``reports`` — ``status``, ``list``, ``show``, ``stats`` in SQL;
* ``mirror`` — the spreadsheet mirror's reads and writes (its state, the window as cell
  texts, the managers' requeues and owners with their log rows).

Nothing outside this package imports psycopg.
"""
