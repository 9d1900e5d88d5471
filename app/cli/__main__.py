"""``python -m app.cli``: the ``troupe`` command."""

from app.cli import run

run()
