"""Neutral kernel imported by every layer: domain errors, database helpers, Kubernetes quantities.

It imports no app of the project; kernel.quantity imports nothing but the standard library, so the pure
engine may use it too.
"""
