"""The guards between a model's streamed text and the stage: speaker tags, echoes, loops."""

from __future__ import annotations

from collections.abc import Iterator

from actors.backends.protocols import Persona, Prompt
from actors.backends.text import (
    chat_messages,
    model_stops,
    reply_sentences,
    similarity,
    speaker_tags,
    until_tag,
)

MIKA = Persona("host", "Mika", "cheerful host", "en")
XIAOLU = Persona("xiaolu", "小鹿", "温柔的美食主播", "zh")
TAGS = ("Mika", "Rex", "alice", "User")


def pieces(text: str, size: int = 3) -> Iterator[str]:
    """Text as a model streams it: a few characters at a time."""
    return (text[i:i + size] for i in range(0, len(text), size))


def test_a_tag_opening_the_reply_is_dropped_and_one_inside_it_ends_the_reply() -> None:
    assert "".join(until_tag(pieces("Mika: hello there! Rex: and me"), TAGS)) == "hello there! "
    assert "".join(until_tag(pieces("alice, what game? Mika: alice, what game?"), TAGS)) == "alice, what game? "
    assert "".join(until_tag(pieces("Sure thing.\nUser: more"), TAGS)) == "Sure thing.\n"
    assert "".join(until_tag(pieces("Remix: a song"), TAGS)) == "Remix: a song"  # a word ending in a name
    assert "".join(until_tag(pieces("Hi Mika fans! 3:30 works."), TAGS)) == "Hi Mika fans! 3:30 works."
    assert "".join(until_tag(pieces("小鹿：你好！"), ("小鹿",))) == "你好！"  # the full-width colon too
    assert "".join(until_tag(pieces("@小鹿: I love Rex!"), ("小鹿",))) == "I love Rex!"  # and a mention


def test_the_source_is_closed_when_a_tag_ends_the_reply() -> None:
    closed: list[bool] = []

    def source() -> Iterator[str]:
        try:
            yield from ["Fine. ", "Rex: ", "no", " more", " of", " this"]
        finally:
            closed.append(True)

    assert "".join(until_tag(source(), TAGS)) == "Fine. "
    assert closed == [True]


def test_an_echo_of_the_comment_is_not_said_and_a_loop_ends_the_reply() -> None:
    comment = "hi Mika! what game should we play tonight?"
    out = list(reply_sentences(pieces("Hi Mika, what game should we play tonight? Let's play chess! Fun."),
                               TAGS, comment))
    assert out == ["Let's play chess!", "Fun."]
    looped = list(reply_sentences(pieces("The robot, the robot. The robot, the robot! Something else."), TAGS))
    assert looped == ["The robot, the robot."]  # the repeat and all after it are gone
    assert similarity("Hello, World!", "hello world") == 1.0 and similarity("", "x") == 0.0


def test_the_prompt_names_every_tag_to_avoid_and_asks_a_chinese_role_for_mandarin() -> None:
    prompt = Prompt("c1", "alice", "hi", context=("Rex: hello.",), cast=("Mika", "小鹿", "Rex"))
    tags = speaker_tags(MIKA, prompt)
    assert {"Mika", "Rex", "小鹿", "alice", "User"} <= set(tags)
    assert "\nRex:" in model_stops(MIKA, prompt) and "<|im_end|>" in model_stops(MIKA, prompt)
    system = chat_messages(XIAOLU, prompt)[0]["content"]
    assert "Mandarin" in system and "never write a name followed by a colon" in system


def test_the_first_sentence_goes_at_its_first_long_enough_clause() -> None:
    out = list(reply_sentences(pieces("Well, chess is a classic game for tonight, and Mario Kart after. Fun!")))
    assert out == ["Well, chess is a classic game for tonight,", "and Mario Kart after.", "Fun!"]
    assert [s.last for s in out] == [False, False, True]
    assert list(reply_sentences(pieces("Hi, you! Nice."))) == ["Hi, you!", "Nice."]  # too short a clause
    assert list(reply_sentences(pieces("今天我们一起去吃火锅吧，然后再去看电影。"))) == ["今天我们一起去吃火锅吧，", "然后再去看电影。"]


