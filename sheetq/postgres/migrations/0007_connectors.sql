-- connectors: shared rate windows, slots and breakers
-- docs/design.md §13: one row per (queue, connector), the state every worker and run on
-- any host shares. The claim (queries/run.sql `claim`) locks the rows of the connectors it
-- takes tokens or slots from, FOR UPDATE in name order, and reads their latest version:
-- the bucket and the slots live IN the row, so the lock is the whole serialisation.
--   next_at      the rate limit's next start (an evenly spaced token bucket: one start
--                per `per / calls` seconds)
--   slots        {task_id: lease end, epoch seconds}: a slot is held until its task settles
--                or its lease ends, whichever comes first (a crash never leaks it longer)
--   state        closed | open | half-open | paused; `until` ends an open breaker's
--                cooldown or a pause (NULL: until a person resumes it)
--   probe        the one task a half-open breaker lets through, until `probe_until`
--   failures     consecutive transient failures, across every worker
--   alert_owed   opened | escalated | closed: the alert still to send ('' none)
CREATE TABLE sheetq_connectors (
    queue text NOT NULL,
    name text NOT NULL,
    state text NOT NULL DEFAULT 'closed'
        CHECK (state IN ('closed', 'open', 'half-open', 'paused')),
    until timestamptz,
    reason text NOT NULL DEFAULT '',
    failures integer NOT NULL DEFAULT 0,
    probe text NOT NULL DEFAULT '',
    probe_until timestamptz,
    next_at timestamptz,
    slots jsonb NOT NULL DEFAULT '{}',
    opened_at timestamptz,
    last_error text NOT NULL DEFAULT '',
    alert_owed text NOT NULL DEFAULT '',
    escalated boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, name)
);

-- One finished or returned task's effect on its connector (sheetq.connectors.after, the
-- same rules): its slot freed; `ok` resets the streak and closes a half-open breaker whose
-- probe it was; `fail` counts (p_threshold in a row open it for p_cooldown seconds; a
-- failed probe re-opens it); `auth` opens it until a person resumes; `release` only gives
-- the slot and the probe's turn back. A paused connector stays paused. A transition writes
-- its QueueLog row (task_id empty, type = the connector) and owes its alert.
CREATE FUNCTION sheetq_connector_outcome(
    p_queue text, p_name text, p_task text, p_kind text, p_threshold integer,
    p_cooldown float8, p_error text, p_run text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c sheetq_connectors;
    at timestamptz := sheetq_now();
    probing boolean;
    event text := '';
    why text := '';
BEGIN
    INSERT INTO sheetq_connectors (queue, name) VALUES (p_queue, p_name)
        ON CONFLICT DO NOTHING;
    SELECT * INTO c FROM sheetq_connectors WHERE queue = p_queue AND name = p_name FOR UPDATE;
    c.slots := c.slots - p_task;
    probing := c.probe = p_task AND p_task <> '';
    IF probing THEN
        c.probe := '';
        c.probe_until := NULL;
    END IF;
    IF p_kind = 'ok' THEN
        IF probing AND c.state IN ('open', 'half-open') THEN
            c.state := 'closed'; c.until := NULL; c.reason := ''; c.opened_at := NULL;
            c.escalated := false;
            event := 'breaker_closed'; why := 'probe ' || p_task || ' succeeded: closed';
        END IF;
        c.failures := 0;
    ELSIF p_kind = 'fail' AND c.state = 'paused' THEN
        c.failures := c.failures + 1;
    ELSIF p_kind = 'auth' AND c.state <> 'paused'
          AND NOT (c.state = 'open' AND c.until IS NULL) THEN
        why := rtrim('credentials refused (auth), a person must resume it: ' || p_error, ': ');
        c.opened_at := CASE WHEN c.state = 'open' THEN c.opened_at ELSE at END;
        c.state := 'open'; c.until := NULL; c.reason := why;
        event := 'breaker_opened';
    ELSIF p_kind = 'fail' THEN
        c.failures := c.failures + 1;
        IF (probing AND c.state IN ('open', 'half-open'))
           OR (c.state = 'closed' AND c.failures >= p_threshold) THEN
            why := rtrim(CASE WHEN probing THEN 'probe ' || p_task || ' failed: '
                         ELSE c.failures || ' consecutive transient failures: ' END
                         || p_error, ': ');
            c.opened_at := CASE WHEN c.state = 'closed' THEN at ELSE c.opened_at END;
            c.state := 'open';
            c.until := at + make_interval(secs => p_cooldown);
            c.reason := why;
            event := 'breaker_opened';
        END IF;
    END IF;
    IF p_kind IN ('fail', 'auth') AND p_error <> '' THEN
        c.last_error := left(p_error, 500);
    END IF;
    IF event = 'breaker_opened' THEN
        c.alert_owed := 'opened';
    ELSIF event = 'breaker_closed' THEN
        c.alert_owed := 'closed';
    END IF;
    UPDATE sheetq_connectors SET state = c.state, until = c.until, reason = c.reason,
        failures = c.failures, probe = c.probe, probe_until = c.probe_until, slots = c.slots,
        opened_at = c.opened_at, last_error = c.last_error, alert_owed = c.alert_owed,
        escalated = c.escalated, updated_at = at
    WHERE queue = p_queue AND name = p_name;
    IF event <> '' THEN
        INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
                                run_id)
        VALUES (p_queue, at, '', p_name, event, c.state, 0, left(why, 1000), p_run);
    END IF;
END
$$;

-- The waiting work of given types, in claim order (docs/design.md §14): what a claim reads for a connector that
-- takes tokens or slots (run.sql `gated_due`), so that it seeks its own types' tasks
-- instead of walking past every other type's waiting tasks (docs/design.md §11 "Claims
-- cost the same however much waits").
CREATE INDEX sheetq_tasks_due_by_type ON sheetq_tasks
    (queue, type, priority DESC, (greatest(created_at, next_retry_at)), task_id)
    WHERE status IN ('pending', 'retry') AND NOT held;
