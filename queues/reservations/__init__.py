"""Reservations: a team books devices of one class for a time window, and gets them (docs/admin.md, "Reservations").

``rules`` (what refuses a request, what leaves it to an admin), ``services`` (request, approve, refuse, cancel, and
the windows' edges pushed to the clusters), ``holds`` (reservations as the engine's holds, and the queue configuration
they change), ``selectors`` (lists, the week calendar, use), ``whatif`` and ``previews`` (recent history replayed with
a request in place, before it is decided).
"""
