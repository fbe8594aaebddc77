"""Regenerate the SVG screenshots of docs/tui.md from a real DB.

    python -m magneton.tui.shots --db DIR a b --out docs/img [--size 100x30] [--no-rerun]

Drives `MagnetonApp` headless with Textual's Pilot through the same keys a user presses
(the findings of A vs B, the first finding's three tabs, export, the energy view, the
Cypher console, help, the runs) and saves each screen with `App.save_screenshot`. Keeping this a script rather than
hand-made images means the pictures in the docs always show what the current code draws.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from textual.widgets import DataTable, Input

from .app import MagnetonApp
from .data import Store
from .screens import EnergyScreen, FindingScreen, FindingsScreen, QueryScreen

SHOT_QUERY = (
    "MATCH (o:Operator) WHERE o.module CONTAINS 'mlp.act' "
    "RETURN o.run, o.name, count(*) AS n, sum(o.energy_j) AS j ORDER BY j DESC"
)


async def _wait(pilot, cond, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"shots: timed out waiting for {what}")
        await pilot.pause(0.1)


async def _shoot(app: MagnetonApp, out: Path, size: tuple[int, int]) -> list[Path]:
    saved: list[Path] = []

    def snap(name: str) -> None:
        saved.append(Path(app.save_screenshot(f"tui-{name}.svg", str(out))))

    async with app.run_test(size=size) as pilot:
        await _wait(pilot, lambda: isinstance(app.screen, FindingsScreen), 10, "findings")
        findings = app.screen
        assert isinstance(findings, FindingsScreen)
        await _wait(pilot, lambda: findings.result is not None, 600, "the diff")
        await pilot.pause(0.5)
        snap("findings-diagnosing")
        await _wait(pilot, lambda: not findings.diagnosing, 900, "the diagnosis")
        await pilot.pause(0.5)
        snap("findings")
        # open the largest finding that has a patch (the one the docs walk through)
        result = findings.result
        assert result is not None
        with_patch = [i for i, f in enumerate(result.findings) if f.fix is not None and f.fix.patch]
        for _ in range(with_patch[0] if with_patch else 0):
            await pilot.press("down")
        await pilot.press("enter")
        detail = app.screen
        assert isinstance(detail, FindingScreen)
        await _wait(pilot, lambda: detail.prof["a"] is not None, 60, "profiles")
        await pilot.pause(0.5)
        snap("finding-regions")
        await pilot.press("2")
        await pilot.pause(0.3)
        snap("finding-callpaths")
        await pilot.press("3")
        await pilot.pause(0.3)
        snap("finding-rootcause")
        await pilot.press("end")
        await pilot.pause(0.3)
        snap("finding-fix")
        await pilot.press("x")
        await pilot.pause(0.3)
        snap("export")
        await pilot.press("escape", "escape", "v")
        await _wait(pilot, lambda: isinstance(app.screen, EnergyScreen), 10, "energy view")
        energy = app.screen
        await _wait(
            pilot, lambda: energy.query_one("#op-table", DataTable).row_count > 0, 60, "op table"
        )
        snap("energy-ops")
        await pilot.press("t")
        await pilot.pause(0.3)
        snap("energy-tree")
        await pilot.press("escape", "c")
        assert isinstance(app.screen, QueryScreen)
        app.screen.query_one("#cypher", Input).value = SHOT_QUERY
        await pilot.press("enter")
        await _wait(
            pilot,
            lambda: app.screen.query_one("#query-result", DataTable).row_count > 0,
            60,
            "rows",
        )
        snap("cypher")
        await pilot.press("escape", "question_mark")
        await pilot.pause(0.3)
        snap("help")
        await pilot.press("escape", "escape")  # help, findings → the runs screen
        await pilot.pause(0.3)
        snap("runs")
    return saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m magneton.tui.shots", description=__doc__)
    p.add_argument("--db", required=True)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--out", default="docs/img")
    p.add_argument("--size", default="100x30", help="terminal size COLSxROWS")
    p.add_argument("--no-rerun", action="store_true")
    args = p.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = Store(args.db)
    app = MagnetonApp(store, store.check(), args.a, args.b, rerun=not args.no_rerun)
    for path in asyncio.run(_shoot(app, out, (cols, rows))):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
