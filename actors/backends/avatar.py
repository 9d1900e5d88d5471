"""Bring-your-own avatar art: a folder of layered PNG images and a small manifest (``avatar.toml``).

```toml
size = [400, 640]            # every layer is this many pixels (width, height)
head_anchor = [200, 250]     # the head leans about this point (the neck)
head_tilt = 4                # degrees it leans toward where it looks, at the fullest look (0: never)
pupil_travel = 8             # with a pupils layer: how far (pixels) they move at the fullest look

[layers]                     # file names in the folder
body = "body.png"            # drawn first; the desk hides its bottom
head = "head.png"
eyes_open = "eyes_open.png"
eyes_closed = "eyes_closed.png"
pupils = "pupils.png"        # optional: drawn over eyes_open, inside it, moved to look at the speaker

[mouths]                     # at least rest and A; the others fall back (see MOUTH_FALLBACK)
rest = "mouth_rest.png"
A = "mouth_a.png"
I = "mouth_i.png"
U = "mouth_u.png"
E = "mouth_e.png"
O = "mouth_o.png"

[expressions]                # optional: drawn over the head when the role shows it
happy = "happy.png"
```

Every layer is an RGBA PNG of ``size``, placed at the same origin (layers are drawn over one
another, as in PNGtuber tools).  ``check`` reads a folder and says what is wrong in one line
naming the file; ``digest`` fixes what a run was drawn with.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from PIL import Image, ImageDraw

Scale = Callable[..., list[float]]  # sample art: coordinates to the supersampled canvas
Paint = Callable[[ImageDraw.ImageDraw, Scale], None]
MANIFEST = "avatar.toml"
LAYERS = ("body", "head", "eyes_open", "eyes_closed")
OPTIONAL_LAYERS = ("pupils",)  # drawn over eyes_open, clipped to it, moved as the role looks aside
MOUTHS = ("rest", "A", "I", "U", "E", "O", "MBP", "FV", "L", "WQ")
EXPRESSIONS = ("happy", "sad", "angry", "surprised", "thinking")  # neutral: no overlay
MAX_SIDE = 4096
MAX_TILT, DEFAULT_TILT = 15, 4  # degrees a head leans at the fullest look: at most, unless the manifest says
# The 15 visemes onto the common VTuber mouth sets (the Japanese vowels A I U E O with a rest
# shape, and Preston Blair's MBP, FV, L, WQ): each viseme's mouths in order of preference; the
# first the folder has is drawn (rest and A are always there).
MOUTH_FALLBACK: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "sil": ("rest",), "PP": ("MBP", "rest"), "FF": ("FV", "E", "rest"), "TH": ("L", "E", "A"),
    "DD": ("L", "E", "A"), "kk": ("E", "A"), "CH": ("WQ", "U", "O", "A"), "SS": ("I", "E", "A"),
    "nn": ("L", "E", "A"), "RR": ("WQ", "O", "U", "A"), "aa": ("A",), "E": ("E", "I", "A"),
    "ih": ("I", "E", "A"), "oh": ("O", "A"), "ou": ("U", "WQ", "O", "A"),
})


class AvatarError(ValueError):
    """An avatar folder that cannot be drawn: the message names the file."""


@dataclass(frozen=True, slots=True)
class Avatar:
    """A checked avatar folder: its layers (RGBA images of ``size``), its mouths by viseme."""

    folder: Path
    size: tuple[int, int]
    head_anchor: tuple[int, int]
    layers: Mapping[str, Image.Image]
    mouths: Mapping[str, Image.Image]        # by mouth name (those the folder has)
    expressions: Mapping[str, Image.Image] = field(default_factory=dict)
    pupil_travel: int = 0  # pixels the pupils layer moves at the fullest look (0: it has none)
    head_tilt: float = DEFAULT_TILT  # degrees the head leans about head_anchor toward where it looks, at the fullest look

    def mouth(self, viseme: str) -> Image.Image:
        """The mouth drawn for a viseme (its first fallback the folder has)."""
        for name in MOUTH_FALLBACK.get(viseme, ("rest",)):
            if name in self.mouths:
                return self.mouths[name]
        return self.mouths["rest"]


def check(folder: str | Path) -> Avatar:
    """Read and check an avatar folder (``AvatarError`` naming the file that is wrong)."""
    root = Path(folder)
    manifest = root / MANIFEST
    try:
        doc = tomllib.loads(manifest.read_text("utf-8"))
    except OSError as exc:
        raise AvatarError(f"{manifest}: cannot read the avatar manifest ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AvatarError(f"{manifest}: not a valid TOML manifest ({exc})") from None
    size = _pair(doc, "size", manifest)
    if not all(0 < v <= MAX_SIDE for v in size):
        raise AvatarError(f"{manifest}: size must be two numbers from 1 to {MAX_SIDE}, not {list(size)}")
    anchor = _pair(doc, "head_anchor", manifest)
    if not (0 <= anchor[0] < size[0] and 0 <= anchor[1] < size[1]):
        raise AvatarError(f"{manifest}: head_anchor {list(anchor)} is outside the {size[0]}x{size[1]} picture")
    layer_files = _table(doc, "layers", manifest)
    unknown = sorted(set(layer_files) - set(LAYERS) - set(OPTIONAL_LAYERS))
    if unknown:
        raise AvatarError(f"{manifest}: unknown layer {unknown[0]!r}; one of {', '.join(LAYERS + OPTIONAL_LAYERS)}")
    layers = {name: _image(root, layer_files.get(name), f"layers.{name}", size, manifest)
              for name in LAYERS + tuple(n for n in OPTIONAL_LAYERS if n in layer_files)}
    travel = doc.get("pupil_travel", round(0.02 * size[0]) if "pupils" in layers else 0)
    if not (isinstance(travel, int) and not isinstance(travel, bool) and 0 <= travel <= size[0] // 8):
        raise AvatarError(f"{manifest}: pupil_travel must be a whole number of pixels from 0 to {size[0] // 8}, "
                          f"not {travel!r}")
    mouth_files = _table(doc, "mouths", manifest)
    for required in ("rest", "A"):
        if required not in mouth_files:
            raise AvatarError(f"{manifest}: mouths.{required} is missing (every set needs rest and A)")
    unknown = sorted(set(mouth_files) - set(MOUTHS))
    if unknown:
        raise AvatarError(f"{manifest}: unknown mouth {unknown[0]!r}; one of {', '.join(MOUTHS)}")
    mouths = {name: _image(root, file, f"mouths.{name}", size, manifest) for name, file in mouth_files.items()}
    expression_files = _table(doc, "expressions", manifest, required=False)
    unknown = sorted(set(expression_files) - set(EXPRESSIONS))
    if unknown:
        raise AvatarError(f"{manifest}: unknown expression {unknown[0]!r}; one of {', '.join(EXPRESSIONS)}")
    expressions = {name: _image(root, file, f"expressions.{name}", size, manifest)
                   for name, file in expression_files.items()}
    tilt = doc.get("head_tilt", DEFAULT_TILT)
    if not (isinstance(tilt, int | float) and not isinstance(tilt, bool) and 0 <= tilt <= MAX_TILT):
        raise AvatarError(f"{manifest}: head_tilt must be a number of degrees from 0 to {MAX_TILT}, not {tilt!r}")
    return Avatar(root, size, anchor, layers, mouths, expressions, travel if "pupils" in layers else 0, float(tilt))


def digest(folder: str | Path) -> str:
    """sha256 over the manifest and every file it names (names and bytes): what a run drew with
    (of a folder ``check`` passed)."""
    root = Path(folder)
    doc = tomllib.loads((root / MANIFEST).read_text("utf-8"))
    files = sorted({str(f) for key in ("layers", "mouths", "expressions") for f in doc.get(key, {}).values()})
    h = hashlib.sha256((root / MANIFEST).read_bytes())
    for name in files:
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()


def _pair(doc: dict[str, object], key: str, manifest: Path) -> tuple[int, int]:
    value = doc.get(key)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise AvatarError(f"{manifest}: {key} must be two whole numbers, like {key} = [400, 640]")
    return value[0], value[1]


def _table(doc: dict[str, object], key: str, manifest: Path, required: bool = True) -> dict[str, str]:
    value = doc.get(key, None if required else {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise AvatarError(f"{manifest}: [{key}] must be a table of file names")
    return value


def _image(root: Path, name: str | None, what: str, size: tuple[int, int], manifest: Path) -> Image.Image:
    if not name:
        raise AvatarError(f"{manifest}: {what} is missing")
    path = root / name
    if path.resolve().parent != root.resolve() and root.resolve() not in path.resolve().parents:
        raise AvatarError(f"{manifest}: {what} = {name!r} is outside the avatar folder")
    try:
        with Image.open(path) as img:
            img.load()
            if img.format != "PNG":
                raise AvatarError(f"{path}: {what} is {img.format}, not a PNG")
            if img.size != size:
                raise AvatarError(f"{path}: {what} is {img.size[0]}x{img.size[1]}, the manifest says "
                                  f"{size[0]}x{size[1]}")
            return img.convert("RGBA")
    except FileNotFoundError:
        raise AvatarError(f"{path}: {what} does not exist") from None
    except OSError as exc:
        raise AvatarError(f"{path}: {what} is not a readable image ({exc})") from None


def contact_sheet(avatar: Avatar, font_path: str | None = None, cell: int = 200, columns: int = 5) -> Image.Image:
    """Every image of a checked folder, each over a checkerboard (where it is transparent) with
    its name in the manifest: what a producer sees of the folder at a glance."""
    from actors.backends.stage_art import find_font_file, load_font  # the stage's own font

    parts = [*((name, img) for name, img in avatar.layers.items()),
             *((f"mouths.{name}", img) for name, img in avatar.mouths.items()),
             *((f"expressions.{name}", img) for name, img in avatar.expressions.items())]
    w, h = avatar.size
    scale = (cell - 20) / w
    size = (max(1, round(w * scale)), max(1, round(min(h * scale, 3 * cell))))  # very tall art: its top
    label = cell // 7
    row = size[1] + 20 + label
    sheet = Image.new("RGB", (columns * cell, -(-len(parts) // columns) * row), (32, 34, 56))
    font = load_font(font_path or find_font_file(), round(label * 0.55))
    board = Image.new("RGBA", size, (44, 46, 70, 255))
    squares = ImageDraw.Draw(board)
    step = max(4, cell // 14)
    for y in range(0, size[1], step):
        for x in range((y // step) % 2 * step, size[0], 2 * step):
            squares.rectangle((x, y, x + step - 1, y + step - 1), fill=(64, 66, 92, 255))
    draw = ImageDraw.Draw(sheet)
    for k, (name, img) in enumerate(parts):
        x, y = k % columns * cell, k // columns * row
        tile = board.copy()
        shown = img.resize((size[0], round(h * scale)), Image.Resampling.LANCZOS).crop((0, 0, *size))
        tile.alpha_composite(shown)
        sheet.paste(tile.convert("RGB"), (x + 10, y + 10))
        draw.text((x + cell / 2, y + size[1] + 10 + (10 + label) / 2), name, fill=(235, 235, 245), font=font,
                  anchor="mm")
    return sheet


def make_sample(folder: str | Path) -> Path:
    """Draw the sample avatar ("Pip", a cat in a hoodie) as a layered folder: every layer drawn by
    this function with Pillow (no third-party art), at twice the size and reduced, so edges are
    smooth.  Returns the folder."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    w, h, ss = 400, 640, 2
    fur, dark, hoodie, inner = (246, 196, 120), (70, 44, 40), (122, 92, 200), (255, 228, 214)

    def layer(paint: Paint) -> Image.Image:
        img = Image.new("RGBA", (w * ss, h * ss), (0, 0, 0, 0))
        paint(ImageDraw.Draw(img), lambda *xy: [v * ss for v in xy])
        return img.reduce(ss)

    def body(d: ImageDraw.ImageDraw, s: Scale) -> None:
        d.rounded_rectangle(s(70, 360, 330, 700), radius=110 * ss, fill=hoodie, outline=dark, width=5 * ss)
        d.rounded_rectangle(s(150, 470, 250, 560), radius=20 * ss, fill=(98, 72, 170))
        d.line(s(170, 380, 160, 450), fill=(240, 240, 250), width=5 * ss)
        d.line(s(230, 380, 240, 450), fill=(240, 240, 250), width=5 * ss)

    def head(d: ImageDraw.ImageDraw, s: Scale) -> None:
        for ear in ((80, 40, 175, 115, 95, 190), (320, 40, 225, 115, 305, 190)):
            d.polygon(s(*ear), fill=fur, outline=dark, width=5 * ss)
        d.ellipse(s(55, 90, 345, 370), fill=fur, outline=dark, width=5 * ss)
        d.ellipse(s(150, 250, 250, 330), fill=inner)
        d.ellipse(s(190, 262, 210, 276), fill=(200, 90, 110))

    def eyes(closed: bool) -> Paint:
        def paint(d: ImageDraw.ImageDraw, s: Scale) -> None:
            for cx in (140, 260):
                if closed:
                    d.arc(s(cx - 32, 190, cx + 32, 240), 200, 340, fill=dark, width=6 * ss)
                else:
                    d.ellipse(s(cx - 26, 182, cx + 26, 242), fill=(255, 255, 255), outline=dark, width=4 * ss)
        return paint

    def pupils(d: ImageDraw.ImageDraw, s: Scale) -> None:
        for cx in (140, 260):
            d.ellipse(s(cx - 15, 195, cx + 15, 235), fill=(40, 30, 60))
            d.ellipse(s(cx - 8, 200, cx + 2, 212), fill=(255, 255, 255))

    def mouth(shape: str) -> Paint:
        def paint(d: ImageDraw.ImageDraw, s: Scale) -> None:
            if shape == "rest":
                d.arc(s(180, 272, 200, 296), 0, 160, fill=dark, width=4 * ss)
                d.arc(s(200, 272, 220, 296), 20, 180, fill=dark, width=4 * ss)
                return
            box = {"A": (172, 280, 228, 336), "I": (166, 284, 234, 306), "U": (188, 282, 212, 306),
                   "E": (172, 282, 228, 318), "O": (180, 280, 220, 326)}[shape]
            d.ellipse(s(*box), fill=(120, 30, 50), outline=dark, width=4 * ss)
            if shape in ("A", "E", "O"):
                x0, y0, x1, y1 = box
                d.ellipse(s(x0 + 12, y1 - 16, x1 - 12, y1 - 4), fill=(230, 110, 130))
        return paint

    def expression(name: str) -> Paint:
        def paint(d: ImageDraw.ImageDraw, s: Scale) -> None:
            arcs = {"happy": 150, "surprised": 132}
            lines = {"sad": ((110, 172, 170, 154), (230, 154, 290, 172)),
                     "angry": ((110, 152, 170, 172), (230, 172, 290, 152)),
                     "thinking": ((112, 168, 168, 168), (232, 146, 288, 154))}
            if name in arcs:
                top = arcs[name]
                for cx in (140, 260):
                    d.arc(s(cx - 34, top, cx + 34, top + 36), 200, 340, fill=dark, width=7 * ss)
            for brow in lines.get(name, ()):
                d.line(s(*brow), fill=dark, width=7 * ss)
            if name == "happy":
                for cx in (105, 295):
                    d.ellipse(s(cx - 28, 250, cx + 28, 280), fill=(255, 120, 140, 150))
            if name == "sad":
                d.ellipse(s(268, 244, 282, 268), fill=(120, 190, 255, 230))
            if name == "angry":
                d.line(s(300, 120, 318, 138), fill=(220, 40, 40), width=5 * ss)
                d.line(s(318, 120, 300, 138), fill=(220, 40, 40), width=5 * ss)
            if name == "thinking":
                d.ellipse(s(318, 150, 334, 176), fill=(150, 210, 255, 220))
        return paint

    files = {"body.png": layer(body), "head.png": layer(head), "eyes_open.png": layer(eyes(False)),
             "eyes_closed.png": layer(eyes(True)), "pupils.png": layer(pupils)}
    files.update({f"mouth_{m.lower()}.png": layer(mouth(m)) for m in ("rest", "A", "I", "U", "E", "O")})
    files.update({f"{e}.png": layer(expression(e)) for e in EXPRESSIONS})
    for name, img in files.items():
        img.save(root / name, optimize=True)
    (root / MANIFEST).write_text(
        "# Pip, the sample avatar: drawn by actors.backends.avatar.make_sample (troupe avatar DIR --sample).\n"
        "size = [400, 640]\nhead_anchor = [200, 330]\npupil_travel = 7\n\n[layers]\nbody = \"body.png\"\n"
        "head = \"head.png\"\neyes_open = \"eyes_open.png\"\neyes_closed = \"eyes_closed.png\"\n"
        "pupils = \"pupils.png\"\n\n[mouths]\n"
        + "".join(f"{m} = \"mouth_{m.lower()}.png\"\n" for m in ("rest", "A", "I", "U", "E", "O"))
        + "\n[expressions]\n" + "".join(f"{e} = \"{e}.png\"\n" for e in EXPRESSIONS), "utf-8")
    return root
