"""A recorded run's inputs are handed to an actor again in the order it took them in: what its
handlers emitted records the stream positions it had taken in (``Event.seen``), whatever the
show times say (``actors.kernel.handling_order``)."""

from __future__ import annotations

import dataclasses
import random

from actors.director import Director
from actors.kernel import Fed, Kernel, Recorded, Tick, handling_order, replay
from actors.lipsync import LipsyncActor
from events.audio import AudioChunk
from events.base import Event
from events.danmaku import DanmakuReceived, SpeechPlaced
from events.utterance import UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import load_settings
from tests.showkit import demo_run


def _chunk(utt: str, seq: int, t_ms: int) -> AudioChunk:
    return AudioChunk(id=f"{utt}-{seq}", run="r1", role="host", utterance=utt, seq=seq, part=0, part_last=True,
                      last=True, sample_rate=22050, offset_ms=0, duration_ms=400, text="hi", phonemes=(),
                      pcm=b"\x00\x00" * 100, t_ms=t_ms)


def _order(inputs: dict[str, list[Recorded]], outputs: list[Event]) -> list[str]:
    return [fed.event.id for fed in handling_order(inputs, outputs)]


def test_a_drop_taken_in_after_a_chunk_goes_after_it() -> None:
    chunk = _chunk("u1", 0, 1000)
    drop = UtteranceDropped(id="d1", run="r1", utterance="u1", reason="superseded: b wrote again", t_ms=900)
    track = VisemeTrack(id="v1", run="r1", role="host", utterance="u1", audio=chunk.id, seq=0, start_ms=2000,
                        end_ms=2400, text="hi", visemes=(), causation=chunk.id, t_ms=1010, seen={"audio": 1})
    told = SpeechPlaced(id="p1", run="r1", utterance="u1", start_ms=-1, done=True, causation="d1", t_ms=1200,
                        seen={"audio": 1, "utterance": 1})
    order = _order({"audio": [Recorded(chunk, 1)], "utterance": [Recorded(drop, 1)]}, [track, told])
    assert order == ["u1-0", "d1"]


def test_a_chunk_taken_in_after_the_drop_of_its_reply_goes_after_it_though_sent_before() -> None:
    chunk = _chunk("u2", 0, 1000)  # sent before the drop reached lipsync, taken in after it: let go
    drop = UtteranceDropped(id="d2", run="r1", utterance="u2", reason="superseded: b wrote again", t_ms=990)
    told = SpeechPlaced(id="p2", run="r1", utterance="u2", start_ms=-1, done=True, causation="d2", t_ms=1010,
                        seen={"utterance": 1})
    order = _order({"audio": [Recorded(chunk, 1)], "utterance": [Recorded(drop, 1)]}, [told])
    assert order == ["d2", "u2-0"]


def test_an_input_that_caused_nothing_goes_after_the_marks_that_had_not_taken_it_in() -> None:
    first = _chunk("u3", 0, 1000)
    track = VisemeTrack(id="v3", run="r1", role="host", utterance="u3", audio=first.id, seq=0, start_ms=3000,
                        end_ms=3400, text="hi", visemes=(), causation=first.id, t_ms=1010, seen={"audio": 1})
    drop = UtteranceDropped(id="d3", run="r1", utterance="u3", reason="interrupted while writing", from_seq=1,
                            t_ms=1500)  # sent first, taken in after the urgent chunk had cut the reply
    urgent = _chunk("gift", 0, 1490)
    told = SpeechPlaced(id="p3", run="r1", utterance="u3", start_ms=3000, end_ms=3400, done=True,
                        causation=urgent.id, t_ms=1520, seen={"audio": 2})
    order = _order({"audio": [Recorded(first, 1), Recorded(urgent, 2)], "utterance": [Recorded(drop, 1)]},
                   [track, told])
    assert order == ["u3-0", "gift-0", "d3"]


def test_without_marks_inputs_go_by_when_they_were_handled_each_stream_in_its_order() -> None:
    a0, a1 = (dataclasses.replace(_chunk("a", i, t), causation=f"reply{i}") for i, t in ((0, 100), (1, 500)))
    drop = UtteranceDropped(id="d", run="r1", utterance="b", reason="superseded", t_ms=300, causation="cue")
    fed = handling_order({"audio": [Recorded(a0, 1), Recorded(a1, 2)], "utterance": [Recorded(drop, 1)]}, [])
    assert [f.event.id for f in fed] == ["a-0", "d", "a-1"]
    assert [f.at_ms for f in fed] == [100, 300, 500]  # never before it existed, nor before the one before it


