"""A role drawn from its own layered art (``actors.backends.avatar``) on the stage.

The body goes into the role's tiles (over the backdrop, per highlight and breathing offset) like
a procedural role's; the head (head, eyes open or closed, the pupils where the role looks, the
viseme's mouth, the expression's overlay), leaning about its anchor toward where the role looks,
is a sprite composed the first time it is shown, then kept, and pasted each frame with its
alpha where the head has turned and nodded to.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter

from actors.backends.avatar import Avatar
from actors.backends.protocols import GAZE_STEPS

Box = tuple[int, int, int, int]
DESK_OVERLAP = 0.12  # the share of the picture's height the desk hides
COMPOSED_KEPT = 48   # heads over their background kept per role (about 200 kB each at 720p)
HEADS_KEPT = 64      # head sprites kept per role (a pose: expression, eyes, mouth, gaze; ~0.65 MB at 720p)


@dataclass(frozen=True, slots=True)
class AlphaSprite:
    """An RGB sprite with where it is opaque and its soft edge (pixels, their alpha of 255)."""

    rgb: Any        # HxWx3 uint8 (numpy, or a tensor on the drawer's device)
    solid: Any      # HxWx3 bool: alpha >= 250
    edge_y: Any     # the edge's pixels (0 < alpha < 250) ...
    edge_x: Any
    edge_a: Any     # ... and their alpha, as N x 1 (uint16 numpy / int32 tensor)

    def paste(self, region: Any, fade: float = 1.0) -> None:
        """Over ``region`` (an HxWx3 view of the frame), ``fade`` of the way (1: all of it)."""
        if fade < 1.0:
            self._blend(region, fade)
            return
        if isinstance(region, np.ndarray):
            np.copyto(region, self.rgb, where=self.solid)
            if len(self.edge_y):
                under = region[self.edge_y, self.edge_x].astype(np.uint16)
                over = self.rgb[self.edge_y, self.edge_x].astype(np.uint16)
                region[self.edge_y, self.edge_x] = ((under * (255 - self.edge_a) + over * self.edge_a) // 255
                                                    ).astype(np.uint8)
            return
        region.copy_(torch.where(self.solid, self.rgb, region))
        if len(self.edge_y):  # the same integer arithmetic as on numpy: the same pixels
            under = region[self.edge_y, self.edge_x].to(torch.int32)
            over = self.rgb[self.edge_y, self.edge_x].to(torch.int32)
            mixed = torch.div(under * (255 - self.edge_a) + over * self.edge_a, 255, rounding_mode="floor")
            region[self.edge_y, self.edge_x] = mixed.to(torch.uint8)

    def _blend(self, region: Any, fade: float) -> None:
        """A cross-fade step (a few frames of an eased change): every pixel by its alpha times ``fade``."""
        if isinstance(region, np.ndarray):
            alpha = self.solid[..., :1].astype(np.float32) * 255.0
            if len(self.edge_y):
                alpha[self.edge_y, self.edge_x] = self.edge_a
            a = alpha * (fade / 255.0)
            region[...] = np.rint(region * (1.0 - a) + self.rgb * a).astype(np.uint8)
            return
        alpha = self.solid[..., :1].float() * 255.0
        if len(self.edge_y):
            alpha[self.edge_y, self.edge_x] = self.edge_a.float()
        a = alpha * (fade / 255.0)
        region.copy_(torch.round(region.float() * (1.0 - a) + self.rgb.float() * a).to(torch.uint8))


class ArtRole:
    """One image-art role at one resolution: its tiles (body over the backdrop) and head sprites."""

    def __init__(self, avatar: Avatar, bg: Image.Image, cx: int, top: int, desk_y: int, slot_w: float, amp: int,
                 tensor: Callable[[np.ndarray], Any]) -> None:
        w, h = avatar.size
        avail = desk_y - top
        scale = min(avail * (1 + DESK_OVERLAP) / h, 0.86 * slot_w / w)
        self.scale = scale
        pw, ph = max(1, round(w * scale)), max(1, round(h * scale))
        x0 = cx - pw // 2
        y0 = round(desk_y + DESK_OVERLAP * ph) - ph
        self.origin = (x0, y0)
        self.amp = amp
        self._tensor = tensor
        self._lock = threading.Lock()

        self.layers, self.mouths, self.expressions = _scaled(avatar, pw, ph)
        self.avatar = avatar
        # The tile: the backdrop where the body may be, with the body over it at each breath.
        tx0, ty0 = max(0, x0), max(0, y0 - amp)
        tx1, ty1 = min(bg.width, x0 + pw), desk_y
        self.tile_box: Box = (tx0, ty0, tx1, ty1)
        spot = Image.new("RGBA", (tx1 - tx0, ty1 - ty0), (0, 0, 0, 0))
        gp = max(2, round(0.03 * bg.height))
        ImageDraw.Draw(spot).ellipse((gp, gp, spot.width - gp, spot.height + gp), fill=(255, 240, 200, 46))
        spot = spot.filter(ImageFilter.GaussianBlur(gp / 2))
        self.tiles: list[list[Any]] = []
        for lit in (False, True):
            row = []
            for d in range(-amp, amp + 1):
                tile = bg.crop(self.tile_box)
                if lit:
                    tile = Image.alpha_composite(tile, spot)
                tile.alpha_composite(self.layers["body"], (x0 - tx0, y0 + d - ty0))
                row.append(tensor(np.array(tile.convert("RGB"))))
            self.tiles.append(row)
        # The head sprite's box: everything that moves with the head.
        parts = [self.layers["head"], self.layers["eyes_open"], self.layers["eyes_closed"],
                 *self.mouths.values(), *self.expressions.values()]
        # The pupils move inside the eyes' whites: how far per gaze step, in this size's pixels.
        self.pupils = self.layers.get("pupils")
        self.pupil_step = avatar.pupil_travel * scale / GAZE_STEPS
        boxes = [b for b in (p.getbbox() for p in parts) if b is not None]
        hx0, hy0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
        hx1, hy1 = max(b[2] for b in boxes), max(b[3] for b in boxes)
        # The head leans about its anchor: its box takes in what the fullest lean sweeps.
        self.anchor = (avatar.head_anchor[0] * pw / w, avatar.head_anchor[1] * ph / h)
        self.tilt_step = avatar.head_tilt / GAZE_STEPS  # degrees per gaze step
        self.head_box: Box = _swept((hx0, hy0, hx1, hy1), self.anchor, avatar.head_tilt)
        # (expression, closed, mouth, gaze) -> sprite, the most recently shown last
        self.heads: OrderedDict[tuple[str, bool, str, int], AlphaSprite] = OrderedDict()
        self.composed: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._mouth_names: dict[str, str] = {}

    def mouth_name(self, viseme: str) -> str:
        """The mouth (of those the art has) a viseme is drawn with."""
        name = self._mouth_names.get(viseme)
        if name is None:
            mouth = self.avatar.mouth(viseme)
            name = self._mouth_names[viseme] = next(k for k, v in self.avatar.mouths.items() if v is mouth)
        return name

    def look(self, gaze: int) -> int:
        """How far (pixels, right positive) the pupils move for a gaze step; 0 without a pupils layer."""
        return round(gaze * self.pupil_step) if self.pupils is not None else 0

    def tilt(self, gaze: int) -> float:
        """How far (degrees, counter-clockwise positive) the head leans for a gaze step: its top
        toward where it looks."""
        return -gaze * self.tilt_step

    def head(self, expression: str, closed: bool, viseme: str, gaze: int = 0) -> AlphaSprite:
        """The head with its eyes (the pupils turned ``gaze`` steps), the viseme's mouth and the
        expression's overlay, leaning toward where it looks (kept once drawn)."""
        name = self.mouth_name(viseme)
        key = (expression, closed, name, gaze)
        sprite = self.heads.get(key)
        if sprite is not None:
            with self._lock:
                if key in self.heads:
                    self.heads.move_to_end(key)
            return sprite
        img = self.layers["head"].copy()
        img.alpha_composite(self.layers["eyes_closed" if closed else "eyes_open"])
        if self.pupils is not None and not closed:
            img.alpha_composite(_inside(_moved(self.pupils, self.look(gaze)), self.layers["eyes_open"]))
        img.alpha_composite(self.mouths[name])
        if expression in self.expressions:
            img.alpha_composite(self.expressions[expression])
        img = img.crop(self.head_box)  # (transparent where the box reaches past the picture)
        angle = self.tilt(gaze)
        if angle:  # premultiplied, so no dark fringe from the transparent pixels' colour
            centre = (self.anchor[0] - self.head_box[0], self.anchor[1] - self.head_box[1])
            img = img.convert("RGBa").rotate(angle, Image.Resampling.BICUBIC, center=centre).convert("RGBA")
        rgba = np.array(img)
        alpha = rgba[..., 3]
        solid = np.repeat((alpha >= 250)[..., None], 3, axis=2)  # (a broadcast mask copies at half the speed)
        ys, xs = np.nonzero((alpha > 0) & (alpha < 250))
        rgb = np.ascontiguousarray(rgba[..., :3])
        edge_a = alpha[ys, xs].astype(np.uint16)[:, None]
        if isinstance(self._tensor(np.zeros((1, 1, 3), np.uint8)), torch.Tensor):
            t = self._tensor
            sprite = AlphaSprite(t(rgb), t(solid), t(ys), t(xs), t(edge_a.astype(np.int32)))
        else:
            sprite = AlphaSprite(rgb, solid, ys, xs, edge_a)
        with self._lock:
            self.heads[key] = sprite
            if len(self.heads) > HEADS_KEPT:
                self.heads.popitem(last=False)
        return sprite

    def draw(self, out: Any, lit: bool, d: int, expression: str, previous: str, blend: float, closed: bool,
             viseme: str, dx: int, dy: int, gaze: int = 0) -> None:
        """The role into ``out`` (a frame): its tile, then its head where it has moved to, turned
        ``gaze`` steps (its pupils aside, the head leaning)."""
        tx0, ty0, tx1, ty1 = self.tile_box
        out[ty0:ty1, tx0:tx1] = self.tiles[lit][d + self.amp]
        hx0, hy0, hx1, hy1 = self.head_box
        x, y = self.origin[0] + hx0 + dx, self.origin[1] + hy0 + d + dy
        h, w = hy1 - hy0, hx1 - hx0
        # Clipped to the frame (a head turned at the stage's edge).
        cx0, cy0 = max(0, -x), max(0, -y)
        cx1, cy1 = min(w, out.shape[1] - x), min(h, out.shape[0] - y)
        if cx1 <= cx0 or cy1 <= cy0:
            return
        region = out[y + cy0:y + cy1, x + cx0:x + cx1]
        # The head over what is under it, kept for the poses that come back (a listener breathing,
        # a speaker's mouths): a plain copy instead of an alpha paste. Only where what is under it
        # is this role's tile (or the backdrop above it), not a neighbour's figure, which moves.
        keep = blend >= 1.0 and tx0 <= x + cx0 and x + cx1 <= tx1
        key = (lit, d, dx, dy, expression, closed, self.mouth_name(viseme), gaze) if keep else None
        kept = self.composed.get(key) if key is not None else None
        if kept is not None and key is not None:
            region[...] = kept
            with self._lock:
                if key in self.composed:
                    self.composed.move_to_end(key)
            return
        for sprite, fade in ((self.head(previous, closed, viseme, gaze), 1.0),
                             (self.head(expression, closed, viseme, gaze), blend)) \
                if blend < 1.0 else ((self.head(expression, closed, viseme, gaze), 1.0),):
            _clipped(sprite, cx0, cy0, cx1, cy1, w, h).paste(region, fade)
        if key is not None:
            with self._lock:
                self.composed[key] = region.copy() if isinstance(region, np.ndarray) else region.clone()
                if len(self.composed) > COMPOSED_KEPT:
                    self.composed.popitem(last=False)


