"""The team broker: one exo process per repository and host that serves every agent on its own socket.

A front end like ``exo mcp`` (docs/architecture.md "The broker"): it owns no logic an operation
could hold. It decides who is calling from the socket a connection came through (``guard``),
builds that agent's ``Env`` and calls ``registry.invoke`` (``calls``), or serves the agent's MCP
session (``mcp_server.serve_socket``). ``serve`` is the process: its sockets, its threads, the
reaper and its exit once the last agent is gone.
"""
