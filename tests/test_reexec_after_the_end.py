"""Re-execution after the run's end: a director that took the end in and then went on (a reply's
pace measured after it) stamped its outputs with the end; re-execution feeds it the end too."""

from __future__ import annotations

from pathlib import Path

from actors.director import Director
from actors.kernel import Kernel
from app.reexec import format_verification, verify
from events import codec
from events.base import Event
from events.cue import CueIssued, StagePaced
from events.danmaku import DanmakuReceived, RolePaceMeasured
from events.run import RunEnded
from events.subjects import subject_for
from infra.settings import load_settings
from store.database import open_engine
from store.recorder import EventWriter, Recorded
from tests.showkit import demo_run

RUN = demo_run()


def test_a_decision_made_after_the_director_took_the_end_in_re_executes_alike(tmp_path: Path) -> None:
    settings = load_settings(environ={}, self_driven="off")
    kernel: Kernel[Event] = Kernel(Director(settings))
    inputs: list[tuple[Event, int]] = []
    out: list[Event] = []

    def take(event: Event, at_ms: int, seq: int) -> None:
        inputs.append((event, seq))
        out.extend(kernel.take(event, RUN, at_ms, seq=seq).handle())

    take(RUN, 0, 1)
    take(DanmakuReceived(id="d0", run=RUN.run, user="a", text="hello @rex, how was your day?"), 100, 1)
    [cue] = [e for e in out if isinstance(e, CueIssued)]
    # The show ends while rex's reply is spoken; its pace, measured after, replans the floor.
    take(RunEnded(id="end", run=RUN.run, t_ms=5000, reason="test", duration_ms=5000), 5000, 2)
    take(RolePaceMeasured(id="pace", run=RUN.run, role="rex", causation=cue.id, correlation="d0", t_ms=5400,
                          backend="llama_cpp", first_sentence_ms=4000, sentence_write_ms=3000, speech_ms=6000,
                          replies=3), 5500, 2)
    [paced] = [e for e in out if isinstance(e, StagePaced)]
    assert paced.seen == {"run": 2, "danmaku": 2}  # it had taken the end in

    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    taken = {e.id for e, _ in inputs}
    rows = [Recorded(e, codec.encode(e), subject_for(e), seq) for e, seq in inputs]
    rows += [Recorded(e, codec.encode(e), subject_for(e)) for e in out if e.id not in taken]
    EventWriter(engine).append(rows)
    result = verify(engine, RUN.run, actors=("director",), settings=settings, build=lambda _, s: Director(s))
    assert result.divergence is None, format_verification(result)
    assert result.checked["director"] == len(out)
