"""``sheetq serve``: the HTTP ingress for webhooks and forms (docs/design.md §15).

``config`` reads ``[ingress]`` (routes, signatures, secrets), ``signatures`` checks a
request's signature over its raw body, ``committer`` writes the tasks of concurrent requests
together (one check and one write per batch), ``app`` is the ASGI application (Starlette)
and ``server`` runs it under uvicorn. Only ``sheetq serve`` imports this package: no other
command pays for the web stack.
"""
