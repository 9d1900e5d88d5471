"""Print the requirements of pyproject.toml's dependencies and the named extras, one per line.

The Dockerfile installs them in a layer of their own, before the project's code is copied in, so
that a change to the code rebuilds only the last, small layer::

    python requirements.py pyproject.toml preview > slim.txt

Standard library only: it runs in the image's bare Python before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        if extra not in project["optional-dependencies"]:
            raise SystemExit(f"requirements.py: no extra {extra!r} in {pyproject}")
        lines += project["optional-dependencies"][extra]
    return lines


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: requirements.py PYPROJECT [EXTRA ...]")
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
