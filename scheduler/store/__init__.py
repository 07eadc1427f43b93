"""The store room: gridshift's SQLite files under ``$GRIDSHIFT_HOME``.

``ledger`` (one row per run, the whole report as JSON) and ``batch_size_history`` (the trials of
``batch_size: auto`` jobs). Files are opened through :mod:`carbon.sqlite_file`.
"""
