"""What the admin calls things reads as English (issue 32: "Deliverys", "Policy pushs")."""

from __future__ import annotations

import re

from django.contrib import admin

#: A plural the default rule (add "s") got wrong: "-ys" after a consonant, "-s" after s, sh, ch, x or z.
WRONG_PLURAL = re.compile(r"(?<![aeiou])ys$|(s|sh|ch|x|z)s$")


def test_every_admin_model_has_a_proper_plural():
    wrong = {
        m._meta.label: str(m._meta.verbose_name_plural)
        for m in admin.site._registry
        if WRONG_PLURAL.search(str(m._meta.verbose_name_plural))
    }
    assert wrong == {}
