"""A recorded Bilibili chat drives a show: `troupe publish --bilibili FILE --speed X`."""

from __future__ import annotations

import random
import time
from pathlib import Path
from xml.sax.saxutils import escape

import orjson
import pytest

from app.bilibili import read_bilibili_xml
from app.publish import DanmakuFileError
from tests.integration.test_publish_cli import LiveRun, live, troupe  # noqa: F401 - the fixture

HEAD = '<?xml version="1.0" encoding="UTF-8"?><i><chatserver>chat.bilibili.com</chatserver><chatid>1</chatid>\n'


def xml(rows: list[tuple[float, int, str, str, str]]) -> str:
    """A danmaku file of (time, mode, user hash, row id, text)."""
    return HEAD + "".join(
        f'<d p="{t},{mode},25,16777215,1600000000,0,{user},{row}">{escape(text)}</d>\n'
        for t, mode, user, row, text in rows
    ) + "</i>\n"


def test_a_file_is_read_in_order_of_time_with_its_ids_users_and_texts(tmp_path: Path) -> None:
    path = tmp_path / "chat.xml"
    path.write_text(xml([
        (12.5, 1, "a1b2c3d4", "38001", "主播好厉害"),
        (3.25, 1, "ffee0011", "38002", "hello <Mika> & co"),
        (20.0, 7, "ffee0011", "38003", '[0,0,"1-1",4.5,"positioned text",0,0]'),
        (20.0, 4, "ffee0011", "38004", "bottom line"),
    ]))
    timed = read_bilibili_xml(path, "r1", 0)
    assert [(t.at_s, t.event.id, t.event.user, t.event.text) for t in timed] == [
        (0.0, "bili-38002", "bili_ffee0011", "hello <Mika> & co"),
        (9.25, "bili-38001", "bili_a1b2c3d4", "主播好厉害"),
        (16.75, "bili-38003", "bili_ffee0011", "positioned text"),
        (16.75, "bili-38004", "bili_ffee0011", "bottom line"),
    ]
    assert all(t.event.kind == "comment" and t.event.run == "r1" for t in timed)


LIVE = """<?xml version="1.0" encoding="utf-8"?>
<?xml-stylesheet type="text/xsl" href="#s"?>
<i>
  <!--
B站录播姬 2.6.0
-->
  <chatserver>chat.bilibili.com</chatserver>
  <chatid>0</chatid>
  <BililiveRecorder version="2.6.0" />
  <BililiveRecorderRecordInfo roomid="21452505" shortid="0" name="主播" title="杂谈" start_time="2026-11-30T20:00:00.0000000+08:00" />
  <BililiveRecorderXmlStyle><z:stylesheet version="1.0" id="s" xmlns:z="http://www.w3.org/1999/XSL/Transform"><z:template match="/"><html><table><tr><td>弹幕</td></tr><z:for-each select="/i/d"><tr><td><z:value-of select="@user"/></td></tr></z:for-each></table></html></z:template></z:stylesheet></BililiveRecorderXmlStyle>
  <d p="3.214,1,25,16777215,1732968003214,0,12345678,0" user="小明同学" raw="[]">主播晚上好</d>
  <d p="4.5,1,25,16777215,1732968004500,0,87654321,0" user="alice" raw="[]">@rex is it worth buying a GPU</d>
  <gift ts="5.25" user="bob" uid="555" giftname="辣条" giftcount="3" raw="{}" />
  <sc ts="6" user="carol" price="30" time="60" raw="{}">Mika what game tonight?</sc>
  <guard ts="7.5" user="dave" level="3" count="1" raw="{}" />
  <d p="8,1,25,16777215,1732968008000,0,12345678,0" user="小明同学" raw="[]">主播晚上好</d>
</i>
"""