def test_what_a_model_copies_from_its_prompt_is_not_said() -> None:
    from actors.backends.text import model_reply

    prompt = Prompt("c1", "bob", "今天晚饭吃什么好呢？", context=("Rex: This segment is brought to you by Pixel Forge.",),
                    opener="好问题！", cast=("Mika", "小鹿", "Rex"))
    copied = "好问题！今天晚饭吃什么好呢？（请用中文回答）吃火锅吧。"
    assert list(model_reply(pieces(copied), XIAOLU, prompt)) == ["吃火锅吧。"]
    stage = list(model_reply(pieces("This segment is brought to you by Pixel Forge. Anyway, hi!"), MIKA,
                             Prompt("c2", "ann", "hey", context=prompt.context, opener="Oh, hi ann!")))
    assert stage == ["Anyway, hi!"]  # the stage's line copied: not said again
    quoted = list(model_reply(pieces('"This segment is brought to you by Pixel Forge: it is a great sponsor. Hi!'),
                              MIKA, Prompt("c4", "ann", "hey", context=prompt.context)))
    assert quoted == ["it is a great sponsor.", "Hi!"]  # a quoted piece of it, cut at its clause: not said
    own = list(model_reply(pieces("Pixel Forge is brought to you by me."), MIKA,
                           Prompt("c5", "ann", "hey", context=prompt.context)))
    assert own == ["Pixel Forge is brought to you by me."]  # its words in a sentence of its own: said
    again = list(model_reply(pieces("Oh, hi Ann! Great to see you here."), MIKA,
                             Prompt("c3", "ann", "hey", opener="Oh, hi ann!")))
    assert again == ["Great to see you here."]  # the opener, already spoken, taken off the front


def test_a_sentence_in_the_wrong_language_is_not_said() -> None:
    from actors.backends.text import model_reply

    prompt = Prompt("c1", "alice", "what do you think about AI art?", cast=("Mika", "小鹿", "Rex"))
    drifted = "AI art is a fascinating field. 我觉得AI绘画很有意思。我们玩 League of Legends 吧！"
    assert list(model_reply(pieces(drifted), XIAOLU, prompt)) == ["我觉得AI绘画很有意思。", "我们玩 League of Legends 吧！"]
    mixed = "大家好！ Hi 小鹿, I like Rex. Nice to meet you."
    assert list(model_reply(pieces(mixed), MIKA, prompt)) == ["Hi 小鹿, I like Rex.", "Nice to meet you."]


def test_a_sentence_where_the_model_steps_out_of_its_role_is_not_said() -> None:
    from actors.backends.text import model_reply, steps_out

    prompt = Prompt("c1", "bob", "你们几点下播？", cast=("Mika", "小鹿", "Rex"))
    rex = Persona("rex", "Rex", "the tech nerd", "en")
    disclaimer = "Good one. I'm sorry, but as an AI language model, I don't watch streams. Bye."
    assert list(model_reply(pieces(disclaimer), rex, prompt)) == ["Good one.", "Bye."]
    recited = "You are Rex, the tech nerd who answers questions about computers. Hi!"
    assert list(model_reply(pieces(recited), rex, prompt)) == ["Hi!"]
    # the first clause went alone (it is long enough): the rest of the sentence is said
    assert list(model_reply(pieces("作为一个人工智能，我没有下播时间。"), XIAOLU, prompt)) == ["我没有下播时间。"]
    assert not steps_out("I'm an AI enthusiast, honestly!") and not steps_out("我是人工智能爱好者。")
    assert not steps_out("You are awesome, Rex fans!", "Rex") and steps_out("I am an AI, so no.")


def test_a_model_answering_its_prompt_instead_of_the_viewer_is_not_said() -> None:
    from actors.backends.text import steps_out

    for meta in ("I'm sorry, but your response is not in English.", "Your message was not in English!",
                 "I will answer in English from now on.", "Please write in Chinese."):
        assert steps_out(meta, "Rex"), meta
    for fine in ("I learned to code in English class.", "Your answer made my day!", "That song is not in my list."):
        assert not steps_out(fine, "Rex"), fine


def test_a_model_that_writes_sentences_not_to_be_said_is_stopped_after_a_few() -> None:
    from actors.backends.text import MAX_UNSAID, model_reply

    closed: list[bool] = []

    def source() -> Iterator[str]:
        try:
            yield from pieces("AI art is great. Robots are fun. Games rock too. 我们吃火锅吧。Then more English.")
        finally:
            closed.append(True)

    prompt = Prompt("c1", "alice", "what do you think about AI art?", cast=("Mika", "小鹿", "Rex"))
    assert MAX_UNSAID == 2
    assert list(model_reply(source(), XIAOLU, prompt)) == []  # three English sentences in a row: it ends there
    assert closed == [True]
    assert list(model_reply(pieces("Okay, so 1. 2. Chess!"), MIKA, prompt)) == ["Okay, so 1.", "Chess!"]  # "2." is no speech
    mixed = "AI art is great. 我觉得很有意思。Robots are fun. 我们吃火锅吧。"  # never more than one in a row
    assert list(model_reply(pieces(mixed), XIAOLU, prompt)) == ["我觉得很有意思。", "我们吃火锅吧。"]
