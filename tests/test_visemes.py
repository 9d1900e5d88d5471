"""IPA → viseme mapping over espeak's English and Mandarin labels."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.visemes import TABLE, VISEMES, is_silent, viseme_for


def test_every_viseme_is_reachable() -> None:
    assert set(TABLE.values()) == set(VISEMES)
    assert len(VISEMES) == 15


def cases(spec: str) -> list[tuple[str, str]]:
    """Parse "ipa:viseme ..." into parametrize cases."""
    pairs = [item.rsplit(":", 1) for item in spec.split()]
    return [(ipa, viseme) for ipa, viseme in pairs]


# Labels as espeak en-us emits them, plus precomposed letters (NFC keeps ç, NFD reduces é).
ENGLISH = cases(
    "p:PP b:PP m:PP f:FF v:FF θ:TH ð:TH t:DD d:DD ɾ:DD k:kk ɡ:kk "
    "g:kk ŋ:kk h:kk tʃ:CH dʒ:CH ʃ:CH ʒ:CH s:SS z:SS n:nn l:nn n̩:nn əl:E "
    "ɹ:RR ɚ:RR ˈɜː:RR ɝ:RR ˈaɪ:aa ˌaʊ:aa ˈæ:aa ʌ:aa ˈɑː:aa ɐ:aa ˈeɪ:E ˈɛ:E "
    "ə:E ˈɛɹ:E iː:ih ˈɪ:ih j:ih ˈɪɹ:ih ˈoʊ:oh ˈɔɪ:oh ˈɔːɹ:oh ˈuː:ou ʊ:ou "
    "w:ou ˈʊɹ:ou ç:CH é:E"
)
# Labels exactly as the espeak cmn voice emits them.
MANDARIN_ESPEAK = cases(
    "χ:kk kh:kk ph:PP th:DD tɕ:CH tɕh:CH ɕ:CH ʐ:CH ts.:CH "
    "ts.h:CH s.:CH ts:SS tsh:SS ˈi.:ih ˈi̪:ih ˈy:ou ˈɑu:aa ua:aa ˈiɑ:aa "
    "ˈyæ:aa ˈiɛ:E ˈyɛ:E ˈyə:E ˈər:RR ˈiou:oh ˈuo:oh ˈonɡ:oh ˈo-:E"
)
# Textbook IPA with tone letters, tone digits and aspiration marks.
MANDARIN_IPA = cases("ʈʂʰ:CH ʈʂ:CH ʂ:CH tsʰ:SS tɕʰ:CH a˥˩:aa ma3:PP ɤ˧˥:E ɥ:ou y˨˩˦:ou ɻ:RR")


@pytest.mark.parametrize(("ipa", "viseme"), ENGLISH)
def test_english_labels(ipa: str, viseme: str) -> None:
    assert viseme_for(ipa) == viseme


@pytest.mark.parametrize(("ipa", "viseme"), MANDARIN_ESPEAK + MANDARIN_IPA)
def test_mandarin_labels(ipa: str, viseme: str) -> None:
    assert viseme_for(ipa) == viseme


@pytest.mark.parametrize("ipa", ["_", "", " ", "  ", "(en)", "(cmn)", "ˈ", "ː", "5"])
def test_silence_labels(ipa: str) -> None:
    assert viseme_for(ipa) == "sil"
    assert is_silent(viseme_for(ipa))


@pytest.mark.parametrize("ipa", ["Q?!", "中", "😀", "#", "\x00", "ʘʘʘ", "xyz123"])
def test_garbage_maps_to_a_viseme(ipa: str) -> None:
    assert viseme_for(ipa) in VISEMES


def test_is_silent() -> None:
    assert [v for v in VISEMES if is_silent(v)] == ["sil"]


@given(st.text())
def test_any_string_maps_to_a_viseme(ipa: str) -> None:
    assert viseme_for(ipa) in VISEMES
