"""The rules that read what a viewer says about themselves, and what a comment bears on."""

from __future__ import annotations

import pytest

from schedulers.memory import (
    Fact,
    asks_to_forget,
    bearing,
    extract_facts,
    facts_from_model,
    forgotten_line,
    may_state_facts,
    topic_of,
)

STATED = [
    ("I'm from Berlin!", [("home", "", "Berlin")]),
    ("hi from New York and I love it", [("home", "", "New York")]),
    ("im from germany lol", [("home", "", "Germany")]),
    ("I live in Sao Paulo, Brazil", [("home", "", "Sao Paulo")]),
    ("my cat is called Miso", [("pet", "cat", "Miso")]),
    ("I have a dog named Rex", [("pet", "dog", "Rex")]),
    ("I'm learning Rust these days", [("learning", "", "Rust")]),
    ("I am studying Japanese for my exam", [("learning", "", "Japanese")]),
    ("I work as a nurse", [("job", "", "nurse")]),
    ("call me Bob", [("name", "", "Bob")]),
    ("my favourite game is Celeste", [("favourite", "game", "Celeste")]),
    ("我在学日语", [("learning", "", "日语")]),
    ("我来自北京，很高兴认识你们", [("home", "", "北京")]),
    ("我是上海人", [("home", "", "上海")]),
    ("我在深圳，今天好热", [("home", "", "深圳")]),
    ("我家猫叫咪咪", [("pet", "cat", "咪咪")]),
    ("大家好，我是一名护士，家里养了一只狗叫豆豆", [("pet", "dog", "豆豆"), ("job", "", "护士")]),
    ("我家有只猫叫花花", [("pet", "cat", "花花")]),
    ("我们家的狗狗叫做球球", [("pet", "dog", "球球")]),
    ("我最喜欢的游戏是塞尔达", [("favourite", "游戏", "塞尔达")]),
]
NOTHING = ["I'm from the future", "i live in the city", "我在看直播", "我在上班呢", "I'm learning a lot from you",
           "what do you think about rust?", "hello!", "我在学", "",
           "我朋友家里的狗叫豆豆", "我朋友养了一只狗叫豆豆"]


@pytest.mark.parametrize(("text", "facts"), STATED)
def test_facts_stated_in_english_and_chinese(text: str, facts: list[tuple[str, str, str]]) -> None:
    assert [(f.kind, f.detail, f.value) for f in extract_facts(text)] == facts


@pytest.mark.parametrize("text", NOTHING)
def test_comments_that_state_no_fact(text: str) -> None:
    assert extract_facts(text) == []


def test_what_a_comment_bears_on() -> None:
    berlin, rust, miso = Fact("home", "Berlin"), Fact("learning", "Rust"), Fact("pet", "Miso", "cat")
    facts = [berlin, rust, miso]
    assert bearing("any tips for the weather where I live?", facts) == [berlin]
    assert bearing("how should I practice for my exam", facts) == [rust]
    assert bearing("back again! any tips for practicing my pronunciation?", facts) == [rust]
    assert bearing("Miso knocked my cup over", facts) == [miso]
    assert bearing("my cat is asleep on me", facts) == [miso]
    assert bearing("what's your favourite colour?", facts) == []
    assert bearing("我这里今天下雨了", [Fact("home", "北京", "", "zh")]) == [Fact("home", "北京", "", "zh")]
    assert bearing("日语考试好难", [Fact("learning", "日语", "", "zh")]) == [Fact("learning", "日语", "", "zh")]


def test_topics() -> None:
    assert topic_of("what do you think about rust?") == "rust"
    assert topic_of("我来自北京") == "北京"
    assert topic_of("我是一名护士") == "护士"
    assert topic_of("hi!") == ""


def test_a_fact_round_trips_as_a_line() -> None:
    fact = Fact("favourite", "Celeste | the game", "game")
    assert Fact.parse(fact.line) == Fact("favourite", "Celeste | the game", "game")


@pytest.mark.parametrize("text", ["!forget", "!FORGET", "  !forget  ", "!forget me", "!forgetme", "!忘记我", "！忘了我"])
def test_a_viewer_asks_to_be_forgotten(text: str) -> None:
    assert asks_to_forget(text)


@pytest.mark.parametrize("text", ["forget it", "!forget about the last game", "don't !forget", "", "!forgot"])
def test_other_comments_do_not_ask_to_be_forgotten(text: str) -> None:
    assert not asks_to_forget(text)


def test_the_stage_says_done_in_the_viewers_language_and_without_their_name() -> None:
    assert forgotten_line("!forget").startswith("Done") and "忘" in forgotten_line("!忘记我")


