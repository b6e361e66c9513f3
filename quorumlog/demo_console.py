"""The demo's console: rich on a terminal, plain progress lines when there is none (`make run | tee`, CI)."""

from __future__ import annotations

import contextlib

from rich.console import Console

console = Console()


def working(message: str):
    """A spinner on a terminal; without one (where a spinner prints nothing) one line that says what the next
    minute is spent on."""
    if console.is_terminal:
        return console.status(message)
    console.print(f"… {message}", highlight=False)
    return contextlib.nullcontext()
