"""A progress bar for long CLI work (rich, on stderr): cases done of total, the
cases in flight, and one line per finished case printed above the bar."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported when a bar is drawn
    from rich.progress import Progress, TaskID


class RunProgress:
    """Use as a context manager; ``started(case_id)`` and ``finished(done,
    total, case_id, line)`` are awaitable so they fit run_case_remote's
    callbacks.  Disabled (not a terminal, or --json), only the lines print."""

    def __init__(self, title: str, total: int | None, *, enabled: bool, console: Any, lines: Any = None):
        self.title, self.total, self.enabled = title, total, enabled
        self.console = console  # where the bar draws
        self.lines = lines or console  # where the lines go when there is no bar
        self.in_flight: list[str] = []
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[flight]}"),
                console=self.console,
            )
            bar.__enter__()
            self._bar, self._task = bar, bar.add_task(self.title, total=self.total, flight="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _flight(self) -> str:
        if not self.in_flight:
            return ""
        shown = ", ".join(self.in_flight[:3]) + (f" +{len(self.in_flight) - 3}" if len(self.in_flight) > 3 else "")
        return f"running: {shown}"

    def _update(self, **fields: Any) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, **fields)

    async def started(self, case_id: str) -> None:
        self.in_flight.append(case_id)
        self._update(flight=self._flight())

    async def finished(self, done: int, total: int | None, case_id: str, line: str | None = None) -> None:
        if case_id in self.in_flight:
            self.in_flight.remove(case_id)
        if self._bar is not None:
            if line:
                self._bar.console.print(line)
            self._update(completed=done, total=total, flight=self._flight())
        elif line:
            self.lines.print(line)

    async def note(self, line: str) -> None:
        """A line that is not a finished case (a job waiting in the queue, a slot started again)."""
        if self._bar is not None:
            self._bar.console.print(line)
        else:
            self.lines.print(line)

    def complete(self, done: int, total: int | None) -> None:
        """Nothing in flight any more; ``done`` of ``total``."""
        self.in_flight.clear()
        self._update(completed=done, total=total, flight="")
