"""Audit trail of policy models with django-simple-history: who, when, and each field before and after."""

from __future__ import annotations

from simple_history.models import HistoricalRecords


class PolicyHistory(HistoricalRecords):
    """``HistoricalRecords`` that skips saves touching only bookkeeping fields (sync bookmarks, timestamps).

    Sync services write such fields every few seconds with ``save(update_fields=[...])``; recording those
    would bury the policy changes an admin is looking for.
    """

    def __init__(self, *args, bookkeeping: tuple[str, ...] = (), **kwargs) -> None:
        self.bookkeeping = frozenset(bookkeeping)
        kwargs.setdefault("excluded_fields", list(bookkeeping))
        super().__init__(*args, **kwargs)

    def post_save(self, instance, created, using=None, **kwargs):
        """Record the save unless it wrote bookkeeping fields only."""
        update_fields = kwargs.get("update_fields")
        if not created and update_fields and set(update_fields) <= self.bookkeeping:
            return
        super().post_save(instance, created, using=using, **kwargs)
