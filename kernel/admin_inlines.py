"""Inline formsets whose every input has an accessible name (the admin's tabular inlines label columns only).

Django's tabular inline writes each field's label once, in the table's header, so a screen reader (and axe-core's
``label`` / ``select-name`` rules) finds the inputs of every row unnamed. ``LabelledInlineFormSet`` gives each
input of each row an ``aria-label`` such as "Nominal (line 2)", the delete box included.
"""

from __future__ import annotations

from django.forms.models import BaseInlineFormSet


class LabelledInlineFormSet(BaseInlineFormSet):
    """An inline formset whose inputs are named by their column and row ("Nominal (line 2)", "… (new line)")."""

    def add_fields(self, form, index) -> None:
        """Add the formset's own fields (delete, order), then name every visible input of the row."""
        super().add_fields(form, index)
        row = f"line {index + 1}" if index is not None else "new line"
        for field in form.fields.values():
            if field.widget.is_hidden:
                continue
            name = f"{field.label or ''} ({row})".strip()
            # The admin wraps a foreign key's select (add / change links beside it): name the select inside.
            # New dicts, not updates: a row's widgets may still share their attrs with the other rows'.
            for widget in (field.widget, getattr(field.widget, "widget", None)):
                if widget is not None:
                    widget.attrs = {**widget.attrs, "aria-label": name}
