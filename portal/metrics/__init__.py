"""The portal's Prometheus metrics: a collector that reads the current state from the database at each scrape."""
