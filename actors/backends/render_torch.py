"""Stage renderer: Pillow pre-renders sprites per resolution, each frame is a few array copies.

On CUDA the pictures stay on the GPU until they are JPEG-encoded, there too where
torchvision's nvJPEG encoder works (else on the CPU with simplejpeg).
"""

from __future__ import annotations

import logging
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
import simplejpeg
import torch
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from actors.backends.protocols import RESOLUTIONS, RoleLook, RoleState, StageDrawer
from actors.backends.stage_art import (
    DETAILS,
    EYE_BOX,
    MOUTH_BOX,
    MOUTHS,
    SILHOUETTES,
    VISEMES,
    Font,
    draw_backdrop,
    draw_eyes,
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


class _Scene:
    """Every cached tensor for one resolution; replaced whole, so draw() never sees half a rebuild."""

    __slots__ = ("amp", "band", "base", "device", "eyes", "font", "mouths", "size", "slots", "sub_cache",
                 "tags", "tensors", "tiles")

    def __init__(self, looks: Sequence[RoleLook], size: tuple[int, int], seed: int, font_path: str | None,
                 device: torch.device, tensors: bool = False) -> None:
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
        bg = draw_backdrop(w, h, desk_y, band_y, seed)
        tag_font = load_font(font_path, round(0.03 * h))
        self.font = load_font(font_path, round(0.042 * h))
        self.tiles: list[list[list[Pixels]]] = []  # [role][lit][bob + amp]
        self.tags: list[list[Pixels]] = []  # [role][lit]
        self.eyes: list[Pixels] = []  # closed eyes per role
        self.mouths: list[dict[str, Pixels]] = []  # [role][viseme]
        self.slots: list[tuple[Box, Box, Box, Box]] = []  # tile, eyes (x, y, w, h), mouth (x, y, w, h), tag
        for i, look in enumerate(looks):
            cx = round((i + 0.5) * slot_w)
            tx0, ty0 = cx - bw // 2 - gp, desk_y - bh - self.amp - gp
            tile_box = (tx0, ty0, tx0 + bw + 2 * gp, desk_y)
            tag_w = min(round(slot_w * 0.92), round(tag_font.getlength(look.name)) + tag_h * 2)
            tag_box = (cx - tag_w // 2, desk_y + round(0.015 * h), cx + tag_w - tag_w // 2,
                       desk_y + round(0.015 * h) + tag_h)
            self._role(look, bg, tile_box, tag_box, bw, bh, gp, tag_font)
        self.base = self._tensor(bg)
        self.band = bg.crop((0, band_y, w, h))
        self.sub_cache: OrderedDict[str, Pixels] = OrderedDict()

    def _tensor(self, img: Image.Image) -> Pixels:
        """Pillow image -> contiguous uint8 HxWx3 pixels: numpy on CPU (unless ``tensors``), else a
        tensor on the device."""
        arr = np.array(img.convert("RGB"))
        # On CPU, numpy copies stay on the calling thread; torch copies this size fan out to its
        # OpenMP pool, whose spin-waiting workers then starve x264's threads on a 2-core box.
        return torch.from_numpy(arr).to(self.device) if self.tensors else arr

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

        ebox, mbox = box(EYE_BOX), box(MOUTH_BOX)
        bare = canvas.copy()  # face without eyes or mouth; sprites start from crops of it

        def sprite(b: Box, paint: Callable[[Image.Image], None]) -> Image.Image:
            # Box-filter reduce of an even-aligned crop equals the same region of a full reduce.
            crop = bare.crop((b[0] * ss, b[1] * ss, b[2] * ss, b[3] * ss))
            paint(crop)
            return crop

        ex = sprite(ebox, lambda im: draw_eyes(im, True, pal["dark"], lw)).reduce(ss)
        canvas.paste(sprite(ebox, lambda im: draw_eyes(im, False, pal["dark"], lw)), (ebox[0] * ss, ebox[1] * ss))
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
        self.eyes.append(self._tensor(ex))
        self.mouths.append({v: self._tensor(im) for v, im in mouths.items()})
        ox, oy = tile_box[0], tile_box[1] + self.amp
        self.slots.append((tile_box, (ox + ebox[0], oy + ebox[1], ex.width, ex.height),
                           (ox + mbox[0], oy + mbox[1], mbox[2] - mbox[0], mbox[3] - mbox[1]), tag_box))
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
        self._scene = self._build(resolution)
        self._gpu_jpeg = gpu_jpeg(self._device) if self._device.type == "cuda" else None

    def _build(self, resolution: str) -> _Scene:
        """Renders every cached sprite for one resolution."""
        if resolution not in RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}; one of {sorted(RESOLUTIONS)}")
        size = RESOLUTIONS[resolution]
        return _Scene(self._looks, size, self._seed, self._font_path, self._device, self._tensors)

    def set_resolution(self, resolution: str) -> None:
        """Switches resolution; the next draw() uses the rebuilt caches."""
        if RESOLUTIONS.get(resolution) != self._scene.size:
            self._scene = self._build(resolution)

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
            ))
        return (self._scene.size, subtitle or None, tuple(looks))

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
            (tx0, ty0, tx1, ty1), (ex, ey, ew, eh), (mx, my, mw, mh), tag = scene.slots[i]
            out[ty0:ty1, tx0:tx1] = scene.tiles[i][lit][d + amp]
            if lit:
                out[tag[1]:tag[3], tag[0]:tag[2]] = scene.tags[i][1]
            if self.eyes_closed(look.role, t_ms):
                out[ey + d:ey + d + eh, ex:ex + ew] = scene.eyes[i]
            out[my + d:my + d + mh, mx:mx + mw] = scene.mouths[i][st.viseme if st else "sil"]
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