# -- what a model read, held up against the comment --------------------------------------------


def _said(found: object, text: str) -> list[tuple[str, str, str, str]]:
    return [(f.kind, f.detail, f.value, f.language) for f in facts_from_model(found, text)]


def test_a_models_fact_is_kept_only_where_the_comment_says_its_value() -> None:
    text = "Berlin is where I grew up, and my little dog Biscuit loves it"
    found = [{"kind": "home", "value": "Berlin", "detail": ""}, {"kind": "pet", "value": "Biscuit", "detail": "dog"},
             {"kind": "job", "value": "engineer", "detail": ""},       # not said: invented
             {"kind": "hobby", "value": "Berlin", "detail": ""},       # not a kind
             {"kind": "home", "value": "Munich", "detail": ""}]        # a second home: the first kept
    assert _said(found, text) == [("home", "", "Berlin", "en"), ("pet", "dog", "Biscuit", "en")]


def test_a_models_answer_of_the_wrong_shape_gives_nothing() -> None:
    text = "I'm a nurse"
    for found in (None, "nurse", {"kind": "job"}, [None, 3, "job"], [{"kind": "job", "value": ["nurse"]}]):
        assert _said(found, text) == []


def test_a_model_value_is_trimmed_and_a_lower_case_home_capitalised() -> None:
    text = "grew up in  sao paulo!! still here"
    assert _said([{"kind": "home", "value": " sao  paulo! ", "detail": "x"}], text) == [("home", "", "Sao Paulo", "en")]
    assert _said([{"kind": "name", "value": "me", "detail": ""}], "call me maybe") == []   # a pronoun is no value
    assert _said([{"kind": "job", "value": "x" * 40, "detail": ""}], "x" * 40) == []      # too long to be a fact


def test_a_pets_animal_and_a_favourites_category_must_be_said_too() -> None:
    assert _said([{"kind": "pet", "value": "Biscuit", "detail": "dragon"}], "my Biscuit says hi") == []
    assert _said([{"kind": "pet", "value": "Biscuit", "detail": "dragon"}], "my dog Biscuit says hi") == [
        ("pet", "dog", "Biscuit", "en")]                                   # the animal the comment names
    assert _said([{"kind": "pet", "value": "Mochi", "detail": ""}], "our hamster Mochi is asleep") == [
        ("pet", "hamster", "Mochi", "en")]
    assert _said([{"kind": "pet", "value": "cat", "detail": "cat"}], "what do you think about cats?") == []


def test_a_models_fact_of_a_kind_the_comment_says_nothing_of_is_dropped() -> None:
    text = "my fave band is Radiohead and I live in Leeds"
    found = [{"kind": "job", "value": "Radiohead", "detail": ""}, {"kind": "pet", "value": "Leeds", "detail": ""},
             {"kind": "home", "value": "Leeds", "detail": ""}]
    assert _said(found, text) == [("home", "", "Leeds", "en")]
    assert _said([{"kind": "favourite", "value": "Celeste", "detail": "game"}], "Celeste is my fave game") == [
        ("favourite", "game", "Celeste", "en")]
    assert _said([{"kind": "favourite", "value": "Celeste", "detail": "book"}], "Celeste is my fave game") == [
        ("favourite", "game", "Celeste", "en")]                            # the category the comment says
    assert _said([{"kind": "favourite", "value": "Celeste", "detail": "book"}], "Celeste is my favourite") == []
    assert _said([{"kind": "favourite", "value": "塞尔达", "detail": ""}], "我最喜欢的游戏是塞尔达") == [
        ("favourite", "游戏", "塞尔达", "zh")]


def test_a_chinese_comments_facts_keep_the_animal_in_english_as_the_rules_do() -> None:
    text = "我老家在成都，家里的猫叫豆豆"
    found = [{"kind": "home", "value": "成都", "detail": ""}, {"kind": "pet", "value": "豆豆", "detail": "猫"}]
    assert _said(found, text) == [("home", "", "成都", "zh"), ("pet", "cat", "豆豆", "zh")]
    assert _said([{"kind": "home", "value": "北京", "detail": ""}], text) == []


@pytest.mark.parametrize(("text", "may"), [
    ("Berlin is where I grew up", True), ("my dog says hi", True), ("call me Al", True), ("我老家在成都", True),
    ("@host Lisbon has been home for ten years now", True),
    ("what a game!", False), ("lol", False), ("主播好厉害", False), ("", False),
])
def test_only_a_comment_in_the_first_person_is_worth_a_models_reading(text: str, may: bool) -> None:
    assert may_state_facts(text) is may
