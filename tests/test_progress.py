"""The CLI's progress bar (tools/progress.py) on a terminal console."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from tools.cli.progress import RunProgress


def test_the_bar_shows_cases_done_the_case_in_flight_and_lines_above() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=140, color_system=None)

    async def scenario(bar: RunProgress) -> list[str]:
        await bar.started("case-a")
        await bar.started("case-b")
        seen = [bar._flight()]
        await bar.finished(1, 2, "case-a", "[1/2] case-a: passed")
        seen.append(bar._flight())
        await bar.finished(2, 2, "case-b", "[2/2] case-b: crash")
        seen.append(bar._flight())
        return seen

    with RunProgress("run r", 2, enabled=True, console=console) as bar:
        seen = asyncio.run(scenario(bar))
    assert seen == ["running: case-a, case-b", "running: case-b", ""]
    text = buf.getvalue()
    assert "[1/2] case-a: passed" in text and "[2/2] case-b: crash" in text
    assert "2/2" in text and "run r" in text


def test_without_a_terminal_only_the_lines_print() -> None:
    buf = io.StringIO()
    lines = Console(file=buf, force_terminal=False, width=140)

    async def scenario(bar: RunProgress) -> None:
        await bar.started("case-a")
        await bar.finished(1, 1, "case-a", "[1/1] case-a: passed")

    with RunProgress("run r", 1, enabled=False, console=lines) as bar:
        asyncio.run(scenario(bar))
    assert buf.getvalue() == "[1/1] case-a: passed\n"
