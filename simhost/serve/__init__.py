"""``simhost serve``: approvals from a browser or a remote terminal (in progress:
the wire between the server and its views is defined in :mod:`.protocol`)."""
