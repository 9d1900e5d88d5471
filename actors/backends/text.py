"""What every model-backed reply writer does with text: the chat it asks the model, and the
sentences it cuts the model's streamed output into (for TTS, one sentence at a time)."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable, Iterator

from actors.backends.protocols import Persona, Prompt, Sentence

# A sentence ends at . ! ? (or their full-width forms) and the space after them.
_END = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+")
# A line said word for word is cut after its end marks (Chinese ones need no space after them).
_VERBATIM_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|(?<=[。！？])\s*")
_TAIL = re.compile(r"[.!?。！？][\"')\]]*\s*$")
# A small model may open its reply as a transcript line ("Mika: ..."), copying the stage context.
_SPEAKER = re.compile(r"^\s*[A-Za-z][\w .'-]{0,24}:\s+")


# What a model is asked for a line of the show's own (Prompt.kind), in one sentence.
_OWN_LINE = {
    "brief": "Say one short sentence that moves the segment along: a fresh point, a fact or an opinion.",
    "follow_up": "{addressee} just said: \"{follows}\". Answer {addressee}, or ask {addressee} about it, "
                 "in one short sentence.",
    "invitation": "Invite the viewers to write a comment about it, in one short sentence with a question.",
}


def _system(persona: Persona, prompt: Prompt, task: str) -> str:
    """The system prompt: who the role is, what it is to do, and the stage so far."""
    system = f"You are {persona.name}, a host on a live stream. {persona.persona} {task}"
    if prompt.context:
        system += " Said on stage just before:\n" + "\n".join(prompt.context)
    return system


def own_line_messages(persona: Persona, prompt: Prompt) -> list[dict[str, str]]:
    """The chat for a line of the show's own: the persona, the segment and its brief, the stage
    so far, and what to say (a point, a follow-up on another role's line, an invitation)."""
    system = _system(persona, prompt, f"You are in the segment \"{prompt.segment}\": {prompt.brief}. "
                     "Speak in character, without lists, emojis or your own name as a label.")
    ask = _OWN_LINE.get(prompt.kind, _OWN_LINE["brief"])
    ask = ask.format(addressee=prompt.addressee or "your co-host", follows=prompt.follows or prompt.brief)
    if persona.language == "zh":
        ask += " Answer in Mandarin Chinese."
    return [{"role": "system", "content": system}, {"role": "user", "content": ask}]


def chat_messages(persona: Persona, prompt: Prompt) -> list[dict[str, str]]:
    """The chat: the persona as system prompt, the stage so far, then the viewer's comment (or,
    for a line of the show's own, ``own_line_messages``)."""
    if prompt.kind:
        return own_line_messages(persona, prompt)
    system = _system(persona, prompt, f"Answer the viewer in at most {max(1, prompt.max_sentences)} short "
                     "sentences, friendly and in character, without lists or emojis.")
    asker = prompt.user or "a viewer"
    many = f" ({prompt.merged} viewers said this)" if prompt.merged > 1 else ""
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{asker}{many}: {prompt.text}"}]


def verbatim_sentences(text: str) -> Iterator[Sentence]:
    """A line said word for word, as its sentences (each saying whether it is the last)."""
    parts = [part.strip() for part in _VERBATIM_END.split(text.strip()) if part.strip()]
    for i, part in enumerate(parts):
        yield Sentence(part, last=i == len(parts) - 1)


def reply_sentences(pieces: Iterable[str]) -> Generator[str, None, None]:
    """A model's streamed reply as sentences, without a speaker label opening it."""
    for i, sentence in enumerate(sentences(iter(pieces))):
        stripped = _SPEAKER.sub("", sentence, count=1) if i == 0 else sentence
        if stripped.strip() and stripped != sentence:
            sentence = Sentence(stripped, last=sentence.last)
        yield sentence


def sentences(pieces: Iterator[str]) -> Iterator[Sentence]:
    """Cut streamed text into sentences; each is yielded once the next one has begun (last=False)
    or the text has ended (last=True).  A last sentence the budget cut is closed with a period."""
    buffer = ""
    ready: str | None = None  # a whole sentence, waiting to learn whether more follows
    for piece in pieces:
        buffer += piece
        while True:
            match = _END.search(buffer)
            if match is None:
                break
            text, buffer = buffer[:match.start()].strip(), buffer[match.end():]
            if not text:
                continue
            if ready is not None:
                yield Sentence(ready, last=False)
            ready = text
        if ready is not None and buffer.strip():
            yield Sentence(ready, last=False)  # the next sentence has begun
            ready = None
    tail = buffer.strip()
    if ready is not None:  # nothing followed it
        yield Sentence(ready, last=True)
    elif tail:  # the last sentence; without its end mark when the budget cut it: closed here
        yield Sentence(tail if _TAIL.search(tail) else tail.rstrip(",;:- ") + ".", last=True)
