"""Device health and GPU repair: ingestion (DCGM, XID, node conditions), policy, state machine, tickets.

Layout: ``dcgm``/``events`` parse sources (no Django), ``catalog`` reads the XID catalogue, ``policy`` turns
samples into signal levels (no writes), ``state`` is the device state machine, ``services`` records observations
and moves devices, ``nodes`` reads what a Node says (conditions, health taints, the inventory's health writes)
into signals and transitions, ``tickets`` runs repair tickets and validation jobs, ``directives`` records the
node taints the kubernetes backend should apply, ``selectors`` reads for pages and the wait box, ``hooks`` is
what the simulated backend calls on each tick.
"""
