"""Real speech through the libespeak-ng C API (ctypes), with IPA phoneme timings.

libespeak-ng keeps all synthesis state in process globals and is not thread-safe,
so each loaded library file gets exactly one ``_Engine`` (initialised once) and every
synthesis runs under that engine's lock. This module-level registry is the one piece
of global mutable state, and exists only because the C library is global.

Quirks of libespeak-ng 1.52 worth knowing (measured):
- Output is not bit-reproducible: the pitch "flutter" index is a C function static
  that carries over between calls, so the same text gives slightly different PCM
  (a few samples of length) depending on what was spoken before.
- Pauses and Mandarin tone marks arrive as phoneme events with an empty label; they
  are reported here as the pause phoneme ``"_"`` (zero-length ones are dropped) so a
  lip-sync consumer closes the mouth during pauses instead of holding the last shape.
- Language-switch markers such as ``"(en)"`` arrive as phoneme labels; they are dropped.
- The ``cmn`` voice emits ASCII mnemonics where it lacks IPA names: ``ts.`` (ʈʂ),
  ``ts.h`` (ʈʂʰ), ``s.`` (ʂ), ``i.`` (retroflex apical vowel), ``kh``/``ph``/``th``/
  ``tsh``/``tɕh`` (aspirates), ``o-`` (ɤ). Tones carry no label at all.
- The ``cmn`` dictionary cannot voice the "iong" final (穷, 雄, 熊): espeak switches to
  English and spells the pinyin with its tone digit, e.g. 熊 -> "k ʃ ə ŋ t uː" ("two").
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from typing import NamedTuple

import numpy as np

from actors.backends.protocols import BackendError, Phoneme, Speaker, Speech, Voice

# espeak_AUDIO_OUTPUT: synthesis runs inside espeak_Synth on the calling thread.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INIT_PHONEME_EVENTS = 0x0001
_INIT_PHONEME_IPA = 0x0002
# Without this flag a bad data directory makes the library call exit(1).
_INIT_DONT_EXIT = 0x8000
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EVENT_LIST_TERMINATED = 0
_EVENT_PHONEME = 7
_PARAM_RATE = 1
_PARAM_PITCH = 3
_EE_OK = 0
_PHONEMES_IPA = 0x02
_PHONEME_SEPARATOR = "|"  # never part of an espeak IPA phoneme name
_CLAUSE_END_RE = re.compile(r"[.,;:!?](?=\s|$)|[，。；：！？]")

_LANGUAGES = {"en": "en-us", "zh": "cmn"}
_RATE_RANGE = (80, 450)  # espeakRATE_MINIMUM..espeakRATE_MAXIMUM (no sonic speed-up)
_VARIANT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_ -]{0,39}")
# NUL would end the C string early and other C0/C1 controls (notably ^A) start
# espeak embedded commands; lone surrogates cannot be UTF-8 encoded.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAK_RE = re.compile("[\t\n\r]")

PAUSE = "_"
_SILENCE_THRESHOLD = 100  # |sample| above this (about -50 dBFS) counts as sound
_LEAD_KEEP_MS = 10
_TAIL_KEEP_MS = 50


class TTSError(BackendError):
    """A voice the library cannot speak, or a failure inside libespeak-ng."""


def _check_voice(voice: Voice) -> str:
    """The espeak voice name for a voice (e.g. "en-us+f2"), or TTSError when espeak cannot speak it."""
    if voice.language not in _LANGUAGES:
        raise TTSError(f"unsupported language {voice.language!r}; use one of {sorted(_LANGUAGES)}")
    if voice.variant is not None and not _VARIANT_RE.fullmatch(voice.variant):
        raise TTSError(f"malformed espeak variant name {voice.variant!r}")
    if not 0 <= voice.pitch <= 100:
        raise TTSError(f"pitch {voice.pitch} outside 0..100")
    if not _RATE_RANGE[0] <= voice.rate <= _RATE_RANGE[1]:
        raise TTSError(f"rate {voice.rate} wpm outside {_RATE_RANGE[0]}..{_RATE_RANGE[1]}")
    base = _LANGUAGES[voice.language]
    return f"{base}+{voice.variant}" if voice.variant else base


class Clause(NamedTuple):
    """One clause as espeak reads it: each word's IPA phonemes, and the punctuation that
    closes the clause ("," "." "?" "!" ";" ":", or "" where none does)."""

    words: tuple[tuple[str, ...], ...]
    end: str


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    """espeak_EVENT from speak_lib.h."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Event)
)


