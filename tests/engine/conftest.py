"""The compose stack under a real container engine (``scripts/test-compose.sh`` sets the engine up,
builds the images and runs this folder); the main test run leaves this folder out."""

from __future__ import annotations

import os

if not os.environ.get("TROUPE_ENGINE_DIR"):
    collect_ignore_glob = ["test_*.py"]
