-- sheetq_enqueue: enqueue from SQL, inside the caller's transaction
-- docs/design.md §15 "In the application's own transaction": `sheetq.enqueue(conn, …)` (Python)
-- and `sheetq_enqueue(…)` (any language) write a task inside the caller's transaction, with
-- the rules of docs/design.md §4. The task, its key and its log row exist if and only if the
-- caller commits; the AFTER INSERT trigger's NOTIFY (migration 0001) wakes workers at the
-- commit. A key is claimed by inserting it into sheetq_keys: a second transaction enqueueing
-- the same key waits there for the first to commit or roll back, then sees its task (a
-- duplicate or a conflict) or takes the key; no queue-wide lock is held, so an open
-- application transaction holds back only enqueues of its own keys.

-- The canonical text of a payload (sheetq.idempotency.canonical_json): keys sorted by code
-- point, "," and ":" separators, non-ASCII unescaped, strings NFC-normalised, numbers as
-- Python writes them (an integer as is, a number with a fraction as the shortest float text:
-- 12.50 -> 12.5, 1e-07 -> 1e-07).
CREATE FUNCTION sheetq_number_text(n text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    f float8;
    m text[];
    sign text := '';
    digits text;
    point integer;  -- the decimal exponent of the first digit: value = d.ddd × 10^point
BEGIN
    IF n !~ '[.eE]' THEN
        RETURN CASE WHEN n = '-0' THEN '0' ELSE n END;
    END IF;
    f := n::float8;
    IF f = 0 THEN
        RETURN CASE WHEN n LIKE '-%' THEN '-0.0' ELSE '0.0' END;
    END IF;
    -- the shortest digits that read back as f (PostgreSQL 12+: extra_float_digits >= 1)
    m := regexp_match(f::text, '^(-?)(\d+)(?:\.(\d+))?(?:e([-+]\d+))?$');
    sign := m[1];
    digits := m[2] || coalesce(m[3], '');
    point := length(m[2]) - 1 + coalesce(m[4]::integer, 0);
    -- leading zeros (0.0001 -> digits 00001)
    WHILE left(digits, 1) = '0' AND length(digits) > 1 LOOP
        digits := substr(digits, 2);
        point := point - 1;
    END LOOP;
    digits := coalesce(nullif(rtrim(digits, '0'), ''), '0');
    IF point < -4 OR point >= 16 THEN  -- Python's repr: scientific outside [1e-4, 1e16)
        RETURN sign || left(digits, 1)
            || CASE WHEN length(digits) > 1 THEN '.' || substr(digits, 2) ELSE '' END
            || 'e' || CASE WHEN point < 0 THEN '-' ELSE '+' END
            || CASE WHEN abs(point) < 10 THEN '0' ELSE '' END || abs(point)::text;
    END IF;
    IF point < 0 THEN
        RETURN sign || '0.' || repeat('0', -point - 1) || digits;
    END IF;
    RETURN sign || rpad(left(digits, point + 1), point + 1, '0') || '.'
        || coalesce(nullif(substr(digits, point + 2), ''), '0');
END $$;

CREATE FUNCTION sheetq_canonical(v jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    out text;
BEGIN
    CASE jsonb_typeof(v)
    WHEN 'object' THEN
        SELECT '{' || coalesce(string_agg(
                   to_json(normalize(e.key, NFC))::text || ':' || sheetq_canonical(e.value),
                   ',' ORDER BY normalize(e.key, NFC) COLLATE "C"), '') || '}'
        INTO out FROM jsonb_each(v) AS e;
    WHEN 'array' THEN
        SELECT '[' || coalesce(string_agg(sheetq_canonical(e.value), ',' ORDER BY e.n), '')
               || ']'
        INTO out FROM jsonb_array_elements(v) WITH ORDINALITY AS e(value, n);
    WHEN 'string' THEN
        out := to_json(normalize(v #>> '{}', NFC))::text;
    WHEN 'number' THEN
        out := sheetq_number_text(v::text);
    ELSE
        out := v::text;  -- true, false, null
    END CASE;
    RETURN out;
END $$;

-- One payload value as key text (sheetq.idempotency._key_value): NULL when absent (null, "");
-- a string trimmed and NFC-normalised, a number in its JSON form, true/false, an object or
-- array as its canonical text.
CREATE FUNCTION sheetq_key_value(v jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(v)
        WHEN 'null' THEN NULL
        WHEN 'string' THEN nullif(normalize(
            regexp_replace(v #>> '{}', '^[[:space:]]+|[[:space:]]+$', '', 'g'), NFC), '')
        WHEN 'number' THEN sheetq_number_text(v::text)
        WHEN 'boolean' THEN v::text
        ELSE sheetq_canonical(v)
    END
$$;

-- f=v[:f=v…] from (field, value) pairs, each value with %, : and = percent-encoded; NULL when
-- it breaks --key's limits (over 200 characters, a control character): the hash rule applies.
CREATE FUNCTION sheetq_key_parts(fields text[], vals text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN length(k) > 200 OR k ~ '[\x01-\x1f\x7f-\x9f]' THEN NULL ELSE k END
    FROM (SELECT string_agg(f || '=' || replace(replace(replace(v, '%', '%25'), ':', '%3A'),
                                                '=', '%3D'), ':' ORDER BY n) AS k
          FROM unnest(fields, vals) WITH ORDINALITY AS p(f, v, n)) AS joined
$$;

-- The idempotency key of docs/design.md §4, first rule that applies: 1. `key` → TYPE:key
-- (trimmed, NFC, one line, 1..200 characters; else SQLSTATE 22023); 2. `key_fields` (dotted
-- paths through objects, all present) → TYPE:f=v[:…]; 3. lead_id, order_id, event_id at the
-- top level → TYPE:lead_id=…; 4. TYPE:<payload_hash>.
CREATE FUNCTION sheetq_derive_key(type text, payload jsonb, key text, key_fields text[],
                                  payload_hash text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    cleaned text;
    f text;
    part text;
    node jsonb;
    fs text[] := '{}';
    vs text[] := '{}';
    val text;
    derived text;
BEGIN
    IF key IS NOT NULL THEN
        cleaned := normalize(regexp_replace(key, '^[[:space:]]+|[[:space:]]+$', '', 'g'), NFC);
        IF cleaned = '' THEN
            RAISE EXCEPTION 'sheetq_enqueue: key: empty after trimming spaces'
                USING ERRCODE = '22023';
        END IF;
        IF cleaned ~ '[\x01-\x1f\x7f-\x9f]' THEN
            RAISE EXCEPTION 'sheetq_enqueue: key: contains a control character; keys are one line'
                USING ERRCODE = '22023';
        END IF;
        IF length(cleaned) > 200 THEN
            RAISE EXCEPTION 'sheetq_enqueue: key: % characters; at most 200 allowed',
                length(cleaned) USING ERRCODE = '22023';
        END IF;
        RETURN type || ':' || cleaned;
    END IF;
    IF coalesce(cardinality(key_fields), 0) > 0 THEN
        FOREACH f IN ARRAY key_fields LOOP
            node := payload;
            FOREACH part IN ARRAY string_to_array(f, '.') LOOP
                IF node IS NULL OR jsonb_typeof(node) <> 'object' THEN
                    node := NULL;
                    EXIT;
                END IF;
                node := node -> part;
            END LOOP;
            val := sheetq_key_value(node);
            IF val IS NULL THEN
                fs := NULL;
                EXIT;
            END IF;
            fs := fs || f;
            vs := vs || val;
        END LOOP;
        IF fs IS NOT NULL THEN
            derived := sheetq_key_parts(fs, vs);
            RETURN type || ':' || coalesce(derived, payload_hash);
        END IF;
    END IF;
    fs := '{}';
    vs := '{}';
    FOREACH f IN ARRAY ARRAY['lead_id', 'order_id', 'event_id'] LOOP
        val := sheetq_key_value(payload -> f);
        IF val IS NOT NULL THEN
            fs := fs || f;
            vs := vs || val;
        END IF;
    END LOOP;
    IF cardinality(fs) > 0 THEN
        derived := sheetq_key_parts(fs, vs);
    END IF;
    RETURN type || ':' || coalesce(derived, payload_hash);
END $$;

-- A ULID (sheetq.model.new_ulid): 48 bits of milliseconds, 80 random bits, Crockford base32.
CREATE FUNCTION sheetq_ulid() RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    bits bit(130) := B'00'
        || (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)::bit(48)
        || ('x' || substr(md5(gen_random_uuid()::text), 1, 20))::bit(80);
    alphabet text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    out text := '';
BEGIN
    FOR i IN 0..25 LOOP
        out := out || substr(alphabet, substring(bits FROM i * 5 + 1 FOR 5)::integer + 1, 1);
    END LOOP;
    RETURN out;
END $$;

-- The write, for a payload already canonical and keyed (`sheetq.enqueue(conn, …)` computes
-- those in Python; sheetq_enqueue below in SQL): claim the key, then insert the task and its
-- `enqueued` log row; or, the key being held, log `duplicate` (same payload hash) or
-- `conflict` and return the holder. Stamped at the second of p_at (a pretended time,
-- SHEETQ_NOW) or of the statement (plus the test clock's `sheetq.offset`, as sheetq_now()).
-- p_priority, p_group, p_group_blocks: docs/design.md §14 (a grouped task starts held).
-- Returns (outcome, task_id, status, holder's hash).
CREATE FUNCTION sheetq_enqueue_keyed(
    p_queue text, p_type text, p_payload text, p_hash text, p_key text,
    p_not_before timestamptz, p_owner text, p_task_id text, p_run_id text, p_at timestamptz,
    p_priority integer, p_group text, p_group_blocks boolean
) RETURNS TABLE (outcome text, task_id text, status text, holder_hash text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    moment timestamptz := date_trunc('second', coalesce(p_at, statement_timestamp()
        + coalesce(nullif(current_setting('sheetq.offset', true), ''), '0')::interval));
    held record;
    message text;
BEGIN
    INSERT INTO sheetq_keys AS k (queue, idempotency_key, task_id, payload_hash)
    VALUES (p_queue, p_key, p_task_id, p_hash)
    ON CONFLICT (queue, idempotency_key) DO NOTHING;
    IF FOUND THEN
        -- a grouped task starts held: the groups trigger (migration 6) frees its group's head
        INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json, status,
            retry_count, next_retry_at, idempotency_key, updated_at, payload_hash, owner,
            priority, "group", group_blocks, held)
        VALUES (p_queue, p_task_id, moment, p_type, p_payload, 'pending', 0, p_not_before,
            p_key, moment, p_hash, coalesce(p_owner, ''), coalesce(p_priority, 0),
            coalesce(p_group, ''), coalesce(p_group_blocks, false) AND coalesce(p_group, '') <> '',
            coalesce(p_group, '') <> '');
        message := CASE WHEN p_not_before IS NULL THEN '' ELSE
            'delayed until ' || to_char(p_not_before AT TIME ZONE 'UTC',
                                        'YYYY-MM-DD"T"HH24:MI:SS"Z"') END;
        INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,
            run_id)
        VALUES (p_queue, moment, p_task_id, p_type, 'enqueued', 'pending', 0, message,
            p_run_id);
        RETURN QUERY SELECT 'enqueued'::text, p_task_id, 'pending'::text, p_hash;
        RETURN;
    END IF;
    SELECT k.task_id AS id, k.payload_hash AS hash,
           coalesce(t.status, a.status, 'pending') AS status,
           (t.task_id IS NULL AND a.task_id IS NOT NULL) AS archived
    INTO held
    FROM sheetq_keys AS k
    LEFT JOIN sheetq_tasks AS t ON t.queue = k.queue AND t.task_id = k.task_id
    LEFT JOIN sheetq_archive AS a ON a.queue = k.queue AND a.task_id = k.task_id
    WHERE k.queue = p_queue AND k.idempotency_key = p_key;
    IF held.hash = p_hash THEN
        message := 'same key and payload enqueued again'
            || CASE WHEN held.archived THEN ' (archived)' ELSE '' END || '; nothing added';
    ELSE
        message := left(format('same key %L, different payload', p_key)
            || CASE WHEN held.archived THEN ' (archived)' ELSE '' END
            || ': ' || left(p_hash, 19) || '… vs ' || left(held.hash, 19) || '…; nothing added',
            500);
    END IF;
    INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message, run_id)
    VALUES (p_queue, moment, held.id, p_type,
            CASE WHEN held.hash = p_hash THEN 'duplicate' ELSE 'conflict' END, held.status, 0,
            message, p_run_id);
    RETURN QUERY SELECT CASE WHEN held.hash = p_hash THEN 'duplicate' ELSE 'conflict' END,
        held.id::text, held.status::text, held.hash::text;
END $$;

-- For any language: enqueue a task into `queue` inside the caller's transaction, with the
-- rules of docs/design.md §4 (`key_fields`: the type's, as sheetq.toml gives them; `owner`:
-- the type's owner; `priority`, `task_group`, `group_blocks`: docs/design.md §14, the
-- task's priority, its group and the type's group_blocks_on_failure). Returns one row
-- (outcome 'enqueued' or 'duplicate', task_id, idempotency_key, status). Errors: SQLSTATE
-- SQ409 for a conflict (the key is held by a task with another payload; DETAIL names it; the
-- transaction is then aborted unless the caller catches it, e.g. in a savepoint, so no
-- `conflict` log row stays); 22023 for bad input (a type sheetq refuses, a payload that is
-- not an object or over 50,000 characters, a bad key, priority or group).
CREATE FUNCTION sheetq_enqueue(
    queue text, type text, payload jsonb, key text DEFAULT NULL,
    not_before timestamptz DEFAULT NULL, key_fields text[] DEFAULT NULL, owner text DEFAULT '',
    priority integer DEFAULT 0, task_group text DEFAULT '', group_blocks boolean DEFAULT false
) RETURNS TABLE (outcome text, task_id text, idempotency_key text, status text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    canonical text;
    hash text;
    k text;
    g text := normalize(regexp_replace(coalesce(task_group, ''),
                                       '^[[:space:]]+|[[:space:]]+$', '', 'g'), NFC);
    done record;
BEGIN
    IF type IS NULL OR type !~ '^[A-Za-z0-9][A-Za-z0-9_./-]{0,99}$' THEN
        RAISE EXCEPTION 'sheetq_enqueue: type %: use a letter or digit, then letters, digits '
            'and _ . / - (at most 100 characters)', coalesce(quote_literal(type), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' THEN
        RAISE EXCEPTION 'sheetq_enqueue: queue: required (the Queue worksheet''s title, '
            'default ''Queue'')' USING ERRCODE = '22023';
    END IF;
    IF payload IS NULL OR jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION 'sheetq_enqueue: payload: expected a JSON object, got %',
            coalesce(jsonb_typeof(payload), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -1000000000 AND 1000000000 THEN
        RAISE EXCEPTION 'sheetq_enqueue: priority: expected an integer from -1,000,000,000 '
            'to 1,000,000,000' USING ERRCODE = '22023';
    END IF;
    IF length(g) > 200 OR g ~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]' THEN
        RAISE EXCEPTION 'sheetq_enqueue: task_group: at most 200 characters on one line'
            USING ERRCODE = '22023';
    END IF;
    canonical := sheetq_canonical(payload);
    -- a spreadsheet cell's limit, in UTF-16 code units (sheetq.idempotency.cell_length)
    IF length(canonical) + length(regexp_replace(canonical, '[^\U00010000-\U0010FFFF]', '', 'g'))
            > 50000 THEN
        RAISE EXCEPTION 'sheetq_enqueue: payload: over 50,000 characters as compact JSON; '
            'store large data elsewhere and enqueue a reference to it' USING ERRCODE = '22023';
    END IF;
    hash := 'sha256:' || encode(sha256(convert_to(canonical, 'UTF8')), 'hex');
    k := sheetq_derive_key(type, payload, key, key_fields, hash);
    SELECT * INTO done FROM sheetq_enqueue_keyed(queue, type, canonical, hash, k, not_before,
        owner, 't_' || sheetq_ulid(), 'enqueue_' || sheetq_ulid(), NULL, priority, g,
        group_blocks);
    IF done.outcome = 'conflict' THEN
        RAISE EXCEPTION 'sheetq_enqueue: conflict: key % already belongs to task % with a '
            'different payload; nothing added', quote_literal(k), done.task_id
            USING ERRCODE = 'SQ409', DETAIL = done.task_id,
                  HINT = 'use another key if this is a new operation';
    END IF;
    RETURN QUERY SELECT done.outcome, done.task_id, k, done.status;
END $$;
