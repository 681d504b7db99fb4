-- tasks, keys, log, archive, leases
CREATE TABLE sheetq_tasks (
    queue           text        NOT NULL,
    task_id         text        NOT NULL,
    created_at      timestamptz NOT NULL,
    type            text        NOT NULL,
    payload_json    text        NOT NULL,
    status          text        NOT NULL CHECK (status IN
                        ('pending', 'processing', 'retry', 'done', 'failed', 'skipped')),
    retry_count     integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    next_retry_at   timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    idempotency_key text        NOT NULL,
    updated_at      timestamptz NOT NULL,
    error_class     text        NOT NULL DEFAULT '',
    result          text        NOT NULL DEFAULT '',
    lease_owner     text        NOT NULL DEFAULT '',
    lease_until     timestamptz,
    payload_hash    text        NOT NULL,
    alerted_at      timestamptz,
    owner           text        NOT NULL DEFAULT ''
, PRIMARY KEY (queue, task_id));
-- claims: due waiting tasks, oldest first
CREATE INDEX sheetq_tasks_waiting ON sheetq_tasks (queue, created_at, task_id)
    WHERE status IN ('pending', 'retry');
-- recovery: leases that ran out
CREATE INDEX sheetq_tasks_leased ON sheetq_tasks (queue, lease_until)
    WHERE status = 'processing';
-- alerts owed
CREATE INDEX sheetq_tasks_owed ON sheetq_tasks (queue, updated_at)
    WHERE status = 'failed' AND alerted_at IS NULL;
CREATE INDEX sheetq_tasks_status ON sheetq_tasks (queue, status, updated_at);
CREATE INDEX sheetq_tasks_key ON sheetq_tasks (queue, idempotency_key);

CREATE TABLE sheetq_archive (
    queue           text        NOT NULL,
    task_id         text        NOT NULL,
    created_at      timestamptz NOT NULL,
    type            text        NOT NULL,
    payload_json    text        NOT NULL,
    status          text        NOT NULL CHECK (status IN
                        ('pending', 'processing', 'retry', 'done', 'failed', 'skipped')),
    retry_count     integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    next_retry_at   timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    idempotency_key text        NOT NULL,
    updated_at      timestamptz NOT NULL,
    error_class     text        NOT NULL DEFAULT '',
    result          text        NOT NULL DEFAULT '',
    lease_owner     text        NOT NULL DEFAULT '',
    lease_until     timestamptz,
    payload_hash    text        NOT NULL,
    alerted_at      timestamptz,
    owner           text        NOT NULL DEFAULT ''
,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, task_id));
CREATE INDEX sheetq_archive_key ON sheetq_archive (queue, idempotency_key);

-- docs/design.md §4/§11: one task per key over live and archived tasks, whatever races.
CREATE TABLE sheetq_keys (
    queue           text NOT NULL,
    idempotency_key text NOT NULL,
    task_id         text NOT NULL,
    payload_hash    text NOT NULL,
    PRIMARY KEY (queue, idempotency_key)
);

CREATE TABLE sheetq_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text        NOT NULL,
    ts          timestamptz NOT NULL,
    task_id     text        NOT NULL,
    type        text        NOT NULL,
    event       text        NOT NULL,
    status      text        NOT NULL,
    retry_count integer     NOT NULL DEFAULT 0,
    message     text        NOT NULL DEFAULT '',
    run_id      text        NOT NULL DEFAULT '',
    duration_ms integer
);
CREATE INDEX sheetq_log_task ON sheetq_log (queue, task_id, id);
CREATE INDEX sheetq_log_ts ON sheetq_log (queue, ts);

CREATE TABLE sheetq_log_archive (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text        NOT NULL,
    ts          timestamptz NOT NULL,
    task_id     text        NOT NULL,
    type        text        NOT NULL,
    event       text        NOT NULL,
    status      text        NOT NULL,
    retry_count integer     NOT NULL DEFAULT 0,
    message     text        NOT NULL DEFAULT '',
    run_id      text        NOT NULL DEFAULT '',
    duration_ms integer
);
CREATE INDEX sheetq_log_archive_task ON sheetq_log_archive (queue, task_id, id);

-- named compare-and-set leases (one alert digest at a time per queue)
CREATE TABLE sheetq_leases (
    queue text NOT NULL,
    name  text NOT NULL,
    token text NOT NULL,
    PRIMARY KEY (queue, name)
);

-- wake `sheetq worker` (LISTEN sheetq) when a task becomes claimable
CREATE FUNCTION sheetq_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sheetq', q.queue)
    FROM (SELECT DISTINCT queue FROM changed WHERE status IN ('pending', 'retry')) AS q;
    RETURN NULL;
END $$;
CREATE TRIGGER sheetq_tasks_inserted AFTER INSERT ON sheetq_tasks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sheetq_notify();
CREATE TRIGGER sheetq_tasks_updated AFTER UPDATE ON sheetq_tasks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sheetq_notify();
