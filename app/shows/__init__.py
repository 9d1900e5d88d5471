"""Show files: the built-in demo show and reading a show file from disk."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from events.show import Show, ShowError, show_from_toml


def load_show(path: Path | None = None) -> Show:
    """Read a show TOML file; without a path, the built-in demo show."""
    try:
        if path is None:
            text = resources.files(__package__).joinpath("demo.toml").read_text("utf-8")
        else:
            text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise ShowError(f"cannot read show file: {exc.strerror}: {path}") from None
    return show_from_toml(text)
