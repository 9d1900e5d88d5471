"""Stage renderer: Pillow pre-renders sprites per resolution, each frame is a few array copies.

On CUDA the pictures stay on the GPU until they are JPEG-encoded, there too where
torchvision's nvJPEG encoder works (else on the CPU with simplejpeg).
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
import simplejpeg
import torch
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from actors.backends.avatar import Avatar, check
from actors.backends.avatar_stage import ArtRole
from actors.backends.protocols import (
    BLEND_STEPS,
    GAZE_STEPS,
    NOD_STEPS,
    RESOLUTIONS,
    RoleLook,
    RoleState,
    StageDrawer,
)
from actors.backends.stage_art import (
    DETAILS,
    EXPRESSIONS,
    FACE_BOX,
    MOUTH_BOX,
    MOUTHS,
    SILHOUETTES,
    VISEMES,
    Color,
    Font,
    draw_backdrop,
    draw_face,
    draw_mouth,
    draw_part,
    find_font_file,
    fit_text,
    load_font,
    mix,
    parse_rgb,
)

log = logging.getLogger(__name__)
SHAPES = tuple(SILHOUETTES)
_SS = 2  # supersampling factor; reduce(2) is a box filter, so crops at even coords stay exact
_SUB_CACHE = 64
_BLINK_MS = 130
_MAX_ROLES = 8
Pixels = torch.Tensor | np.ndarray  # uint8 HxWx3
Box = tuple[int, int, int, int]
Frame = tuple[int, Sequence[RoleState], str | None]  # (t_ms, states, subtitle)
GpuJpeg = Callable[[list[torch.Tensor], int], list[torch.Tensor]]  # CHW uint8 -> JPEG bytes


_AVATARS: dict[str, Avatar] = {}
_AVATARS_LOCK = threading.Lock()


def avatar_at(folder: str) -> Avatar:
    """An avatar folder, read and checked once per process."""
    with _AVATARS_LOCK:
        if folder not in _AVATARS:
            _AVATARS[folder] = check(folder)
        return _AVATARS[folder]


def _pixels(device: torch.device | None, arr: np.ndarray) -> Any:
    """An array as the drawer keeps it: itself on the CPU (``device`` None), else a tensor on ``device``."""
    # On CPU, numpy copies stay on the calling thread; torch copies this size fan out to its
    # OpenMP pool, whose spin-waiting workers then starve x264's threads on a 2-core box.
    return arr if device is None else torch.from_numpy(np.ascontiguousarray(arr)).to(device)


def resolution_of(size: tuple[int, int]) -> str:
    """The name of a resolution's (width, height)."""
    return next(name for name, wh in RESOLUTIONS.items() if wh == size)


