"""Wait attribution: where the waiting went — GPU-hours of waiting per team, class, week and cause, rolled up
incrementally from the jobs' wait-reason history (docs/waiting.md)."""
