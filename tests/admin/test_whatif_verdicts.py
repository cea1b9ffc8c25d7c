"""What-if colours follow what is good for the team's users: a utilisation that rises because quota was cut is
not an improvement (``utilisation_verdict``), and the table cell says why."""

from __future__ import annotations

from queues.policy.whatif import TeamOutcome, utilisation_verdict
from queues.templatetags.policy_tags import whatif_cell, whatif_utilisation_cell


def outcome(used: float, nominal: float) -> TeamOutcome:
    return TeamOutcome("vision", "Vision", 4, 4, 0, 60.0, 120.0, used, nominal, 0.0, 0)


def test_a_quota_cut_that_only_raises_the_ratio_is_neither_better_nor_worse():
    before, after = outcome(used=96.0, nominal=192.0), outcome(used=96.0, nominal=96.0)
    assert after.utilisation > before.utilisation
    assert utilisation_verdict(before, after) == ""


def test_a_quota_cut_that_costs_the_team_work_is_worse_though_the_ratio_rises():
    before, after = outcome(used=96.0, nominal=192.0), outcome(used=80.0, nominal=96.0)
    assert after.utilisation > before.utilisation
    assert utilisation_verdict(before, after) == "worse"


def test_with_the_same_quota_the_verdict_is_the_ratios_direction():
    assert utilisation_verdict(outcome(50.0, 100.0), outcome(70.0, 100.0)) == "better"
    assert utilisation_verdict(outcome(70.0, 100.0), outcome(50.0, 100.0)) == "worse"
    assert utilisation_verdict(outcome(50.0, 100.0), outcome(50.01, 100.0)) == ""


def test_more_quota_and_more_work_done_is_better_though_the_ratio_falls():
    before, after = outcome(used=90.0, nominal=100.0), outcome(used=120.0, nominal=200.0)
    assert after.utilisation < before.utilisation
    assert utilisation_verdict(before, after) == "better"


def test_a_team_on_one_side_only_has_no_verdict():
    assert utilisation_verdict(None, outcome(1.0, 2.0)) == ""
    assert utilisation_verdict(outcome(1.0, 0.0), outcome(1.0, 2.0)) == ""


def test_the_utilisation_cell_is_not_green_after_a_quota_cut():
    html = whatif_utilisation_cell(outcome(96.0, 192.0), outcome(96.0, 96.0))
    assert html.startswith("50% → <span")
    assert 'class="whatif-neutral"' in html
    assert 'data-verdict="neutral"' in html
    assert "Quota cut (nominal GPU-h 192 → 96); coloured by GPU-hours used 96.0 → 96.0" in html
    assert ">100%</span>" in html
    worse = whatif_utilisation_cell(outcome(96.0, 192.0), outcome(80.0, 96.0))
    assert 'class="whatif-worse"' in worse
    assert whatif_utilisation_cell(outcome(50.0, 100.0), outcome(50.0, 100.0)) == "50%"
    assert (
        whatif_utilisation_cell("", outcome(50.0, 100.0))
        == '– → <span class="whatif-neutral" title="" data-verdict="neutral">50%</span>'
    )


def test_waits_stay_better_when_lower():
    assert 'class="whatif-better"' in whatif_cell(3600.0, 60.0, "duration", True)
    assert 'class="whatif-worse"' in whatif_cell(60.0, 3600.0, "duration", True)
