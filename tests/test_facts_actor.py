"""The facts worker: what a reader (the llama.cpp model in a show) finds in a remembered viewer's
comment, beyond what the rules found, is noted with the comment as its cause; nothing else is read."""

from __future__ import annotations

from actors.backends.llm_llama import LlamaError
from actors.facts import FactsActor
from actors.kernel import ListFeed
from events.danmaku import DanmakuReceived
from events.viewer import ViewerNoted
from infra.settings import load_settings
from schedulers.memory import Fact
from tests.showkit import demo_run

RUN = demo_run()


class Reader:
    """Reads the facts it was given for each comment (a model's answer, already held up against
    the comment), and what it was asked."""

    label = "llama_cpp:test"

    def __init__(self, answers: dict[str, list[Fact]] | None = None, fails: bool = False) -> None:
        self.answers = answers or {}
        self.fails = fails
        self.asked: list[str] = []

    def read(self, text: str) -> list[Fact]:
        self.asked.append(text)
        if self.fails:
            raise LlamaError("generation failed: out of memory")
        return self.answers.get(text, [])


def comment(n: int, text: str, viewer: str = "twitch:42", kind: str = "comment") -> DanmakuReceived:
    return DanmakuReceived(id=f"d{n}", run=RUN.run, text=text, user="alice", viewer=viewer, kind=kind)


def _feed(reader: Reader, **settings: object) -> ListFeed:
    feed = ListFeed(FactsActor(load_settings(environ={}, **settings), reader), RUN)  # type: ignore[arg-type]
    feed.handle(RUN, at_ms=0)
    return feed


def test_a_fact_the_rules_missed_is_noted_with_its_comment_as_cause() -> None:
    text = "Berlin is where I grew up, I'm learning Rust"
    reader = Reader({text: [Fact("home", "Berlin"), Fact("learning", "Rust")]})
    out = _feed(reader).handle(comment(1, text), at_ms=1200)
    # The rules read "learning Rust" already (the memory worker notes it): only the home is the model's.
    assert [(e.kind, e.value, e.extractor) for e in out if isinstance(e, ViewerNoted)] == [
        ("home", "Berlin", "llama_cpp:test")]
    [noted] = out
    assert (noted.causation, noted.correlation, noted.viewer, noted.said, noted.t_ms) == (
        "d1", "d1", "twitch:42", text, 1200)
    # The same comment again (a redelivery) gives the same event id: stored once.
    assert _feed(reader).handle(comment(1, text), at_ms=1500)[0].id == noted.id


def test_only_a_remembered_viewers_comments_in_the_first_person_are_read() -> None:
    reader = Reader()
    feed = _feed(reader)
    feed.handle(comment(1, "I grew up by the sea", viewer=""),              # no stable identity
                comment(2, "I grew up by the sea", viewer="bili:0"),        # uid 0
                comment(3, "what a lovely song"),                           # says nothing of them
                comment(4, "!forget"),                                      # asks to be forgotten
                comment(5, "I grew up by the sea", kind="gift"),
                comment(6, "I grew up by the sea", kind="moderator"),
                comment(7, "I grew up by the sea"))
    assert reader.asked == ["I grew up by the sea"]
    assert _feed(reader := Reader(), memory="off").handle(comment(8, "I grew up by the sea")) == []
    assert reader.asked == []


def test_a_model_that_fails_leaves_the_comment_to_the_rules() -> None:
    actor_feed = _feed(Reader(fails=True))
    assert actor_feed.handle(comment(1, "Berlin is where I grew up")) == []
    assert actor_feed.actor.failed == 1  # type: ignore[attr-defined]


def test_the_model_is_loaded_only_when_a_comment_needs_it() -> None:
    actor = FactsActor(load_settings(environ={}, llama_model="/nonexistent/model.gguf"))
    feed = ListFeed(actor, RUN)
    feed.handle(RUN, comment(1, "what a lovely song"), at_ms=0)   # nothing to read: nothing loaded
    assert not actor.loaded
    assert feed.handle(comment(2, "Berlin is where I grew up")) == []   # the model cannot be loaded: said, left
    assert actor.failed == 1
