"""Pillow artwork for the stage: fonts, text fitting, bodies, eyes, mouths and the backdrop."""

from __future__ import annotations

import importlib.util
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from actors.backends.protocols import GAZE_STEPS

Color = tuple[int, int, int]
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


@dataclass(frozen=True, slots=True)
class MouthShape:
    """Mouth of one viseme, as fractions of the mouth box."""

    open: float
    width: float
    round: float
    teeth: int  # 0 none, 1 upper, 2 both
    tongue: bool = False


MOUTHS = MappingProxyType({
    "sil": MouthShape(0.0, 0.55, 0.0, 0), "PP": MouthShape(0.0, 0.42, 0.0, 0),
    "FF": MouthShape(0.2, 0.5, 0.0, 1), "TH": MouthShape(0.25, 0.5, 0.0, 1, True),
    "DD": MouthShape(0.35, 0.6, 0.0, 1), "kk": MouthShape(0.4, 0.55, 0.2, 0, True),
    "CH": MouthShape(0.32, 0.45, 0.4, 2), "SS": MouthShape(0.2, 0.68, 0.0, 2),
    "nn": MouthShape(0.25, 0.55, 0.0, 0, True), "RR": MouthShape(0.35, 0.4, 0.6, 0),
    "aa": MouthShape(0.95, 0.72, 0.3, 1, True), "E": MouthShape(0.5, 0.82, 0.0, 1),
    "ih": MouthShape(0.35, 0.75, 0.0, 2), "oh": MouthShape(0.75, 0.45, 1.0, 0, True),
    "ou": MouthShape(0.42, 0.3, 1.0, 0),
})
VISEMES = tuple(MOUTHS)

# Normalised body parts: (kind, x0, y0, x1, y1, colour key, corner radius). y is a fraction of
# body height; torsos run past 1.0 so the desk edge hides their bottom at every breathing offset.
SILHOUETTES = MappingProxyType({
    "round": (("e", .12, .02, .34, .17, "main", 0), ("e", .66, .02, .88, .17, "main", 0),
              ("e", .05, .47, .95, 1.4, "main", 0), ("e", .12, .04, .88, .52, "face", 0)),
    "square": (("r", .485, .03, .515, .1, "dark", 0), ("e", .44, 0, .56, .065, "main", 0),
               ("r", .06, .5, .94, 1.4, "main", .12), ("r", .15, .07, .85, .53, "face", .1)),
    "tall": (("e", .4, 0, .6, .1, "main", 0), ("r", .2, .5, .8, 1.4, "main", .25),
             ("e", .22, .06, .78, .56, "face", 0)),
})
DETAILS = MappingProxyType({
    "round": (("e", .18, .06, .28, .13, "blush", 0), ("e", .72, .06, .82, .13, "blush", 0),
              ("e", .3, .62, .7, .95, "face", 0), ("e", .19, .35, .29, .41, "blush", 0),
              ("e", .71, .35, .81, .41, "blush", 0)),
    "square": (("r", .3, .64, .7, .84, "dark", .03), ("e", .36, .7, .44, .76, "face", 0),
               ("e", .56, .7, .64, .76, "blush", 0), ("e", .2, .36, .3, .42, "blush", 0),
               ("e", .7, .36, .8, .42, "blush", 0)),
    "tall": (("r", .46, .56, .54, .92, "dark", .02), ("e", .47, .01, .53, .05, "face", 0)),
})
EYE_BOX = (0.27, 0.185, 0.73, 0.335)
FACE_BOX = (0.25, 0.12, 0.75, 0.345)  # the eyes with their brows: what an expression changes
MOUTH_BOX = (0.34, 0.365, 0.66, 0.475)
EXPRESSIONS = ("neutral", "happy", "sad", "angry", "surprised", "thinking")


def parse_rgb(color: str) -> Color:
    """Parses "#rrggbb"."""
    if len(color) != 7 or color[0] != "#":
        raise ValueError(f"colour must be #rrggbb, got {color!r}")
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def mix(a: Color, b: Color, t: float) -> Color:
    """Blends a towards b by t."""
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def packaged_cjk_font() -> str | None:
    """Noto Sans CJK SC from the ``mplfonts`` wheel (found without importing matplotlib)."""
    spec = importlib.util.find_spec("mplfonts")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "fonts" / "NotoSansCJKsc-Regular.otf"
        if candidate.exists():
            return str(candidate)
    return None