class _Engine:
    """One initialised libespeak-ng; all calls into it go through ``lock``."""

    def __init__(self, library_path: str, data_path: str | None) -> None:
        try:
            lib = ctypes.CDLL(library_path)
        except OSError as exc:
            raise TTSError(f"cannot load libespeak-ng from {library_path}: {exc}") from exc
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p

        flags = _INIT_PHONEME_EVENTS | _INIT_PHONEME_IPA | _INIT_DONT_EXIT
        path = os.fsencode(data_path) if data_path is not None else None
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, path, flags)
        if rate <= 0:
            raise TTSError(f"espeak_Initialize failed (data path {data_path!r}); see stderr")
        resolved = ctypes.c_char_p()
        version = lib.espeak_Info(ctypes.byref(resolved))
        self.lib = lib
        self.lock = threading.Lock()
        self.sample_rate = rate
        self.requested_data_path = data_path
        self.data_path = os.fsdecode(resolved.value or b"")
        self.version = (version or b"").decode("ascii", "replace")
        self._chunks: list[bytes] = []
        self._marks: list[tuple[int, str]] = []
        self._failure: BaseException | None = None
        self._voice_name: str | None = None
        # The CFUNCTYPE object must outlive every call the library makes through it.
        self._callback = _SynthCallback(self._on_synth)
        lib.espeak_SetSynthCallback(self._callback)

    def _on_synth(self, wav: int | None, numsamples: int, events: ctypes._Pointer[_Event]) -> int:
        # Exceptions cannot cross the C boundary; record one and ask espeak to stop.
        try:
            if wav and numsamples > 0:
                self._chunks.append(ctypes.string_at(wav, numsamples * 2))
            i = 0
            while events and (event := events[i]).type != _EVENT_LIST_TERMINATED:
                if event.type == _EVENT_PHONEME:
                    # c_char*8 yields bytes up to the first NUL; a label cut at 8 bytes
                    # may end mid-character, hence "ignore".
                    label = event.id.string.decode("utf-8", "ignore")
                    self._marks.append((event.sample, label))
                i += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by synth()
            self._failure = exc
            return 1
        return 0

    def synth(self, text: bytes, voice: Voice, name: str) -> tuple[bytes, list[tuple[int, str]]]:
        """Run one synthesis with espeak voice ``name``; returns raw PCM and (sample, label) phoneme marks."""
        with self.lock:
            self._chunks, self._marks, self._failure = [], [], None
            self._use_voice(name)
            self.lib.espeak_SetParameter(_PARAM_RATE, voice.rate, 0)
            self.lib.espeak_SetParameter(_PARAM_PITCH, voice.pitch, 0)
            status = self.lib.espeak_Synth(
                text, len(text) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
            )
            chunks, marks, failure = self._chunks, self._marks, self._failure
            self._chunks, self._marks, self._failure = [], [], None
        if isinstance(failure, Exception):
            raise TTSError(f"synthesis callback failed: {failure!r}") from failure
        if failure is not None:
            raise failure  # KeyboardInterrupt and friends keep their meaning
        if status != _EE_OK:
            raise TTSError(f"espeak_Synth failed with status {status}")
        return b"".join(chunks), marks


    def _use_voice(self, name: str) -> None:
        # Called under the lock. Reloading a voice costs ~1-5 ms (the cmn dictionary is
        # large); skip repeats.
        if name != self._voice_name:
            self._voice_name = None
            status = self.lib.espeak_SetVoiceByName(name.encode("ascii"))
            if status != _EE_OK:
                raise TTSError(f"espeak cannot load voice {name!r} (status {status})")
            self._voice_name = name

    def clauses(self, text: bytes, name: str) -> list[Clause]:
        """The IPA phonemes of ``text`` (UTF-8, NUL-free) with espeak voice ``name``, clause by clause."""
        buffer = ctypes.create_string_buffer(text)
        base = ctypes.addressof(buffer)
        pointer = ctypes.c_void_p(base)
        mode = _PHONEMES_IPA | ord(_PHONEME_SEPARATOR) << 8
        out: list[Clause] = []
        with self.lock:
            self._use_voice(name)
            # Each call reads one clause and moves the pointer on (a little past the clause's
            # end: espeak reads ahead), to NULL after the last.
            while pointer.value:
                begin = pointer.value - base
                ipa = self.lib.espeak_TextToPhonemes(ctypes.byref(pointer), _CHARS_UTF8, mode)
                read = text[begin : pointer.value - base if pointer.value else len(text)]
                ends = _CLAUSE_END_RE.findall(read.decode("utf-8", "ignore"))
                words = tuple(
                    tuple(p for p in word.split(_PHONEME_SEPARATOR) if p)
                    for word in (ipa or b"").decode("utf-8", "replace").split()
                )
                out.append(Clause(tuple(w for w in words if w), ends[-1] if ends else ""))
        return out