class _Scene:
    """Every cached tensor for one resolution; replaced whole, so draw() never sees half a rebuild."""

    __slots__ = ("amp", "art", "band", "bares", "base", "device", "face_lock", "faces", "font", "masks", "mouths",
                 "nod", "size", "slots", "sub_cache", "tags", "tensors", "tiles", "turn")

    def __init__(self, looks: Sequence[RoleLook], size: tuple[int, int], seed: int, font_path: str | None,
                 device: torch.device, tensors: bool = False, background: str = "") -> None:
        w, h = size
        self.size, self.device = size, device
        self.tensors = tensors or device.type != "cpu"
        self.amp = max(1, round(h / 360))  # breathing bob amplitude in pixels
        band_y = h - round(0.16 * h)
        tag_h = round(0.055 * h)
        desk_y = band_y - tag_h - round(0.035 * h)
        slot_w = w / len(looks)
        bw = int(min(0.78 * slot_w, 0.62 * (desk_y - round(0.07 * h))))
        bh = round(bw / 0.62)
        # Room for the highlight glow, kept inside the role's slot when many roles share the stage.
        gp = max(2, min(round(0.03 * h), int((slot_w - bw) / 2) - 1))
        bg = draw_backdrop(w, h, desk_y, band_y, seed, background)
        tag_font = load_font(font_path, round(0.03 * h))
        self.font = load_font(font_path, round(0.042 * h))
        self.tiles: list[list[list[Pixels]]] = []  # [role][lit][bob + amp]
        self.tags: list[list[Pixels]] = []  # [role][lit]
        # The eyes and brows per role, drawn when first shown: (expression, gaze step, closed) -> sprite;
        # drawn from the role's bare face (supersampled), its colours and its line width.
        self.faces: list[dict[tuple[str, int, float, bool], Pixels]] = []
        self.bares: list[tuple[Image.Image, Box, Color, Color, int] | None] = []
        self.masks: list[Pixels | None] = []  # per role: where its face box shows the head (HxWx3 booleans)
        self.art: list[ArtRole | None] = []  # per role: its own layered art (None: a procedural role)
        self.face_lock = threading.Lock()
        self.mouths: list[dict[str, Pixels]] = []  # [role][viseme]
        self.turn = max(1, round(0.018 * h))  # the face's features move this far as the head turns
        self.nod = max(1, round(0.02 * h))   # ... and this far down at the bottom of a nod
        self.slots: list[tuple[Box, Box, Box, Box]] = []  # tile, face (x, y, w, h), mouth (x, y, w, h), tag
        for i, look in enumerate(looks):
            cx = round((i + 0.5) * slot_w)
            tx0, ty0 = cx - bw // 2 - gp, desk_y - bh - self.amp - gp
            tile_box = (tx0, ty0, tx0 + bw + 2 * gp, desk_y)
            tag_w = min(round(slot_w * 0.92), round(tag_font.getlength(look.name)) + tag_h * 2)
            tag_box = (cx - tag_w // 2, desk_y + round(0.015 * h), cx + tag_w - tag_w // 2,
                       desk_y + round(0.015 * h) + tag_h)
            if look.avatar:  # the role's own art
                art = ArtRole(avatar_at(look.avatar), bg, cx, round(0.07 * h), desk_y, slot_w, self.amp,
                              partial(_pixels, self.device if self.tensors else None))  # no cycle to the scene
                self.art.append(art)
                self.tiles.append([])
                self.faces.append({})
                self.bares.append(None)
                self.masks.append(None)
                self.mouths.append({})
                self.slots.append((art.tile_box, (0, 0, 0, 0), (0, 0, 0, 0), tag_box))
                self._tag(look, bg, tag_box, tag_font)
                continue
            self.art.append(None)
            self._role(look, bg, tile_box, tag_box, bw, bh, gp, tag_font)
        self.base = self._tensor(bg)
        self.band = bg.crop((0, band_y, w, h))
        self.sub_cache: OrderedDict[str, Pixels] = OrderedDict()

    def _tensor(self, img: Image.Image) -> Pixels:
        """Pillow image -> contiguous uint8 HxWx3 pixels: numpy on CPU (unless ``tensors``), else a
        tensor on the device."""
        return _pixels(self.device if self.tensors else None, np.array(img.convert("RGB")))

    def _role(self, look: RoleLook, bg: Image.Image, tile_box: Box,
              tag_box: Box, bw: int, bh: int, gp: int,
              tag_font: Font) -> None:
        """Pre-renders one role's tiles (bob x highlight), eye, mouth and name tag sprites."""
        main = parse_rgb(look.color)
        pal = {"main": main, "face": mix(main, (255, 255, 255), 0.62), "dark": mix(main, (0, 0, 0), 0.55),
               "blush": mix(mix(main, (255, 255, 255), 0.62), (255, 96, 120), 0.45)}
        tw, th = tile_box[2] - tile_box[0], tile_box[3] - tile_box[1]
        cw, ch = tw, gp + round(bh * 1.12)
        ss = _SS
        canvas = Image.new("RGBA", (cw * ss, ch * ss), (0, 0, 0, 0))
        glow = Image.new("L", (cw * ss, ch * ss), 0)
        draw, gdraw = ImageDraw.Draw(canvas), ImageDraw.Draw(glow)
        lw = max(2, round(bw * 0.022)) * ss
        for part in SILHOUETTES[look.shape]:
            draw_part(gdraw, part, bw * ss, bh * ss, gp * ss, gp * ss, lw * 3, 255)
            draw_part(draw, part, bw * ss, bh * ss, gp * ss, gp * ss, lw, pal["dark"])
        for part in SILHOUETTES[look.shape] + DETAILS[look.shape]:
            draw_part(draw, part, bw * ss, bh * ss, gp * ss, gp * ss, 0, pal[part[5]])

        def box(rel: tuple[float, float, float, float]) -> Box:
            return (gp + int(rel[0] * bw), gp + int(rel[1] * bh), gp + math.ceil(rel[2] * bw),
                    gp + math.ceil(rel[3] * bh))

        fbox, mbox = box(FACE_BOX), box(MOUTH_BOX)
        bare = canvas.copy()  # face without eyes or mouth; sprites start from crops of it

        def sprite(b: Box, paint: Callable[[Image.Image], None]) -> Image.Image:
            # Box-filter reduce of an even-aligned crop equals the same region of a full reduce.
            crop = bare.crop((b[0] * ss, b[1] * ss, b[2] * ss, b[3] * ss))
            paint(crop)
            return crop

        lips = mix(pal["dark"], (150, 40, 60), 0.5)
        mouths = {v: sprite(mbox, partial(draw_mouth, m=m, lips=lips, lw=lw)).reduce(ss) for v, m in MOUTHS.items()}
        body = canvas.reduce(ss).crop((0, 0, cw, th))
        halo = glow.reduce(ss).filter(ImageFilter.GaussianBlur(gp / 3)).crop((0, 0, cw, th))
        gold = Image.new("RGBA", (cw, th), (255, 214, 96, 0))
        gold.putalpha(halo.point(lambda a: a * 3 // 4))
        spot = Image.new("RGBA", (tw, th), (0, 0, 0, 0))
        ImageDraw.Draw(spot).ellipse((gp * 2, gp * 2, tw - gp * 2, th + gp), fill=(255, 240, 200, 46))
        spot = spot.filter(ImageFilter.GaussianBlur(gp / 2))
        back = bg.crop(tile_box)
        tiles = []
        for hl in (False, True):
            under = Image.alpha_composite(back, spot) if hl else back
            row = []
            for d in range(-self.amp, self.amp + 1):
                tile = under.copy()
                src = (0, 0, cw, th - self.amp - d)  # the desk edge cuts the torso off
                if hl:
                    tile.alpha_composite(gold, (0, self.amp + d), src)
                tile.alpha_composite(body, (0, self.amp + d), src)
                row.append(self._tensor(tile))
            tiles.append(row)
        self.tiles.append(tiles)
        self.faces.append({})
        face_crop = bare.crop((fbox[0] * ss, fbox[1] * ss, fbox[2] * ss, fbox[3] * ss))
        self.bares.append((face_crop, fbox, pal["dark"], pal["face"], lw))
        mask = np.repeat((np.array(face_crop.reduce(ss).getchannel("A")) >= 128)[..., None], 3, axis=2)
        self.masks.append(torch.from_numpy(mask).to(self.device) if self.tensors else mask)
        self.mouths.append({v: self._tensor(im) for v, im in mouths.items()})
        ox, oy = tile_box[0], tile_box[1] + self.amp
        self.slots.append((tile_box, (ox + fbox[0], oy + fbox[1], fbox[2] - fbox[0], fbox[3] - fbox[1]),
                           (ox + mbox[0], oy + mbox[1], mbox[2] - mbox[0], mbox[3] - mbox[1]), tag_box))
        self._tag(look, bg, tag_box, tag_font)

    def _tag(self, look: RoleLook, bg: Image.Image, tag_box: Box, tag_font: Font) -> None:
        """The role's name tag, plain (painted on the backdrop) and lit."""
        main = parse_rgb(look.color)
        tags = []
        for hl in (False, True):
            tag = bg.crop(tag_box)
            tdraw = ImageDraw.Draw(tag)
            edge = (255, 214, 96) if hl else mix(main, (255, 255, 255), 0.3)
            tdraw.rounded_rectangle((0, 0, tag.width - 1, tag.height - 1), radius=tag.height // 3,
                                    fill=mix(main, (0, 0, 0), 0.35 if hl else 0.55), outline=edge,
                                    width=max(1, tag.height // 12) * (2 if hl else 1))
            label = fit_text(look.name, tag_font, tag.width - tag.height, 1)
            tdraw.text((tag.width / 2, tag.height / 2), label[0] if label else "", font=tag_font,
                       fill=(255, 255, 255), anchor="mm")
            tags.append(self._tensor(tag))
            if not hl:
                bg.paste(tag, tag_box[:2])
        self.tags.append(tags)

    def face(self, i: int, expression: str, gaze: int, nod: float, closed: bool) -> Pixels:
        """Role ``i``'s eyes and brows (turned ``gaze`` steps, ``nod`` of the way down): drawn the
        first time they are shown, then kept."""
        key = (expression, gaze, nod, closed)
        sprite = self.faces[i].get(key)
        if sprite is None:
            bare = self.bares[i]
            assert bare is not None  # a procedural role
            crop, _, dark, skin, lw = bare
            img = crop.copy()
            shift = (gaze / GAZE_STEPS * self.turn * _SS, nod * self.nod * _SS)
            draw_face(img, expression, gaze, closed, dark, skin, lw, shift)
            sprite = self._tensor(img.reduce(_SS))
            with self.face_lock:
                self.faces[i][key] = sprite
        return sprite

    def subtitle(self, text: str) -> Pixels:
        """The subtitle band with text on a box, rasterised once per text (bounded LRU)."""
        hit = self.sub_cache.get(text)
        if hit is not None:
            self.sub_cache.move_to_end(text)
            return hit
        img = self.band.copy()
        w, h = img.size
        size = self.font.size if isinstance(self.font, ImageFont.FreeTypeFont) else 16
        lines = fit_text(text, self.font, w * 0.86, 2)
        line_h, pad = round(size * 1.3), round(size * 0.45)
        text_w = max((self.font.getlength(line) for line in lines), default=0)
        box_h = line_h * len(lines) + pad * 2
        top = max(0, (h - box_h) // 2)
        over = Image.new("RGBA", img.size, (0, 0, 0, 0))
        ImageDraw.Draw(over).rounded_rectangle(
            (w / 2 - text_w / 2 - pad * 2, top, w / 2 + text_w / 2 + pad * 2, top + box_h),
            radius=pad, fill=(0, 0, 0, 170))
        img.alpha_composite(over)
        draw = ImageDraw.Draw(img)
        for k, line in enumerate(lines):
            draw.text((w / 2, top + pad + line_h * k + line_h / 2), line, font=self.font,
                      fill=(255, 255, 255), anchor="mm")
        tensor = self._tensor(img)
        self.sub_cache[text] = tensor
        if len(self.sub_cache) > _SUB_CACHE:
            self.sub_cache.popitem(last=False)
        return tensor


_NEUTRAL = ("neutral", "neutral", 1.0, 0, 0.0)


def _face_of(state: RoleState) -> tuple[str, str, float, int, float]:
    """What a frame draws of a role's face, in the steps it is drawn in: the expression, the one
    it eases from, how far, the gaze step and the nod, each in its steps."""
    blend = round(min(1.0, max(0.0, state.blend)) * BLEND_STEPS) / BLEND_STEPS
    gaze = round(max(-1.0, min(1.0, state.gaze)) * GAZE_STEPS)
    nod = round(min(1.0, max(0.0, state.nod)) * NOD_STEPS) / NOD_STEPS
    return state.expression, state.previous if blend < 1.0 else state.expression, blend, gaze, nod


def _paste(region: Any, sprite: Pixels, mask: Pixels) -> None:
    """``sprite`` onto ``region`` where ``mask`` (its opaque pixels, per channel) says."""
    if isinstance(region, np.ndarray):
        np.copyto(region, sprite, where=mask)  # far cheaper than boolean indexing
    else:
        assert isinstance(mask, torch.Tensor) and isinstance(sprite, torch.Tensor)
        region.copy_(torch.where(mask, sprite, region))


def _mixed(before: Pixels, after: Pixels, blend: float) -> Pixels:
    """``before`` eased ``blend`` of the way into ``after`` (a cross-fade of two sprites)."""
    if isinstance(after, np.ndarray):
        assert isinstance(before, np.ndarray)
        mixed = before.astype(np.float32) * (1.0 - blend) + after.astype(np.float32) * blend
        return np.rint(mixed).astype(np.uint8)
    assert isinstance(before, torch.Tensor)
    return torch.round(before.float() * (1.0 - blend) + after.float() * blend).to(torch.uint8)


@dataclass(frozen=True, slots=True)
class _Rhythm:
    """Per-role blink and breathing timing, fixed by seed and role id."""

    blink_period: int
    blink_phase: int
    breath_period: int
    breath_phase: int


class StageRenderer(StageDrawer):
    """Draws one stage frame holding every role (on the CPU, or on a CUDA device).

    ``tensors=True`` composites with torch tensors on the CPU too: the code path CUDA takes,
    so that it can be checked against the numpy one where there is no GPU.
    """

    def __init__(self, looks: Sequence[RoleLook], resolution: str = "720p", device: str = "cpu",
                 seed: int = 0, *, tensors: bool = False) -> None:
        if not 1 <= len(looks) <= _MAX_ROLES:
            raise ValueError(f"need 1..{_MAX_ROLES} roles, got {len(looks)}")
        if len({look.role for look in looks}) != len(looks):
            raise ValueError("role ids must be unique")
        for look in looks:
            if look.shape not in SILHOUETTES:
                raise ValueError(f"unknown shape {look.shape!r} for role {look.role!r}")
            parse_rgb(look.color)
        self._looks = tuple(looks)
        self._index = {look.role: i for i, look in enumerate(self._looks)}
        self._device = torch.device(device)
        self._tensors = tensors
        self._seed = seed
        self._font_path = find_font_file()
        rhythms = []
        for look in self._looks:
            # A string seed goes through sha512, so phases do not depend on PYTHONHASHSEED.
            rng = random.Random(f"{seed}/{look.role}")
            blink, breath = rng.randrange(2800, 5200), rng.randrange(3200, 4400)
            rhythms.append(_Rhythm(blink, rng.randrange(blink), breath, rng.randrange(breath)))
        self._rhythms = tuple(rhythms)
        self._background = ""
        self._scenes: dict[tuple[str, str], _Scene] = {}  # (resolution, back wall) -> its sprites
        self._ahead: dict[tuple[str, str], _Scene] = {}   # built by ``prebuild`` on another thread
        self._scene = self._build(resolution)
        self._gpu_jpeg = gpu_jpeg(self._device) if self._device.type == "cuda" else None

    def _build(self, resolution: str) -> _Scene:
        """Renders every cached sprite for one resolution (and the current back wall), or finds
        them built: a show switching between its segments' walls rebuilds nothing."""
        if resolution not in RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}; one of {sorted(RESOLUTIONS)}")
        key = (resolution, self._background)
        scene = self._scenes.get(key)
        if scene is None:
            scene = self._ahead.pop(key, None) or self._scene_of(key)
            self._scenes = {k: v for k, v in self._scenes.items() if k[0] == resolution}  # one resolution kept
            self._scenes[key] = scene
        return scene

    def _scene_of(self, key: tuple[str, str]) -> _Scene:
        resolution, background = key
        return _Scene(self._looks, RESOLUTIONS[resolution], self._seed, self._font_path, self._device,
                      self._tensors, background)

    def prebuild(self, resolution: str) -> None:
        """Build a resolution's sprites now, on the caller's thread, while frames are drawn at the
        current one on another: ``set_resolution`` then finds them built (a switch costs no stall)."""
        key = (resolution, self._background)
        if resolution in RESOLUTIONS and key not in self._scenes and key not in self._ahead:
            self._ahead = {key: self._scene_of(key)}  # the latest asked for only

    def set_resolution(self, resolution: str) -> None:
        """Switches resolution; the next draw() uses the rebuilt caches."""
        if RESOLUTIONS.get(resolution) != self._scene.size:
            self._scene = self._build(resolution)

    @property
    def background(self) -> str:
        """The back wall drawn: "" (the default), "#rrggbb" or an image file."""
        return self._background

    def set_background(self, background: str) -> None:
        """Draws the next frames with another back wall (its sprites built on first use)."""
        if background != self._background:
            self._background = background
            self._scene = self._build(resolution_of(self._scene.size))

    @property
    def size(self) -> tuple[int, int]:
        """Frame (width, height) in pixels."""
        return self._scene.size

    @property
    def jpeg_encoder(self) -> str:
        """What ``encode`` and ``encode_batch`` use: ``"torchvision-cuda"`` or ``"simplejpeg"``."""
        return "simplejpeg" if self._gpu_jpeg is None else "torchvision-cuda"

    def eyes_closed(self, role: str, t_ms: int) -> bool:
        """Whether role is mid-blink at t_ms."""
        r = self._rhythms[self._index[role]]
        return (t_ms + r.blink_phase) % r.blink_period < _BLINK_MS

    def breath_offset(self, role: str, t_ms: int) -> int:
        """Vertical breathing offset of role at t_ms, in pixels at the current resolution."""
        r = self._rhythms[self._index[role]]
        amp = self._scene.amp
        return round(amp * math.sin(2 * math.pi * ((t_ms + r.breath_phase) % r.breath_period) / r.breath_period))

    def scene_key(self, t_ms: int, states: Sequence[RoleState], subtitle: str | None) -> tuple[Any, ...]:
        """Everything draw() reads for this frame: equal keys draw equal pictures."""
        by_role = {s.role: s for s in states}
        looks = []
        for look in self._looks:
            st = by_role.get(look.role)
            looks.append((
                st is not None and st.speaking, st.viseme if st else "sil",
                self.breath_offset(look.role, t_ms), self.eyes_closed(look.role, t_ms),
                *(_face_of(st) if st is not None else _NEUTRAL),
            ))
        return (self._scene.size, self._background, subtitle or None, tuple(looks))

    def draw(self, t_ms: int, states: Sequence[RoleState], subtitle: str | None) -> torch.Tensor:
        """Renders the frame at t_ms as a uint8 HxWx3 tensor on the drawer's device."""
        scene = self._scene  # one read, so a concurrent set_resolution cannot tear this frame
        by_role = self._by_role(states)
        base = scene.base
        # numpy array on CPU, tensor on CUDA (or with tensors=True): both slice-assign the same way.
        out: Any = base.copy() if isinstance(base, np.ndarray) else base.clone()
        self._compose(scene, out, t_ms, by_role, subtitle)
        return torch.from_numpy(out) if isinstance(out, np.ndarray) else out

    def draw_batch(self, frames: Sequence[Frame]) -> list[torch.Tensor]:
        """The pictures ``draw`` gives, for several frames at once: views of one stacked tensor
        (one allocation and one copy of the backdrop for the batch)."""
        scene = self._scene
        checked = [(t_ms, self._by_role(states), subtitle) for t_ms, states, subtitle in frames]
        base = scene.base
        out: Any
        if isinstance(base, np.ndarray):
            out = np.empty((len(checked), *base.shape), np.uint8)
            out[:] = base
        else:
            out = base.unsqueeze(0).repeat(len(checked), 1, 1, 1)
        for k, (t_ms, by_role, subtitle) in enumerate(checked):
            self._compose(scene, out[k], t_ms, by_role, subtitle)
        return list((torch.from_numpy(out) if isinstance(out, np.ndarray) else out).unbind(0))

    @property
    def frame_batch(self) -> int:
        """Frames best drawn and encoded at once: 8 on a GPU; 1 in numpy, where each picture is
        encoded while it is still in the cache (and a batch's fresh memory costs page faults)."""
        return 1 if isinstance(self._scene.base, np.ndarray) else 8

    def _by_role(self, states: Sequence[RoleState]) -> dict[str, RoleState]:
        """The states of a frame by role, each checked."""
        by_role: dict[str, RoleState] = {}
        for given in states:
            if given.role not in self._index:
                raise ValueError(f"unknown role {given.role!r}")
            if given.viseme not in MOUTHS:
                raise ValueError(f"unknown viseme {given.viseme!r}; one of {VISEMES}")
            if given.expression not in EXPRESSIONS or given.previous not in EXPRESSIONS:
                raise ValueError(f"unknown expression {given.expression!r}; one of {EXPRESSIONS}")
            by_role[given.role] = given
        return by_role

    def _compose(self, scene: _Scene, out: Any, t_ms: int, by_role: dict[str, RoleState],
                 subtitle: str | None) -> None:
        """Pastes every role's sprites (and the subtitle) onto ``out``, a copy of the backdrop."""
        amp = scene.amp
        for i, look in enumerate(self._looks):
            st = by_role.get(look.role)
            lit = st is not None and st.speaking
            d = self.breath_offset(look.role, t_ms)
            (tx0, ty0, tx1, ty1), (fx, fy, fw, fh), (mx, my, mw, mh), tag = scene.slots[i]
            if lit:
                out[tag[1]:tag[3], tag[0]:tag[2]] = scene.tags[i][1]
            expression, previous, blend, gaze, nod = _face_of(st) if st is not None else _NEUTRAL
            closed = self.eyes_closed(look.role, t_ms)
            art = scene.art[i]
            if art is not None:
                art.draw(out, lit, d, expression, previous, blend, closed, st.viseme if st else "sil",
                         round(gaze / GAZE_STEPS * scene.turn), round(nod * scene.nod), gaze)
                continue
            out[ty0:ty1, tx0:tx1] = scene.tiles[i][lit][d + amp]
            # The head turns and nods: its features move with it (the mouth never moves by itself).
            face = scene.face(i, expression, gaze, nod, closed)
            if blend < 1.0:  # easing from the expression before
                face = _mixed(scene.face(i, previous, gaze, nod, closed), face, blend)
            mask = scene.masks[i]
            assert mask is not None
            _paste(out[fy + d:fy + d + fh, fx:fx + fw], face, mask)
            dx, dy = round(gaze / GAZE_STEPS * scene.turn), d + round(nod * scene.nod)
            out[my + dy:my + dy + mh, mx + dx:mx + dx + mw] = scene.mouths[i][st.viseme if st else "sil"]
        if subtitle:
            band = scene.subtitle(subtitle)
            out[scene.size[1] - band.shape[0]:] = band

    def encode(self, picture: torch.Tensor | np.ndarray, quality: int) -> bytes:
        """A drawn frame as JPEG (by the encoder ``encode_batch`` uses)."""
        return self.encode_batch([picture], quality)[0]

    def encode_batch(self, pictures: Sequence[Pixels], quality: int) -> list[bytes]:
        """Drawn frames as JPEGs: CUDA pictures in one nvJPEG call where torchvision has one,
        anything else with simplejpeg."""
        gpu = self._gpu_jpeg
        on_gpu = [p for p in pictures if isinstance(p, torch.Tensor) and p.device.type == "cuda"]
        if gpu is not None and on_gpu and len(on_gpu) == len(pictures):
            try:
                encoded = gpu([p.permute(2, 0, 1) for p in on_gpu], quality)
            except RuntimeError as err:  # a GPU that cannot: the CPU still can, and says so once
                log.warning("JPEG on the GPU failed (%s); encoding on the CPU from now on", err)
                self._gpu_jpeg = None
            else:
                data = torch.cat(encoded).cpu().numpy().tobytes()  # one copy back for the batch
                ends = np.cumsum([e.numel() for e in encoded]).tolist()
                return [data[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        return [encode_jpeg(p, quality) for p in pictures]

    def memory_fraction(self) -> float | None:
        """The share of the GPU's memory torch holds, when drawing on CUDA."""
        if self._device.type != "cuda":
            return None
        total = torch.cuda.get_device_properties(self._device).total_memory
        return float(torch.cuda.memory_reserved(self._device)) / total if total else None


def gpu_jpeg(device: torch.device) -> GpuJpeg | None:
    """torchvision's batched JPEG encoder when it encodes on ``device`` (CUDA, with nvJPEG);
    None, with the reason logged, where torchvision is missing or cannot."""
    try:
        # Imported here: no install extra needs torchvision (PyPI's does not go with every torch).
        from torchvision.io import encode_jpeg as encode_on_device
    except (ImportError, RuntimeError) as err:  # RuntimeError: one built for another torch
        log.info("JPEG on the CPU (simplejpeg): torchvision cannot be imported (%s)", err)
        return None
    if device.type != "cuda":
        return None
    try:  # a CPU-only torchvision, or one from before batched CUDA encoding (0.19), fails here
        encode_on_device([torch.zeros((3, 16, 16), dtype=torch.uint8, device=device)], 80)
    except (RuntimeError, TypeError) as err:
        log.info("JPEG on the CPU (simplejpeg): torchvision cannot encode on %s (%s)", device, err)
        return None
    return cast(GpuJpeg, encode_on_device)


def encode_jpeg(frame: torch.Tensor | np.ndarray, quality: int = 80) -> bytes:
    """Encodes a uint8 HxWx3 RGB frame as baseline 4:2:0 JPEG (libjpeg-turbo via simplejpeg)."""
    arr = frame.detach().cpu().numpy() if isinstance(frame, torch.Tensor) else frame
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"need uint8 HxWx3, got {arr.dtype} {arr.shape}")
    # simplejpeg hands the array straight to libjpeg-turbo: about 30% faster than Pillow at 720p,
    # which matters because the JPEG is most of a frame's cost.
    return bytes(simplejpeg.encode_jpeg(
        np.ascontiguousarray(arr), quality=quality, colorspace="RGB", colorsubsampling="420", fastdct=True,
    ))