def find_font_file() -> str | None:
    """The packaged CJK font (same pixels on every machine), else a CJK or sans font from fontconfig."""
    packaged = packaged_cjk_font()
    if packaged is not None:
        return packaged
    for cmd in (["fc-list", "-f", "%{file}\n", ":lang=zh"], ["fc-match", "-f", "%{file}\n", "sans-serif"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        files = sorted(f for f in out.splitlines() if f.strip())
        # Regular sans faces read best; sorting keeps the choice stable between runs.
        files.sort(key=lambda f: ("Sans" not in f, "Bold" in f or "Mono" in f or "Serif" in f))
        if files:
            return files[0]
    return None


def load_font(path: str | None, size: int) -> Font:
    """Loads the font at size, falling back to Pillow's built-in one."""
    if path is not None:
        try:
            return ImageFont.truetype(path, size, layout_engine=ImageFont.Layout.BASIC)
        except OSError:
            pass
    return ImageFont.load_default(size=size)


def fit_text(text: str, font: Font, max_w: float, max_lines: int) -> list[str]:
    """Wraps text greedily (at spaces when there are any, else per glyph, for CJK) with ellipsis."""
    lines: list[str] = []
    cur = ""
    rest = " ".join(text.split())
    for ch in rest:
        if font.getlength(cur + ch) <= max_w:
            cur += ch
            continue
        cut = cur.rfind(" ")
        if ch != " " and cut > 0:
            lines.append(cur[:cut])
            cur = cur[cut + 1:] + ch
        else:
            lines.append(cur)
            cur = ch.lstrip()
        if len(lines) == max_lines:
            last = lines[-1]
            while last and font.getlength(last + "…") > max_w:
                last = last[:-1]
            lines[-1] = last.rstrip() + "…"
            return lines
    if cur:
        lines.append(cur)
    return lines


def draw_part(draw: ImageDraw.ImageDraw, part: tuple, w: int, h: int, ox: int, oy: int, grow: int,
              fill: Color | int) -> None:
    """Draws one normalised part of a w x h body at (ox, oy), grown by grow pixels."""
    kind, x0, y0, x1, y1, _, radius = part
    box = (ox + x0 * w - grow, oy + y0 * h - grow, ox + x1 * w + grow, oy + y1 * h + grow)
    if kind == "e":
        draw.ellipse(box, fill=fill)
    else:
        draw.rounded_rectangle(box, radius=radius * w + grow, fill=fill)


def draw_mouth(img: Image.Image, m: MouthShape, lips: Color, lw: int) -> None:
    """Draws a viseme's mouth centred in img (a supersampled crop of the face)."""
    w, h = img.size
    cx, cy = w / 2, h * 0.42
    mw, mh = m.width * w * 0.92, max(m.open * h * 0.8, 1.0)
    draw = ImageDraw.Draw(img)
    if m.open == 0.0:
        if m.width < 0.5:  # PP: lips pressed together, thick and short
            draw.line((cx - mw / 2, cy, cx + mw / 2, cy), fill=lips, width=lw * 2)
        else:  # sil: relaxed closed smile
            draw.arc((cx - mw / 2, cy - h * 0.3, cx + mw / 2, cy + h * 0.1), 20, 160, fill=lips, width=lw)
        return
    box = (cx - mw / 2, cy - mh / 2, cx + mw / 2, cy + mh / 2)
    mask = Image.new("L", img.size, 0)
    md = ImageDraw.Draw(mask)
    inner = Image.new("RGBA", img.size, (70, 16, 28, 255))
    idraw = ImageDraw.Draw(inner)
    if m.tongue:
        idraw.ellipse((cx - mw * 0.3, cy + mh * 0.05, cx + mw * 0.3, cy + mh * 0.9), fill=(220, 92, 112))
    if m.teeth:
        idraw.rectangle((0, 0, w, cy - mh / 2 + mh * 0.28), fill=(246, 244, 238))
    if m.teeth == 2:
        idraw.rectangle((0, cy + mh / 2 - mh * 0.26, w, h), fill=(246, 244, 238))
    if m.round >= 0.5:
        md.ellipse(box, fill=255)
        img.paste(inner, (0, 0), mask)
        draw.ellipse(box, outline=lips, width=lw)
    else:
        radius = min(mh, mw) * (0.3 + 0.2 * m.round)
        md.rounded_rectangle(box, radius=radius, fill=255)
        img.paste(inner, (0, 0), mask)
        draw.rounded_rectangle(box, radius=radius, outline=lips, width=lw)


def draw_eyes(img: Image.Image, closed: bool, dark: Color, lw: int) -> None:
    """Draws both eyes into img (a supersampled crop of the eye box)."""
    w, h = img.size
    draw = ImageDraw.Draw(img)
    rx, ry = w * 0.15, h * 0.36
    for cx in (w * 0.24, w * 0.76):
        box = (cx - rx, h / 2 - ry, cx + rx, h / 2 + ry)
        if closed:  # a happy downward arc reads as a blink at any size
            draw.arc((box[0], box[1] - ry * 0.4, box[2], box[3] - ry * 0.4), 15, 165, fill=dark, width=lw)
            continue
        draw.ellipse(box, fill=(250, 250, 250), outline=dark, width=max(1, lw // 2))
        draw.ellipse((cx - rx * 0.5, h / 2 - ry * 0.55, cx + rx * 0.5, h / 2 + ry * 0.55), fill=(30, 24, 40))
        draw.ellipse((cx - rx * 0.1, h / 2 - ry * 0.4, cx + rx * 0.25, h / 2 - ry * 0.05), fill=(255, 255, 255))


def draw_backdrop(w: int, h: int, desk_y: int, band_y: int, seed: int, background: str = "") -> Image.Image:
    """The back wall (a gradient with seeded stars; a colour "#rrggbb"; or an image file,
    scaled to cover it), the desk and the subtitle band."""
    ys = np.linspace(0.0, 1.0, desk_y, dtype=np.float32)[:, None]
    wall = np.array([16, 18, 42], np.float32) + ys * np.array([34, 14, 34], np.float32)
    img = np.empty((h, w, 3), np.uint8)
    img[:desk_y] = np.round(wall).astype(np.uint8)[:, None, :]
    if background.startswith("#"):
        img[:desk_y] = parse_rgb(background)
    img[desk_y:band_y] = (84, 56, 48)
    img[band_y:] = (14, 13, 22)
    pic = Image.fromarray(img)
    draw = ImageDraw.Draw(pic, "RGBA")  # RGBA mode on an RGB image blends the faint stars
    if background and not background.startswith("#"):
        with Image.open(background) as src:
            picture = src.convert("RGB")
        scale = max(w / picture.width, desk_y / picture.height)  # cover the wall, centred
        size = (max(w, round(picture.width * scale)), max(desk_y, round(picture.height * scale)))
        picture = picture.resize(size, Image.Resampling.LANCZOS)
        left, top = (size[0] - w) // 2, (size[1] - desk_y) // 2
        pic.paste(picture.crop((left, top, left + w, top + desk_y)), (0, 0))
    elif not background:
        rng = np.random.default_rng(seed)
        for x, y, r, a in zip(rng.random(90), rng.random(90), rng.random(90), rng.random(90), strict=True):
            rad = (0.5 + 1.5 * r) * h / 720
            py = y * desk_y * 0.9
            draw.ellipse((x * w - rad, py - rad, x * w + rad, py + rad), fill=(255, 250, 230, int(60 + 140 * a)))
    draw.rectangle((0, desk_y, w, desk_y + max(2, h // 180)), fill=(150, 110, 80, 255))
    return pic.convert("RGBA")



# Brows per expression: (inner end's rise, outer end's rise, arch) as fractions of the eye's
# height, for the left eye (the right one mirrors it); thinking raises one brow only.
_BROWS = MappingProxyType({
    "neutral": (0.0, 0.0, 0.25), "happy": (0.35, 0.3, 0.55), "sad": (0.55, -0.15, 0.1),
    "angry": (-0.45, 0.3, 0.0), "surprised": (0.7, 0.6, 0.6), "thinking": (0.0, 0.0, 0.2),
})


def draw_face(img: Image.Image, expression: str, gaze: int, closed: bool, dark: Color, skin: Color,
              lw: int, shift: tuple[float, float] = (0.0, 0.0)) -> None:
    """Draws the eyes and brows of an expression into img (a supersampled crop of ``FACE_BOX``),
    the pupils turned ``gaze`` steps (of ``GAZE_STEPS``) to the right (negative: left), every
    feature moved by ``shift`` pixels (the head turning and nodding under them)."""
    w, h = img.size
    draw = ImageDraw.Draw(img)
    eye_top = h * (EYE_BOX[1] - FACE_BOX[1]) / (FACE_BOX[3] - FACE_BOX[1])
    eye_h = h - eye_top - h * (FACE_BOX[3] - EYE_BOX[3]) / (FACE_BOX[3] - FACE_BOX[1])
    cy = eye_top + eye_h / 2 + shift[1]
    rx, ry = w * 0.13, eye_h * 0.36
    if expression == "surprised":
        rx, ry = rx * 1.12, ry * 1.25
    look = gaze / GAZE_STEPS * rx * 0.45
    up = -ry * 0.3 if expression == "thinking" else 0.0
    for side, cx in ((-1, w * 0.28 + shift[0]), (1, w * 0.72 + shift[0])):
        box = (cx - rx, cy - ry, cx + rx, cy + ry)
        if closed or expression == "happy":  # a closed eye, or the smiling eye's arch
            bend = -ry * 0.9 if expression == "happy" and not closed else ry * 0.4
            arc_box = (box[0], box[1] + bend, box[2], box[3] + bend)
            start, end = (195, 345) if expression == "happy" and not closed else (15, 165)
            draw.arc(arc_box, start, end, fill=dark, width=lw)
        else:
            draw.ellipse(box, fill=(250, 250, 250), outline=dark, width=max(1, lw // 2))
            pr = 0.38 if expression == "surprised" else 0.5
            px, py = cx + look, cy + up
            draw.ellipse((px - rx * pr, py - ry * (pr + 0.05), px + rx * pr, py + ry * (pr + 0.05)), fill=(30, 24, 40))
            draw.ellipse((px - rx * 0.1, py - ry * 0.4, px + rx * 0.25, py - ry * 0.05), fill=(255, 255, 255))
            if expression in ("sad", "angry"):  # a lid over the eye's top, slanted by the expression
                drop = ry * 0.75
                inner_y, outer_y = ((box[1] + drop * 0.3, box[1] + drop) if expression == "sad" else
                                    (box[1] + drop, box[1] + drop * 0.2))
                xi, xo = cx + side * rx * 1.1, cx - side * rx * 1.1
                draw.polygon([(xo, box[1] - lw), (xi, box[1] - lw), (xi, inner_y), (xo, outer_y)], fill=skin)
                draw.line([(xo, outer_y), (xi, inner_y)], fill=dark, width=max(1, lw // 2))
        # The brow, over the eye: from its outer end to its inner end, raised and arched.
        inner, outer, arch = _BROWS.get(expression, _BROWS["neutral"])
        if expression == "thinking" and side == 1:
            inner, outer, arch = 0.7, 0.6, 0.5
        rise_in, rise_out = inner * eye_h * 0.35, outer * eye_h * 0.35
        base = cy - ry - eye_h * 0.2
        x_out, x_in = cx - side * rx * 1.05, cx + side * rx * 0.85
        points = [(x_out + (x_in - x_out) * k / 8,
                   base - (rise_out + (rise_in - rise_out) * k / 8) - arch * eye_h * 0.15 * (1 - (2 * k / 8 - 1) ** 2))
                  for k in range(9)]
        draw.line(points, fill=dark, width=max(2, lw), joint="curve")
