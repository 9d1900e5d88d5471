"""Show files: the built-in demo show and reading a show file from disk."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from events.show import Show, ShowError, show_from_toml


def load_show(path: Path | None = None) -> Show:
    """Read a show TOML file; without a path, the built-in demo show.  A role's ``look.avatar``
    (a folder, relative to the show file's) is checked now, and its path and digest fixed."""
    try:
        if path is None:
            demo = resources.files(__package__).joinpath("demo.toml")
            text, base = demo.read_text("utf-8"), Path(str(demo)).parent
        else:
            text, base = Path(path).read_text("utf-8"), Path(path).parent
    except OSError as exc:
        raise ShowError(f"cannot read show file: {exc.strerror}: {path}") from None
    return with_art(with_avatars(show_from_toml(text), base), base)


def with_avatars(show: Show, base: Path) -> Show:
    """The show with each role's avatar folder resolved against ``base``, checked (a ShowError
    naming the file that is wrong) and its digest taken."""
    from actors.backends.avatar import AvatarError, check, digest

    roles = []
    for role in show.roles:
        if role.avatar:
            folder = (base / role.avatar).resolve()
            try:
                check(folder)
            except AvatarError as exc:
                raise ShowError(f"role {role.id}: look.avatar: {exc}") from None
            role = dataclasses.replace(role, avatar=str(folder), avatar_digest=digest(folder))
        roles.append(role)
    return dataclasses.replace(show, roles=tuple(roles))


def with_art(show: Show, base: Path) -> Show:
    """The show with its background images resolved against ``base``, checked (a ShowError
    naming the file) and their digests taken (``Show.art``)."""
    import hashlib

    from PIL import Image

    def resolved(wall: str, where: str) -> str:
        if not wall or wall.startswith("#"):
            return wall
        path = (base / wall).resolve()
        try:
            with Image.open(path) as img:
                img.load()
        except FileNotFoundError:
            raise ShowError(f"{where}: {path} does not exist") from None
        except OSError as exc:
            raise ShowError(f"{where}: {path} is not a readable image ({exc})") from None
        return str(path)

    segments = tuple(dataclasses.replace(g, background=resolved(g.background, f"segments[{i}].background"))
                     for i, g in enumerate(show.segments))
    show = dataclasses.replace(show, background=resolved(show.background, "show.background"), segments=segments)
    art = tuple((wall, hashlib.sha256(Path(wall).read_bytes()).hexdigest())
                for wall in show.backgrounds if wall and not wall.startswith("#"))
    return dataclasses.replace(show, art=art)
