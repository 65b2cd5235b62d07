"""``exo ui``: the board in a browser, a thin front end over the registry (imported by that command only).

``auth`` (the one-time token, the session cookie, the Host, Origin and header-token checks),
``live`` (the doorbell's snapshots and the panes of open pages, pushed over Server-Sent Events),
``views`` (results made JSON, diffs highlighted by Pygments into (class, text) runs), ``app``
(the Starlette routes: every read and action is ``registry.invoke`` with the caller's role),
``server`` (uvicorn on 127.0.0.1, stopped within 2 s with streams open). The page itself is
``static/`` (no inline script, no CDN, no build step): agent text reaches the DOM only through
``textContent``.
"""
