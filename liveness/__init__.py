"""Liveness of the background processes: worker and beat heartbeats, each periodic task's runs, the broker check,
and the one answer to "is the live data live?" that pages, /status.json and the metrics share."""
