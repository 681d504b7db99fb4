#!/usr/bin/env python3
"""Example sheetq command handler: push one lead to a CRM.

sheetq runs it with the task's payload JSON on stdin and these variables:
SHEETQ_TASK_ID, SHEETQ_TASK_TYPE, SHEETQ_IDEMPOTENCY_KEY, SHEETQ_ATTEMPT (1-based).

Answer by exit code (sysexits): 0 done — the last stdout line is stored as the result;
75 (EX_TEMPFAIL) try again later; 65 (EX_DATAERR) bad data, fail now; 77 (EX_NOPERM)
credentials refused, fail now and stop this type for the run. Or print, as the last
line, a JSON object such as {"status": "retry", "error": "busy", "retry_after": 120}.
"""

import json
import os
import sys
import urllib.error
import urllib.request

EX_DATAERR, EX_TEMPFAIL, EX_NOPERM = 65, 75, 77

lead = json.load(sys.stdin)
if not lead.get("phone"):
    print("lead has no phone number", file=sys.stderr)
    sys.exit(EX_DATAERR)

request = urllib.request.Request(
    os.environ.get("CRM_URL", "https://crm.example.com") + "/api/leads",
    data=json.dumps(lead).encode(),
    headers={
        "Content-Type": "application/json",
        "Authorization": "Bearer " + os.environ.get("CRM_TOKEN", ""),
        # The CRM drops a repeated request with the same key: safe to retry.
        "Idempotency-Key": os.environ["SHEETQ_IDEMPOTENCY_KEY"],
    },
)
try:
    with urllib.request.urlopen(request, timeout=20) as response:
        print(json.load(response)["id"])  # the result column gets the CRM id
except urllib.error.HTTPError as error:
    print(f"CRM answered {error.code}: {error.read()[:200]!r}", file=sys.stderr)
    if error.code in (401, 403):
        sys.exit(EX_NOPERM)
    if error.code in (408, 429) or error.code >= 500:
        print(json.dumps({"status": "retry", "error": f"CRM {error.code}",
                          "retry_after": int(error.headers.get("Retry-After") or 0) or None}))
        sys.exit(EX_TEMPFAIL)
    sys.exit(EX_DATAERR)
except (urllib.error.URLError, TimeoutError) as error:
    print(f"CRM unreachable: {error}", file=sys.stderr)
    sys.exit(EX_TEMPFAIL)