def test_any_interleaving_of_two_streams_is_recovered_from_what_lipsync_emitted() -> None:
    """Lipsync takes chunks and drops of several replies in a random order; fed again in the order
    its outputs record, it emits the same events, stamped alike."""
    run = demo_run()
    role = run.show["roles"][0]["id"]
    rng = random.Random(7)
    outcomes, unmarked_wrong = set(), 0
    for trial in range(20):
        chunks = [AudioChunk(id=f"u{u}-{s}", run=run.run, role=role, utterance=f"u{u}", seq=s, part=0, part_last=True,
                             last=s == 2, sample_rate=22050, offset_ms=s * 400, duration_ms=400, text="hello there",
                             phonemes=(), pcm=b"\x00\x10" * 8820, t_ms=1000 * u + 100 * s)
                  for u in range(4) for s in range(3)]
        drops = [UtteranceDropped(id=f"drop{u}", run=run.run, utterance=f"u{u}", reason="superseded", t_ms=1000 * u + 150)
                 for u in (1, 3)]
        queues, order = [list(chunks), list(drops)], []
        while any(queues):  # each stream in its order, the two interleaved at random
            q = rng.choice([q for q in queues if q])
            order.append(q.pop(0))
        seqs = {e.id: i + 1 for i, e in enumerate(chunks)} | {e.id: i + 1 for i, e in enumerate(drops)}
        live = [o for _, outs in replay(Kernel(LipsyncActor()), run,
                                        [(e.t_ms, e, seqs[e.id]) for e in order]) for o in outs]
        assert live and all(o.seen for o in live if o.run == run.run), trial
        recorded = {"audio": [Recorded(e, seqs[e.id]) for e in chunks],
                    "utterance": [Recorded(e, seqs[e.id]) for e in drops]}
        fed = handling_order(recorded, live)
        again = [o for _, outs in replay(Kernel(LipsyncActor()), run, fed) for o in outs]
        assert again == live, f"trial {trial}: order {[e.id for e in order]}, fed {[f.event.id for f in fed]}"
        outcomes.add(tuple(o.id for o in live))
        unmarked = handling_order(recorded, [dataclasses.replace(o, seen=None) for o in live])
        unmarked_wrong += [o.id for _, outs in replay(Kernel(LipsyncActor()), run, unmarked) for o in outs] != \
            [o.id for o in live]
    assert len(outcomes) > 1  # the order matters: lipsync emits differently
    assert unmarked_wrong > 0  # and the show times alone do not recover it


def test_a_clocks_ticks_go_back_where_its_outputs_say_they_were() -> None:
    """The director's clock ticked among the comments (live, whenever its runtime woke); fed again
    in the order and with the ticks its outputs record, it emits the same events, stamped alike."""
    run = demo_run()
    rng = random.Random(11)
    ticked = 0
    for trial in range(10):
        live_feed: list[Fed | Tick] = [Fed(0, run, 1)]
        comments = []
        t = 1000
        for i in range(12):
            t += rng.randrange(50, 900)
            comment = DanmakuReceived(id=f"c{trial}-{i}", run=run.run, user=f"viewer{i % 4}",
                                      text=f"@rex question number {i}?" if i % 3 else "hello everyone", t_ms=t)
            comments.append(comment)
            live_feed.append(Fed(t, comment, i + 1))
            for _ in range(rng.randrange(0, 3)):  # the clock woke in between, or not
                t += rng.randrange(10, 400)
                live_feed.append(Tick(t))
        live_feed.append(Tick(t + 30_000))
        live = [o for _, outs in replay(Kernel(Director(load_settings(environ={}))), run, live_feed) for o in outs]
        assert any(o.ticked_ms is not None for o in live) and all(o.seen for o in live if o.run == run.run)
        ticked += sum(o.ticked_ms is not None for o in live)
        recorded = {"run": [Recorded(run, 1)], "danmaku": [Recorded(c, i + 1) for i, c in enumerate(comments)]}
        schedule = handling_order(recorded, live)
        again = [o for _, outs in replay(Kernel(Director(load_settings(environ={}))), run, schedule) for o in outs]
        assert again == live, f"trial {trial}"
    assert ticked > 20
