"""axe-core in a Playwright page: the serious and critical violations of the page as it is now.

axe-core is vendored under ``tests/fixtures/axe/`` (see its SOURCE.md): it is evaluated in the page through the
browser's DevTools protocol, so the portal's Content-Security-Policy (scripts from 'self' only) stays on and no
page ever loads it from anywhere.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from playwright.sync_api import Page

AXE = Path(__file__).resolve().parent / "fixtures" / "axe" / "axe.min.js"
#: What fails a page: axe-core's two highest impacts.
IMPACTS = ("serious", "critical")

_RUN = """async (impacts) => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.filter(v => impacts.includes(v.impact)).map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " :: " + n.failureSummary.split("\\n").slice(0, 2).join(" ")),
    count: v.nodes.length,
  }));
}"""


@cache
def axe_source() -> str:
    """The vendored axe-core script."""
    return AXE.read_text()


def axe_violations(page: Page) -> list[dict]:
    """The page's serious and critical violations: rule id, impact, what it asks, how many nodes, five of them."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(axe_source())
    return page.evaluate(_RUN, list(IMPACTS))


def violations_text(found: dict[str, list[dict]]) -> str:
    """A readable report of violations per page, for an assertion message."""
    lines = []
    for where, violations in found.items():
        for v in violations:
            lines.append(f"{where}: {v['id']} ({v['impact']}, {v['count']} node(s)): {v['help']}")
            lines.extend(f"    {n}" for n in v["nodes"])
    return "\n".join(lines)