_ENGINES: dict[str, _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_for(library_path: str, data_path: str | None) -> _Engine:
    key = os.path.realpath(library_path)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = _Engine(library_path, data_path)
        elif (
            data_path is not None
            and engine.requested_data_path is not None
            and (os.path.realpath(data_path) != os.path.realpath(engine.requested_data_path))
        ):
            # One process-global library can only ever use one data directory.
            raise TTSError(
                f"{key} is already initialised with data {engine.requested_data_path!r}, "
                f"not {data_path!r}"
            )
        return engine


def _clean_text(text: str) -> str:
    return _CONTROL_RE.sub("", _LINE_BREAK_RE.sub(" ", text)).strip()


def _timeline(
    marks: list[tuple[int, str]], start: int, stop: int, sample_rate: int
) -> tuple[Phoneme, ...]:
    """Turn raw (sample, label) marks into phonemes relative to samples [start, stop)."""
    points: list[tuple[int, str]] = []
    for sample, raw in marks:
        label = raw.strip()
        if label.startswith("(") and label.endswith(")"):
            continue  # language switch marker, e.g. "(en)"
        points.append((sample - start, label or PAUSE))
    points.sort(key=lambda p: p[0])  # stable: keeps emission order for equal samples
    length = stop - start
    spans: list[tuple[int, int, str]] = []
    for i, (begin, label) in enumerate(points):
        end = points[i + 1][0] if i + 1 < len(points) else length
        begin, end = max(begin, 0), min(end, length)
        if begin >= length or end < begin or (end == begin and (label == PAUSE or begin == 0)):
            continue  # outside the kept audio, or an empty pause
        if label == PAUSE and spans and spans[-1][2] == PAUSE:
            continue  # consecutive pauses: the earlier one already covers this
        spans.append((begin, end, label))
    starts = [begin * 1000 // sample_rate for begin, _, _ in spans]
    total_ms = length * 1000 // sample_rate
    ends = starts[1:] + [total_ms]
    return tuple(
        Phoneme(label, s, e) for (_, _, label), s, e in zip(spans, starts, ends, strict=True)
    )


class EspeakTTS(Speaker):
    """Speaks text with libespeak-ng and reports IPA phonemes with their audio positions."""

    name = "espeak"

    def __init__(self, library_path: str | None = None, data_path: str | None = None) -> None:
        if library_path is None:
            import espeakng_loader  # the wheel bundles both the library and its data

            library_path = espeakng_loader.get_library_path()
            if data_path is None:
                data_path = espeakng_loader.get_data_path()
        self._engine = _engine_for(library_path, data_path)

    @property
    def sample_rate(self) -> int:
        """Output sample rate in Hz (22050 for the bundled library)."""
        return self._engine.sample_rate

    def speak(self, text: str, voice: Voice) -> Speech:
        """Speak ``text``; leading silence trimmed to ~10 ms and trailing to ~50 ms."""
        name = _check_voice(voice)
        self._check_variant(voice)
        cleaned = _clean_text(text)
        rate = self._engine.sample_rate
        if not cleaned:
            return Speech(b"", rate, ())
        raw, marks = self._engine.synth(cleaned.encode("utf-8"), voice, name)
        samples = np.frombuffer(raw, dtype=np.int16)  # the library writes native order
        loud = np.flatnonzero((samples > _SILENCE_THRESHOLD) | (samples < -_SILENCE_THRESHOLD))
        if loud.size == 0:
            return Speech(b"", rate, ())
        start = max(0, int(loud[0]) - _LEAD_KEEP_MS * rate // 1000)
        stop = min(samples.size, int(loud[-1]) + 1 + _TAIL_KEEP_MS * rate // 1000)
        pcm = samples[start:stop].astype("<i2", copy=False).tobytes()
        return Speech(pcm, rate, _timeline(marks, start, stop, rate))

    def phonemize(self, text: str, language: str) -> list[Clause]:
        """The IPA phonemes espeak reads in ``text`` ("en" or "zh"), clause by clause and word
        by word, without speaking it (for backends that take phonemes, e.g. Piper voices)."""
        name = _check_voice(Voice(language))
        cleaned = _clean_text(text)
        if not cleaned:
            return []
        return self._engine.clauses(cleaned.encode("utf-8"), name)

    def _check_variant(self, voice: Voice) -> None:
        # espeak silently ignores an unknown variant, which would hide config typos.
        if voice.variant is None or not self._engine.data_path:
            return
        path = os.path.join(self._engine.data_path, "voices", "!v", voice.variant)
        if not os.path.isfile(path):
            raise TTSError(f"unknown espeak voice variant {voice.variant!r} (no {path})")