Layers = dict[str, Image.Image]
_SCALED: OrderedDict[tuple[str, int, int], tuple[Layers, Layers, Layers]] = OrderedDict()
_SCALED_LOCK = threading.Lock()


def _scaled(avatar: Avatar, width: int, height: int) -> tuple[Layers, Layers, Layers]:
    """The art's layers, mouths and expressions at a size: scaled once per process (every run of
    a show at a resolution draws the same), the last few sizes kept."""
    key = (str(avatar.folder), width, height)
    with _SCALED_LOCK:
        hit = _SCALED.get(key)
        if hit is not None:
            _SCALED.move_to_end(key)
            return hit
    size = (width, height)
    scaled = tuple({k: v.resize(size, Image.Resampling.LANCZOS) for k, v in part.items()}
                   for part in (avatar.layers, avatar.mouths, avatar.expressions))
    with _SCALED_LOCK:
        _SCALED[key] = scaled  # type: ignore[assignment]
        while len(_SCALED) > 8:
            _SCALED.popitem(last=False)
    return scaled  # type: ignore[return-value]


def _swept(box: Box, centre: tuple[float, float], degrees: float) -> Box:
    """``box`` grown to take in itself turned up to ``degrees`` either way about ``centre``."""
    x0, y0, x1, y1 = box
    xs, ys = [float(x0), float(x1)], [float(y0), float(y1)]
    for sign in (-1, 1):
        a = math.radians(sign * degrees)
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            u, v = x - centre[0], y - centre[1]
            xs.append(centre[0] + u * math.cos(a) + v * math.sin(a))
            ys.append(centre[1] - u * math.sin(a) + v * math.cos(a))
    return math.floor(min(xs)), math.floor(min(ys)), math.ceil(max(xs)) + 1, math.ceil(max(ys)) + 1