def test_a_live_rooms_recording_gives_names_gifts_and_super_chats(tmp_path: Path) -> None:
    """B站录播姬's file: every danmaku's row id is 0 (so ids come from the file and the element),
    the viewer's name is the user, and Super Chats, gifts and memberships are gifts."""
    path = tmp_path / "live.xml"
    path.write_text(LIVE)
    timed = read_bilibili_xml(path, "r1", 0)
    assert [(round(t.at_s, 3), t.event.user, t.event.kind, t.event.text) for t in timed] == [
        (0.0, "小明同学", "comment", "主播晚上好"),
        (1.286, "alice", "comment", "@rex is it worth buying a GPU"),
        (2.036, "bob", "gift", "辣条 x3"),
        (2.786, "carol", "gift", "Mika what game tonight?"),
        (4.286, "dave", "gift", "舰长 x1"),
        (4.786, "小明同学", "comment", "主播晚上好"),
    ]
    # The viewers as the recording identifies them: a uid where it gives one (a Super Chat's price in CNY).
    assert [(t.event.viewer, t.event.platform) for t in timed] == [
        ("bili:12345678", "bilibili"), ("bili:87654321", "bilibili"), ("bili:555", "bilibili"),
        ("", "bilibili"), ("", "bilibili"), ("bili:12345678", "bilibili")]
    assert (timed[3].event.value, timed[3].event.currency) == (30.0, "CNY")
    ids = [t.event.id for t in timed]
    assert len(set(ids)) == 6 and all(i.startswith("bili-") and i != "bili-0" for i in ids)
    assert [t.event.id for t in read_bilibili_xml(path, "r2", 1)] == ids  # played again: the same ids


@pytest.mark.parametrize(("body", "message"), [
    (HEAD + '<d>no p</d></i>', r"chat.xml:2: <d> without its p attribute"),
    (HEAD + '<d p="x,1">bad time</d></i>', r"chat.xml:2: .*time and mode must be numbers"),
    (HEAD + '<d p="-1,1">early</d></i>', r"chat.xml:2: .*0 or more seconds"),
    (HEAD + '<d p="1,1,25,0,0,0,u,7">a</d>\n<d p="2,1,25,0,0,0,u,7">b</d></i>', r"chat.xml:3: danmaku id 7 is already used on line 2"),
    (HEAD + '<d p="1,1">unclosed</i>', r"chat.xml:2: not well-formed XML"),
    (HEAD + "</i>", r"no <d> danmaku in the file"),
    (HEAD + '<gift user="bob" giftname="x" giftcount="1"/></i>', r"chat.xml:2: <gift> ts is missing"),
    (HEAD + '<sc ts="soon" user="c" price="30">hi</sc></i>', r"chat.xml:2: <sc> ts='soon' must be a number"),
])
def test_a_bad_file_is_one_line_naming_where(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "chat.xml"
    path.write_text(body)
    with pytest.raises(DanmakuFileError, match=message):
        read_bilibili_xml(path, "r1", 0)


async def test_a_bad_file_sends_nothing(live: LiveRun, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    path = tmp_path / "chat.xml"
    path.write_text(HEAD + '<d p="1,1,25,0,0,0,u,1">fine</d>\n<d p="oops">bad</d></i>')
    code, out, err = await troupe(capsys, "--nats", live.url, "publish", "--run", live.run, "--bilibili", str(path))
    assert code != 0 and out == ""
    assert err.strip().splitlines()[-1].endswith("chat.xml:3: p='oops' needs at least time and mode")


@pytest.mark.timeout(240)
async def test_5000_danmaku_at_20x_each_get_one_outcome(live: LiveRun, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A recorded chat of 5,000 danmaku over 100 s, played 20 times faster (250 a second): every
    one is answered once (cue, merged, skipped or rejected), none lost; the pace is kept."""
    rng = random.Random(5)
    words = ["hello", "mika", "rex", "小鹿", "好厉害", "what game", "lol", "666", "gg", "主播晚上好", "@rex hi"]
    rows = [(round(rng.uniform(0, 100), 3), rng.choice([1, 1, 1, 4, 5]), f"{rng.getrandbits(32):08x}", str(40_000 + i),
             " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(4990)]
    rows += [(50.0, 1, "deadbeef", str(50_000 + i), text) for i, text in enumerate(
        ["", "x" * 500, "badword here", "   ", "spamlink now", "ok", "ok", "ok", "ok", "ok"])]
    path = tmp_path / "chat.xml"
    path.write_text(xml(rows))
    started = time.monotonic()
    code, out, err = await troupe(capsys, "--nats", live.url, "publish", "--run", live.run, "--bilibili", str(path),
                                  "--speed", "20", "--json", "--wait", "60")
    took = time.monotonic() - started
    assert code == 0, err
    answers = [orjson.loads(line) for line in out.splitlines()]
    assert len(answers) == 5000 and len({a["id"] for a in answers}) == 5000
    outcomes = {a["outcome"] for a in answers}
    assert None not in outcomes, [a for a in answers if a["outcome"] is None][:3]
    assert outcomes <= {"cue", "merged", "skipped", "rejected"} and "cue" in outcomes and "rejected" in outcomes
    assert took >= 100 / 20 * 0.95  # played at its pace, not all at once
