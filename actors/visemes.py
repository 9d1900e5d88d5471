"""IPA phoneme label → viseme, on the 15-viseme Oculus/Meta convention.

Visemes: ``sil PP FF TH DD kk CH SS nn RR aa E ih oh ou``.

| viseme | mouth shape          | IPA (English and Mandarin; espeak labels)                      |
|--------|----------------------|----------------------------------------------------------------|
| sil    | closed, at rest      | pause ``_``, empty or blank label, language marks ``(en)``     |
| PP     | lips pressed         | p b m ɸ β ɓ                                                    |
| FF     | lip on teeth         | f v ɱ ʋ                                                        |
| TH     | tongue between teeth | θ ð                                                            |
| DD     | tongue on ridge      | t d ɾ ɗ ʈ ɖ                                                    |
| kk     | back, jaw ajar       | k g ɡ q x χ ɣ h ɦ ʔ ŋ c ɟ ɢ ɴ ħ ʕ                              |
| CH     | lips forward         | tʃ dʒ ʃ ʒ tɕ dʑ ɕ ʑ ʈʂ ɖʐ ʂ ʐ ç; espeak cmn ``ts.`` ``s.`` ``z.`` |
| SS     | teeth together       | s z ts dz                                                      |
| nn     | tongue up, jaw ajar  | n ɲ ɳ l ɫ ɭ ʎ ɬ ʟ                                              |
| RR     | r-coloured           | r ɹ ɻ ʁ ʀ ɚ ɝ ɜ; Mandarin ər (儿, 二)                           |
| aa     | open                 | a ɑ æ ɐ ʌ ɒ; aɪ aʊ; Mandarin ia ua iau uai                     |
| E      | mid, unrounded       | e ɛ ə ɘ ɤ; eɪ; Mandarin ie ye ue uei; espeak cmn ``o-`` (ɤ)     |
| ih     | spread, close        | i ɪ ɨ ɯ j; espeak cmn ``i.`` (apical vowel)                    |
| oh     | rounded, mid         | o ɔ ø œ ɵ; oʊ ɔɪ; Mandarin uo iou                              |
| ou     | rounded, close       | u ʊ ʉ w y ʏ ɥ                                                  |

Choices beyond the Oculus reference: h/ʔ take ``kk`` (a neutral ajar jaw) because the
reference set has no glottal viseme; the rounded front vowels y/ɥ (Mandarin ü) take
``ou`` because the visible feature is lip rounding, not tongue position; ɤ and ə take
``E`` (unrounded mid); ɜ takes ``RR`` because en-us espeak uses it for the r-coloured
vowel of "bird"; Mandarin ʐ (r-) takes ``CH`` with the rest of the retroflex series.
Diphthongs and Mandarin finals with a glide map by their nucleus.

Matching strips stress (ˈˌ), length (ːˑ), tone digits, tone letters (˥˦˧˨˩) and
combining diacritics, then takes the longest table key that prefixes the label, so
aspirates (``kh``, ``tɕʰ``), syllabics (``n̩``) and r-coloured vowels (``ɔːɹ``) fall out
naturally. A label nothing matches gets ``DD`` if it is a letter (a neutral, slightly
open consonant shape) and ``sil`` otherwise; it never raises.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Literal

from events.viseme import VisemeCut, VisemeMark, VisemeTrack

VISEMES = ("sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR", "aa", "E", "ih", "oh", "ou")

# Space-separated keys per viseme; keys are matched as label prefixes after stripping.
_GROUPS: dict[str, str] = {
    "sil": "_",
    "PP": "p b m ɸ β ɓ ʙ",
    "FF": "f v ɱ ʋ ⱱ",
    "TH": "θ ð",
    "DD": "t d ɾ ɗ ʈ ɖ ɽ ʘ ǀ ǃ ǂ ǁ",
    "kk": "k g ɡ q x χ ɣ h ɦ ʔ ŋ c ɟ ɠ ʛ ʄ ɢ ɴ ɰ ħ ʕ ʜ ʢ ʡ",
    # ts. dz. s. z. are the espeak cmn mnemonics for the retroflex series.
    "CH": "tʃ dʒ ʃ ʒ tɕ dʑ ɕ ʑ ʈʂ ɖʐ ʂ ʐ ç ʝ ɧ ts. dz. s. z.",
    "SS": "s z ts dz",
    "nn": "n ɲ ɳ l ɫ ɭ ʎ ɬ ɮ ɺ ʟ",
    "RR": "r ɹ ɻ ʁ ʀ ɚ ɝ ɜ ər",
    "aa": "a ɑ æ ɐ ʌ ɒ ɶ ia iɑ ua uɑ ya yæ iæ",
    "E": "e ɛ ə ɘ ɤ o- ie iɛ ye yɛ yə ue uə uɛ ɪə",
    "ih": "i ɪ ɨ ɯ j i.",
    "oh": "o ɔ ø œ ɵ ɞ uo io iou ɪo",
    "ou": "u ʊ ʉ w ʍ y ʏ ɥ",
}

TABLE: dict[str, str] = {key: viseme for viseme, keys in _GROUPS.items() for key in keys.split()}
_LONGEST_KEY = max(map(len, TABLE))
# Marks that carry no mouth-shape information: stress, length, tone letters, tie bars.
_STRIP = dict.fromkeys(map(ord, "ˈˌːˑ˥˦˧˨˩'0123456789\u0361\u035c"))


def _bare(ipa: str, form: Literal["NFC", "NFD"]) -> str:
    text = unicodedata.normalize(form, ipa.strip().lower()).translate(_STRIP)
    # Combining marks (syllabic, dental, nasal, ...) refine a sound but keep its shape.
    return "".join(ch for ch in text if not unicodedata.combining(ch))


def _longest_prefix(label: str) -> str | None:
    for size in range(min(len(label), _LONGEST_KEY), 0, -1):
        viseme = TABLE.get(label[:size])
        if viseme is not None:
            return viseme
    return None


def viseme_for(ipa: str) -> str:
    """Map one espeak IPA phoneme label (English or Mandarin) to a member of VISEMES."""
    # NFC first so letters like ç keep their identity; NFD then reduces é or ã to e, a.
    composed, decomposed = _bare(ipa, "NFC"), _bare(ipa, "NFD")
    if not composed or composed.startswith("("):
        return "sil"  # pause, blank label, or a language-switch marker like "(en)"
    viseme = _longest_prefix(composed) or _longest_prefix(decomposed)
    if viseme is not None:
        return viseme
    # Every IPA vowel letter is tabled, so an unknown letter is taken as a consonant.
    return "DD" if composed[0].isalpha() else "sil"


def is_silent(viseme: str) -> bool:
    """True for the rest viseme (mouth closed, nothing spoken)."""
    return viseme == "sil"


def apply_cuts(tracks: Iterable[VisemeTrack], cuts: Iterable[VisemeCut]) -> dict[str, VisemeTrack]:
    """Recorded tracks by id, as they stand after the recorded interruptions (what was drawn)."""
    at = {c.utterance: c.at_ms for c in cuts}
    out = {}
    for track in tracks:
        kept = cut_track(track, at[track.utterance]) if track.utterance in at else track
        if kept is not None:
            out[track.id] = kept
    return out


def as_drawn(track_id: str | None, end_ms: int | None, whole: Mapping[str, VisemeTrack],
             cut: Mapping[str, VisemeTrack]) -> VisemeTrack | None:
    """The track a recorded frame drew (``FrameRendered.track`` and ``track_end_ms``): the recorded
    track as it stood when the frame was drawn, cut where the frame says it ended; a cut that came
    after the frame was drawn is not applied.  A frame that does not say (``end_ms`` None, recorded
    before frames did) gets the track as the recorded cuts leave it (``cut``: ``apply_cuts``)."""
    if track_id is None:
        return None
    if end_ms is None:
        return cut.get(track_id)
    track = whole.get(track_id)
    if track is None or end_ms >= track.end_ms:
        return track
    return cut_track(track, end_ms)


def cut_track(track: VisemeTrack, at_ms: int) -> VisemeTrack | None:
    """A placed track as it stands after its utterance was cut at ``at_ms`` (None: nothing left)."""
    if track.start_ms >= at_ms:
        return None
    if track.end_ms <= at_ms:
        return track
    marks = tuple(
        VisemeMark(m.viseme, m.start_ms, min(m.end_ms, at_ms)) for m in track.visemes if m.start_ms < at_ms
    )
    return dataclasses.replace(track, end_ms=at_ms, visemes=marks, last=True)