def _moved(layer: Image.Image, dx: int) -> Image.Image:
    """``layer`` moved ``dx`` pixels to the right (left when negative), what leaves it cut off."""
    if dx == 0:
        return layer
    moved = Image.new("RGBA", layer.size, (0, 0, 0, 0))
    moved.paste(layer, (dx, 0))
    return moved


def _inside(layer: Image.Image, within: Image.Image) -> Image.Image:
    """``layer`` only where ``within`` is opaque (its alpha times the other's)."""
    rgba = np.array(layer)
    rgba[..., 3] = (rgba[..., 3].astype(np.uint16) * np.array(within)[..., 3] // 255).astype(np.uint8)
    return Image.fromarray(rgba, "RGBA")


def _clipped(sprite: AlphaSprite, x0: int, y0: int, x1: int, y1: int, w: int, h: int) -> AlphaSprite:
    if (x0, y0, x1, y1) == (0, 0, w, h):
        return sprite
    rgb, solid = sprite.rgb[y0:y1, x0:x1], sprite.solid[y0:y1, x0:x1]
    keep = (sprite.edge_y >= y0) & (sprite.edge_y < y1) & (sprite.edge_x >= x0) & (sprite.edge_x < x1)
    return AlphaSprite(rgb, solid, sprite.edge_y[keep] - y0, sprite.edge_x[keep] - x0, sprite.edge_a[keep])
