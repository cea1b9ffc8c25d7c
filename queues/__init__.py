"""Job scheduling: teams, cohorts, quotas, priorities, jobs, and the admission engine."""
