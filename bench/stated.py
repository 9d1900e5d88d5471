"""Chat comments labelled with the facts their writers state about themselves, in English and
Chinese: what ``bench.memory --facts`` reads with the rules and with the llama.cpp model.

Written for this benchmark (no recorded chat of a remembered audience ships here): half say a
fact in the way the rules know ("I'm from Berlin"), half in other words ("Berlin is where I
grew up"), and a fifth say none, or one about somebody else.  Each label is (kind, value): the
value as the comment says it (a home in lower case as the rules title it)."""

from __future__ import annotations

Labelled = tuple[str, tuple[tuple[str, str], ...]]

STATED: tuple[Labelled, ...] = (
    # the rules' own wording
    ("I'm from Berlin!", (("home", "Berlin"),)),
    ("hi from Toronto, first time here", (("home", "Toronto"),)),
    ("I live in Manchester and it's raining again", (("home", "Manchester"),)),
    ("my cat is called Miso", (("pet", "Miso"),)),
    ("I'm learning Rust these days", (("learning", "Rust"),)),
    ("I work as a nurse, just off a night shift", (("job", "nurse"),)),
    ("call me Bob", (("name", "Bob"),)),
    ("my favourite game is Celeste", (("favourite", "Celeste"),)),
    ("我来自北京，很高兴认识你们", (("home", "北京"),)),
    ("我在学日语", (("learning", "日语"),)),
    ("我家猫叫咪咪", (("pet", "咪咪"),)),
    ("我是上海人", (("home", "上海"),)),
    ("我最喜欢的游戏是塞尔达", (("favourite", "塞尔达"),)),
    # other words
    ("Berlin is where I grew up, still there", (("home", "Berlin"),)),
    ("grew up in Lisbon, moved around a lot since", (("home", "Lisbon"),)),
    ("born and raised in Glasgow", (("home", "Glasgow"),)),
    ("our hamster Mochi is asleep on my keyboard", (("pet", "Mochi"),)),
    ("my dog Biscuit keeps barking at the stream lol", (("pet", "Biscuit"),)),
    ("been teaching myself piano for a year now", (("learning", "piano"),)),
    ("taking a course in Korean, it's hard", (("learning", "Korean"),)),
    ("I spend my days as a firefighter", (("job", "firefighter"),)),
    ("I'm a teacher so grading papers while I watch", (("job", "teacher"),)),
    ("everyone calls me Dee", (("name", "Dee"),)),
    ("Celeste is my fave game ever", (("favourite", "Celeste"),)),
    ("watching from Sydney where it's 3am", (("home", "Sydney"),)),
    ("I'm based in Austin, any Texans here?", (("home", "Austin"),)),
    ("我老家在成都，好想回去", (("home", "成都"),)),
    ("我在杭州上班，是个程序员", (("home", "杭州"), ("job", "程序员"))),
    ("最近在自学吉他，手指好疼", (("learning", "吉他"),)),
    ("我养了一只狗叫旺财", (("pet", "旺财"),)),
    ("我是一名护士，刚下夜班", (("job", "护士"),)),
    ("大家可以叫我小王", (("name", "小王"),)),
    ("我在广州长大的", (("home", "广州"),)),
    ("我的兔子叫团团，超可爱", (("pet", "团团"),)),
    ("我现在在练书法", (("learning", "书法"),)),
    ("I'm a nurse from Lisbon btw", (("job", "nurse"), ("home", "Lisbon"))),
    # none of their own
    ("my sister lives in Paris, what do you think of it?", ()),
    ("what do you think about cats?", ()),
    ("this song is a banger", ()),
    ("I think the second role is funnier", ()),
    ("lol same", ()),
    ("我朋友在学法语", ()),
    ("主播今天好厉害", ()),
    ("我觉得这首歌很好听", ()),
    ("my friend's dog Rex would love this", ()),
    ("I'm so tired today", ()),
)
