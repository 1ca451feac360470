"""The launcher: the ``khuluma`` CLI, the Serve application builder and the start-up checks.

It sits on top of every layer; nothing in ``serve_app``, ``deployments``, ``engines``, ``cluster``,
``persistence`` or ``contracts`` imports it (import-linter's ``launcher-on-top``)."""
