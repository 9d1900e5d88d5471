"""Bring-your-own avatar art: the folder format is checked file by file, every viseme finds a
mouth, an image-art role is drawn the same on every path, and a run's art is pinned by digest."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from actors.backends.avatar import MOUTH_FALLBACK, MOUTHS, AvatarError, check, digest, make_sample
from actors.backends.protocols import RoleLook, RoleState
from actors.backends.render_torch import StageRenderer
from actors.visemes import VISEMES
from app.shows import load_show
from events.errors import StoreError
from tests.test_cli import one_line_error, troupe

SAMPLE = Path(__file__).resolve().parents[2] / "app" / "shows" / "avatars" / "pip"


def test_the_sample_set_is_what_its_code_draws_and_passes_the_check(tmp_path: Path) -> None:
    avatar = check(SAMPLE)
    assert avatar.size == (400, 640) and {"rest", "A", "I", "U", "E", "O"} == set(avatar.mouths)
    drawn = check(make_sample(tmp_path / "pip"))  # the committed files come from make_sample
    assert drawn.size == avatar.size and set(drawn.mouths) == set(avatar.mouths)
    assert set(drawn.expressions) == set(avatar.expressions) == {"happy", "sad", "angry", "surprised", "thinking"}
    assert "pupils" in avatar.layers and avatar.pupil_travel == drawn.pupil_travel == 7
    assert len(digest(SAMPLE)) == 64


def test_every_viseme_finds_a_mouth_even_in_the_smallest_set(tmp_path: Path) -> None:
    assert set(MOUTH_FALLBACK) == set(VISEMES)
    assert all(set(chain) <= set(MOUTHS) and chain[-1] in ("rest", "A") for chain in MOUTH_FALLBACK.values())
    folder = _copy(tmp_path)
    manifest = folder / "avatar.toml"
    text = manifest.read_text()
    for m in ("I", "U", "E", "O"):
        text = text.replace(f'{m} = "mouth_{m.lower()}.png"\n', "")
    manifest.write_text(text)
    two = check(folder)
    assert set(two.mouths) == {"rest", "A"}
    assert two.mouth("oh") is two.mouths["A"] and two.mouth("PP") is two.mouths["rest"]
    sample = check(SAMPLE)
    assert sample.mouth("ou") is sample.mouths["U"] and sample.mouth("CH") is sample.mouths["U"]


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "art"
    shutil.copytree(SAMPLE, folder)
    return folder


@pytest.mark.parametrize(("breaks", "needle"), [
    (lambda f: (f / "avatar.toml").unlink(), "avatar.toml: cannot read the avatar manifest"),
    (lambda f: (f / "avatar.toml").write_text("size = [400,"), "avatar.toml: not a valid TOML manifest"),
    (lambda f: (f / "head.png").unlink(), "head.png: layers.head does not exist"),
    (lambda f: Image.new("RGBA", (200, 320)).save(f / "eyes_open.png"),
     "eyes_open.png: layers.eyes_open is 200x320, the manifest says 400x640"),
    (lambda f: (f / "mouth_a.png").write_bytes(b"not a png"), "mouth_a.png: mouths.A is not a readable image"),
    (lambda f: Image.new("RGB", (400, 640)).save(f / "sad.png", format="JPEG"), "sad.png: expressions.sad is JPEG, not a PNG"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text().replace('rest = "mouth_rest.png"\n', "")),
     "mouths.rest is missing"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text() + 'smug = "happy.png"\n'),
     "unknown expression 'smug'"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text().replace("head_anchor = [200, 330]",
                                                                                      "head_anchor = [900, 330]")),
     "head_anchor [900, 330] is outside the 400x640 picture"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text().replace("pupils =", "pupil =")),
     "unknown layer 'pupil'"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text().replace("pupil_travel = 7",
                                                                                      "pupil_travel = 90")),
     "pupil_travel must be a whole number of pixels from 0 to 50, not 90"),
    (lambda f: (f / "avatar.toml").write_text((f / "avatar.toml").read_text().replace("pupil_travel = 7",
                                                                                      "head_tilt = 30")),
     "head_tilt must be a number of degrees from 0 to 15, not 30"),
])
def test_a_bad_folder_is_one_line_naming_the_file(tmp_path: Path, breaks: object, needle: str) -> None:
    folder = _copy(tmp_path)
    breaks(folder)  # type: ignore[operator]
    with pytest.raises(AvatarError) as caught:
        check(folder)
    message = str(caught.value)
    assert needle in message and "\n" not in message and str(folder) in message


def test_troupe_up_with_a_bad_avatar_folder_says_which_file_and_starts_nothing(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "mouth_rest.png").unlink()
    show = tmp_path / "show.toml"
    show.write_text('[[roles]]\nid = "pip"\nlook = { avatar = "art" }\n')
    result = troupe("--state-dir", str(tmp_path / "state"), "up", "--show", str(show), "--duration", "5")
    assert result.returncode == 2
    line = one_line_error(result)
    assert "role pip: look.avatar:" in line and "mouth_rest.png: mouths.rest does not exist" in line
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_an_image_art_role_draws_the_same_on_every_path_and_acts(tmp_path: Path) -> None:
    looks = [RoleLook("host", "Mika", "#e76f51", "round"), RoleLook("pip", "Pip", "#7a5cc8", avatar=str(SAMPLE))]
    numpy_stage = StageRenderer(looks, "360p", seed=3)
    tensor_stage = StageRenderer(looks, "360p", seed=3, tensors=True)
    frames = [
        [RoleState("host", "sil", False, gaze=1.0), RoleState("pip", "aa", True, "happy")],
        [RoleState("host", "sil", False), RoleState("pip", "oh", True, "sad", "happy", 0.5, gaze=-1.0, nod=0.5)],
        [RoleState("host", "aa", True), RoleState("pip", "sil", False, "thinking", gaze=-0.5)],
    ]
    pictures = [np.asarray(numpy_stage.draw(100 + 40 * k, s, "art")) for k, s in enumerate(frames)]
    for k, states in enumerate(frames):
        assert (np.asarray(tensor_stage.draw(100 + 40 * k, states, "art")) == pictures[k]).all()
    # The mouth moves with the visemes, the expression shows, the head turns: different pictures.
    assert not (pictures[0] == pictures[1]).all() and not (pictures[1] == pictures[2]).all()
    same = [np.asarray(numpy_stage.draw(100, frames[0], "art")) for _ in range(2)]
    assert (same[0] == same[1]).all() and (same[0] == pictures[0]).all()


def test_the_pupils_look_aside_inside_the_eyes() -> None:
    """A pupils layer moves with the gaze, as far as pupil_travel says, and never leaves the whites."""
    from actors.backends.avatar_stage import ArtRole
    from actors.backends.protocols import GAZE_STEPS

    avatar = dataclasses.replace(check(SAMPLE), head_tilt=0.0)  # the eyes alone (the lean: below)
    bg = Image.new("RGBA", (640, 360), (20, 20, 40, 255))
    art = ArtRole(avatar, bg, 320, 25, 290, 320.0, 2, lambda a: a)
    full = art.look(GAZE_STEPS)
    assert full == round(avatar.pupil_travel * art.scale) > 0 and art.look(-GAZE_STEPS) == -full

    def pupil_x(gaze: int) -> float:  # the pupils' colour (blue over red; the outlines are brown)
        rgb = art.head("neutral", False, "sil", gaze).rgb.astype(int)
        ys, xs = np.nonzero(rgb[..., 2] > rgb[..., 0] + 15)
        return float(xs.mean())

    left, middle, right = pupil_x(-GAZE_STEPS), pupil_x(0), pupil_x(GAZE_STEPS)
    assert left < middle < right and abs((right - left) - 2 * full) <= 1.5
    # Only the eyes change: the head, mouth and outline are where they were.
    hx0, hy0, hx1, hy1 = art.head_box
    eyes = np.array(art.layers["eyes_open"])[hy0:hy1, hx0:hx1, 3] > 0
    turned, ahead = art.head("neutral", False, "sil", GAZE_STEPS).rgb, art.head("neutral", False, "sil", 0).rgb
    changed = (turned != ahead).any(axis=2)
    assert changed.any() and not (changed & ~eyes).any()
    # Closed eyes have no pupils to move.
    assert (art.head("happy", True, "aa", GAZE_STEPS).rgb == art.head("happy", True, "aa", -GAZE_STEPS).rgb).all()


def test_the_head_leans_about_its_anchor_toward_where_it_looks() -> None:
    from actors.backends.avatar_stage import ArtRole
    from actors.backends.protocols import GAZE_STEPS

    avatar = check(SAMPLE)
    assert avatar.head_tilt == 4.0 and avatar.head_anchor == (200, 330)  # the chin
    bg = Image.new("RGBA", (1280, 720), (20, 20, 40, 255))
    art = ArtRole(avatar, bg, 640, 50, 580, 426.0, 3, lambda a: a)
    ay = round(art.anchor[1] - art.head_box[1])

    def centre(gaze: int) -> tuple[float, float]:  # of its opaque pixels
        ys, xs = np.nonzero(art.head("neutral", False, "sil", gaze).solid[..., 0])
        return float(xs.mean()), float(ys.mean())

    # It leans toward the look by 4 degrees about the chin: turning every pixel, it turns their
    # centre, which lies h rows above the chin, h sin 4 degrees sideways (about another point, as
    # far as that point is below it).
    (x0, y0), (right, _), (left, _) = centre(0), centre(GAZE_STEPS), centre(-GAZE_STEPS)
    lean = (ay - y0) * math.sin(math.radians(4.0))
    assert lean > 5 and abs((right - x0) - lean) < 0.15 * lean and abs((x0 - left) - lean) < 0.15 * lean
    # Every lean fits the head's box: nothing cut off at its edges.
    for gaze in range(-GAZE_STEPS, GAZE_STEPS + 1):
        solid = art.head("surprised", False, "aa", gaze).solid[..., 0]
        assert not (solid[0].any() or solid[-1].any() or solid[:, 0].any() or solid[:, -1].any())


def test_a_head_that_does_not_lean(tmp_path: Path) -> None:
    from actors.backends.avatar_stage import ArtRole
    from actors.backends.protocols import GAZE_STEPS

    folder = _copy(tmp_path)
    manifest = folder / "avatar.toml"
    manifest.write_text(manifest.read_text().replace("pupil_travel = 7", "pupil_travel = 0\nhead_tilt = 0"))
    art = ArtRole(check(folder), Image.new("RGBA", (640, 360)), 320, 25, 290, 320.0, 2, lambda a: a)
    assert (art.head("neutral", False, "sil", GAZE_STEPS).rgb == art.head("neutral", False, "sil", 0).rgb).all()


def test_an_avatar_without_pupils_keeps_its_eyes_still(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    manifest = folder / "avatar.toml"
    manifest.write_text(manifest.read_text().replace('pupils = "pupils.png"\n', "").replace("pupil_travel = 7\n", ""))
    avatar = check(folder)
    assert "pupils" not in avatar.layers and avatar.pupil_travel == 0


def test_troupe_avatar_writes_the_sample_and_draws_its_sheet(tmp_path: Path) -> None:
    sheet = tmp_path / "sheet.png"
    result = troupe("avatar", str(tmp_path / "pip"), "--sample", "--sheet", str(sheet))
    assert result.returncode == 0, result.stderr
    assert "400x640" in result.stdout and "pupils moving 7 px" in result.stdout
    assert digest(tmp_path / "pip") in result.stdout
    with Image.open(sheet) as img:  # 4 layers, the pupils, 6 mouths, 5 expressions: 16 in rows of 5
        assert img.format == "PNG" and img.size == (5 * 200, 4 * (288 + 20 + 200 // 7))  # 400x640 at 180 wide
    bad = troupe("avatar", str(tmp_path / "pip"), "--sheet", str(tmp_path / "no" / "such" / "sheet.png"))
    assert bad.returncode == 2 and "cannot write the sheet" in one_line_error(bad)


def test_redrawing_refuses_when_the_art_changed_since_the_run(tmp_path: Path) -> None:
    from actors.render import Redrawer
    from infra.settings import load_settings
    from tests.showkit import demo_run

    folder = _copy(tmp_path)
    show = load_show()
    roles = tuple(dataclasses.replace(r, avatar=str(folder), avatar_digest=digest(folder)) if r.id == "rex" else r
                  for r in show.roles)
    run = dataclasses.replace(demo_run("r1", resolution="360p"), show=dataclasses.replace(show, roles=roles).to_dict())
    Redrawer(run, load_settings(environ={})).prepare("360p")  # the same art: drawn
    Image.new("RGBA", (400, 640), (255, 0, 0, 255)).save(folder / "happy.png")
    with pytest.raises(StoreError, match=r"role rex's avatar art in .* changed since the run"):
        Redrawer(run, load_settings(environ={})).prepare("360p")
