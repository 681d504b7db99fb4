-- connector alerts once per outage
-- docs/design.md §13: one message when a connector opens, one after escalate_after, one
-- when it closes. A failed half-open probe re-opens the breaker (and logs
-- breaker_opened) but owes no second "opened" message for the same outage; a connector
-- that closes before its opening was told owes nothing. As the sheet's
-- sheetq.connectors.owed decides. Otherwise sheetq_connector_outcome is that of 0007.
CREATE OR REPLACE FUNCTION sheetq_connector_outcome(
    p_queue text, p_name text, p_task text, p_kind text, p_threshold integer,
    p_cooldown float8, p_error text, p_run text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c sheetq_connectors;
    at timestamptz := sheetq_now();
    probing boolean;
    event text := '';
    why text := '';
    was text;
BEGIN
    INSERT INTO sheetq_connectors (queue, name) VALUES (p_queue, p_name)
        ON CONFLICT DO NOTHING;
    SELECT * INTO c FROM sheetq_connectors WHERE queue = p_queue AND name = p_name FOR UPDATE;
    was := c.state;
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
    IF event = 'breaker_opened' AND was = 'closed' THEN
        c.alert_owed := 'opened';  -- a new outage; a failed probe goes on with the same one
    ELSIF event = 'breaker_closed' THEN
        -- an opening never told ends untold; one that was told is followed by "closed"
        c.alert_owed := CASE WHEN c.alert_owed = 'opened' THEN '' ELSE 'closed' END;
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
