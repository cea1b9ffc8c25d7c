"""Queue policy administration: validation, what-if replays, pushing policy to clusters, the admin dashboard."""
