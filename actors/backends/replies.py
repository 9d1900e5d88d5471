"""Reply library and detection word lists for the scripted LLM backend (pure data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# Placeholders a template may use: {user} viewer name, {topic} word from the comment,
# {name} the persona's display name, {n} how many viewers said the same thing.
PLACEHOLDERS: tuple[str, ...] = ("user", "topic", "name", "n")

THEMES: tuple[str, ...] = (
    "greeting", "question", "compliment", "games", "music", "food", "tech",
    "gift", "generic", "merged", "deflect",
)

# Themes picked by topic words; order breaks ties when two themes match equally often.
TOPIC_THEMES: tuple[str, ...] = ("games", "music", "food", "tech")


@dataclass(frozen=True, slots=True)
class LanguagePack:
    """All reply text for one language: templates per theme, tails and fallbacks."""

    default_user: str
    default_self: str
    default_topic: Mapping[str, str]
    themes: Mapping[str, tuple[str, ...]]
    tails: tuple[str, ...]
    joiner: str


_EN_THEMES: dict[str, tuple[str, ...]] = {
    "greeting": (
        "Hey {user}, welcome in! Grab a seat.",
        "Hi {user}! So glad you made it.",
        "Welcome, {user}! {name} is happy to see you.",
        "Hello {user}! You're just in time.",
        "Oh hey, {user}! Make yourself at home.",
        "Hi hi, {user}! The chat just got better.",
    ),
    "question": (
        "Good question, {user}! I'd say {topic} is worth a closer look.",
        "Ooh, {topic}? Let me think about that, {user}.",
        "Great question about {topic}, {user}! Short answer: it depends.",
        "Honestly, {user}? I'd go with {topic} every time.",
        "Hmm, {topic}, huh? Ask me again after this segment, {user}!",
        "You always ask the fun ones, {user}! My take on {topic}: yes, absolutely.",
    ),
    "compliment": (
        "Aww, thank you {user}! You just made my day.",
        "Stop it, {user}, you're too kind!",
        "That means so much, {user}! Right back at you.",
        "You're the sweetest, {user}! Thanks for the love.",
        "Thank you, {user}! {name} is blushing over here.",
        "Wow, thanks {user}! Chat like you is why I stream.",
    ),
    "games": (
        "Oh, {topic}? Now you're speaking my language, {user}!",
        "I could talk about {topic} all day, {user}!",
        "Ooh, {topic}! We should play together sometime, {user}.",
        "Game time! {user}, what's your best {topic} moment?",
        "Nice, {user}! I never say no to {topic}.",
        "You get it, {user}! Honestly, {topic} is pure joy.",
    ),
    "music": (
        "Ooh, {topic}! That's a vibe, {user}.",
        "Great taste, {user}! Honestly, {topic} always hits.",
        "Music talk with {user}? Yes please, I adore {topic}!",
        "I'd love to sing about {topic} later, {user}!",
        "Adding {topic} to my mental playlist right now, {user}!",
        "Oh, {topic}? That puts me in a good mood, {user}.",
    ),
    "food": (
        "Now I'm hungry, {user}! That {topic} sounds amazing.",
        "Ooh, {topic}? Save me a bite, {user}!",
        "You're making me crave {topic}, {user}!",
        "Talking about {topic} right now, {user}? Dangerous!",
        "Good call, {user}! Nothing beats {topic}.",
        "Yum! {user}, tell me your favorite {topic} spot.",
    ),
    "tech": (
        "Ooh, {topic}! A fellow nerd, {user}?",
        "I think {topic} is so cool these days, {user}!",
        "I love geeking out about {topic}, {user}!",
        "Tech talk! {user}, what got you into {topic}?",
        "Nice, {user}! I think {topic} keeps getting better.",
        "Careful, {user}, mention {topic} and I'll ramble for hours!",
    ),
    "gift": (
        "Thank you so much for the gift, {user}! You're amazing.",
        "Wow, {user}, thank you! That's so generous.",
        "You legend, {user}! Thanks for the support.",
        "Big thanks to {user}! The whole crew appreciates you.",
        "Aww, {user}, you didn't have to! Thank you!",
        "{name} says thank you, {user}! You keep this stream going.",
    ),
    "generic": (
        "Ha, I hear you, {user}! Tell me more about {topic}.",
        "Interesting take on {topic}, {user}!",
        "Ooh, {topic}? I like where this is going, {user}.",
        "Thanks for sharing, {user}! I'll keep {topic} in mind.",
        "Totally, {user}! Chat always brings the best stuff.",
        "You always make me think, {user}! I'm curious about {topic} now.",
    ),
    "merged": (
        "Wow, {n} of you said that! I hear you loud and clear.",
        "Okay, {n} people on {topic}! Chat has spoken.",
        "I see you, {user} and friends! That's {n} votes for {topic}.",
        "The chat agrees! {n} of you are on {topic}.",
        "Whoa, {n} messages at once! Thanks, {user} and everyone.",
        "Looks like {n} of you feel the same! Love this chat.",
    ),
    # Deflections never use {topic}: the comment tried to steer the model, so echo none of it.
    "deflect": (
        "Nice try, {user}! I'm {name}, and I'm staying me.",
        "Ha, {user}, that trick won't work on {name}! Let's keep chatting.",
        "Sorry, {user}, I only play myself on this stream!",
        "You're sneaky, {user}! But I'm still just {name}.",
        "Cute attempt, {user}! Back to the fun stuff.",
        "No secret menus here, {user}! Ask me something fun instead.",
    ),
}

_ZH_THEMES: dict[str, tuple[str, ...]] = {
    "greeting": (
        "欢迎{user}！快找个位置坐下吧。",
        "{user}你好呀！终于等到你了。",
        "哈喽{user}！{name}好开心见到你。",
        "欢迎欢迎，{user}！来得正是时候。",
        "嗨{user}！把这里当自己家哦。",
        "{user}来啦！直播间更热闹了。",
    ),
    "question": (
        "好问题，{user}！我觉得{topic}值得好好聊聊。",
        "{topic}吗？让我想想哦，{user}。",
        "{user}问到点子上了！关于{topic}，我的答案是肯定的。",
        "嗯，{topic}呀？{user}，等我这段讲完再说。",
        "{user}总是问有趣的问题！{topic}的话，我投赞成票。",
        "这个问题好，{user}！{topic}真的要看情况。",
    ),
    "compliment": (
        "谢谢{user}！你让我今天超开心。",
        "哎呀{user}，你太会夸了！",
        "{user}你也超棒的！谢谢你的喜欢。",
        "被{user}夸到脸红了！{name}爱你哦。",
        "谢谢{user}！有你们我才更有动力。",
        "{user}嘴真甜！我收下啦。",
    ),
    "games": (
        "{topic}？这可说到我心坎上了，{user}！",
        "{user}，聊{topic}我能聊一整天！",
        "{topic}好玩！{user}下次一起开黑吧。",
        "{user}，你玩{topic}最难忘的时刻是什么？",
        "说到{topic}我就来劲了，{user}！",
        "{user}也喜欢{topic}？我们是同道中人！",
    ),
    "music": (
        "{topic}！好有感觉，{user}。",
        "{user}品味真好！{topic}太好听了。",
        "一起聊{topic}吧，{user}！我最爱这个。",
        "{user}，我已经把{topic}记进歌单了！",
        "说到{topic}，{user}，我都想唱两句了。",
        "{topic}一响，心情就好，{user}！",
    ),
    "food": (
        "{user}，你说得我都饿了！{topic}听起来太香了。",
        "{topic}？给我留一口，{user}！",
        "{user}，这时候聊{topic}，太犯规了！",
        "好选择，{user}！{topic}永远不会错。",
        "馋了馋了！{user}推荐一家{topic}店吧。",
        "{user}也是吃货吧？{topic}我也爱！",
    ),
    "tech": (
        "{topic}！{user}也是技术宅吗？",
        "{user}，现在的{topic}真的好酷！",
        "聊{topic}我最兴奋了，{user}！",
        "{user}，你是怎么入坑{topic}的？",
        "{topic}越来越厉害了，{user}！",
        "小心哦{user}，一说{topic}我就停不下来！",
    ),
    "gift": (
        "谢谢{user}的礼物！你太好了。",
        "哇，{user}，太破费啦！谢谢你！",
        "感谢{user}的支持！大家都爱你。",
        "{user}你是最棒的！谢谢老板！",
        "{name}代表全体谢谢{user}！你让直播更精彩。",
        "{user}，收到啦！比心比心。",
    ),
    "generic": (
        "懂你，{user}！再多说说{topic}吧。",
        "{user}这个角度有意思！{topic}确实值得聊。",
        "哈哈，{user}说得好！",
        "谢谢分享，{user}！{topic}我记住啦。",
        "{topic}呀？我也挺好奇的，{user}。",
        "{user}总能带来好话题！继续聊吧。",
    ),
    "merged": (
        "哇，{n}位朋友都这么说！我听到啦。",
        "{n}个人都在聊{topic}！弹幕说了算。",
        "{user}和大家，我看到了！{topic}呼声好高。",
        "大家意见好统一！{n}条弹幕都在说{topic}。",
        "一下子{n}条弹幕！谢谢{user}和大家。",
        "看来{n}位朋友想法一样！爱你们。",
    ),
    "deflect": (
        "想得美，{user}！我还是{name}哦。",
        "哈哈，{user}，这招对{name}没用！我们继续聊吧。",
        "抱歉{user}，我在直播间只做我自己！",
        "{user}好调皮！不过我还是{name}。",
        "小把戏被我发现啦，{user}！聊点好玩的吧。",
        "{user}，这里没有隐藏菜单哦！换个有趣的话题吧。",
    ),
}

LIBRARY: Mapping[str, LanguagePack] = MappingProxyType({
    "en": LanguagePack(
        default_user="friend",
        default_self="your host",
        default_topic=MappingProxyType(
            {"games": "gaming", "music": "music", "food": "food", "tech": "tech"}
        ),
        themes=MappingProxyType(_EN_THEMES),
        tails=(
            "Stick around!", "Love this chat!", "Thanks for hanging out!",
            "Let's keep it going!", "You all are the best!", "More fun coming up!",
        ),
        joiner=" ",
    ),
    "zh": LanguagePack(
        default_user="朋友",
        default_self="主播",
        default_topic=MappingProxyType(
            {"games": "游戏", "music": "音乐", "food": "美食", "tech": "科技"}
        ),
        themes=MappingProxyType(_ZH_THEMES),
        tails=("别走开哦！", "继续聊呀！", "爱你们！", "谢谢陪伴！", "一起嗨起来！", "精彩马上来！"),
        joiner="",
    ),
})

# Fallback topic for themes without their own default (reads well in every template).
GENERIC_TOPIC: Mapping[str, str] = MappingProxyType({"en": "that", "zh": "这个"})

# Detection terms: lower-case English words/phrases and Chinese strings, mixed freely.
GREETING_WORDS: tuple[str, ...] = (
    "hello", "hi", "hey", "hiya", "howdy", "yo", "greetings", "good morning",
    "good evening", "good afternoon", "sup",
    "你好", "您好", "哈喽", "嗨", "大家好", "主播好", "晚上好", "早上好", "下午好", "来了",
)
QUESTION_STARTS: tuple[str, ...] = (
    "what", "why", "how", "who", "when", "where", "which", "do you", "can you",
    "are you", "have you", "is it", "will you", "could you", "would you", "does",
)
QUESTION_MARKERS: tuple[str, ...] = (
    "吗", "什么", "怎么", "为什么", "哪", "谁", "多少", "是不是", "有没有", "能不能", "会不会",
)
COMPLIMENT_WORDS: tuple[str, ...] = (
    "love you", "awesome", "amazing", "cute", "beautiful", "pretty", "best", "so good",
    "nice", "cool", "wonderful", "talented", "fantastic", "great stream", "love your",
    "可爱", "厉害", "太棒", "好棒", "好看", "漂亮", "喜欢你", "爱你", "牛", "666", "优秀",
    "绝了", "yyds",
)
GIFT_WORDS: tuple[str, ...] = (
    "gift", "gifted", "donate", "donated", "donation", "sub", "subbed", "subscribed",
    "bits", "tip", "tipped", "superchat", "super chat", "rocket",
    "礼物", "打赏", "火箭", "送了", "刷了", "嘉年华", "舰长", "充电", "投币", "小心心",
)
TOPIC_WORDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "games": (
        "games", "game", "gaming", "gamer", "minecraft", "zelda", "mario", "pokemon",
        "fortnite", "valorant", "boss", "speedrun", "rpg", "fps", "steam", "nintendo",
        "xbox", "playstation", "ps5", "genshin", "esports",
        "游戏", "打游戏", "原神", "王者", "吃鸡", "通关", "副本", "开黑", "上分", "手游",
        "我的世界", "塞尔达", "宝可梦", "电竞",
    ),
    "music": (
        "music", "song", "songs", "sing", "singing", "sang", "album", "band", "concert",
        "guitar", "piano", "drums", "playlist", "lyrics", "melody", "rap", "jazz", "rock",
        "kpop", "k pop", "spotify",
        "音乐", "歌", "唱", "专辑", "演唱会", "吉他", "钢琴", "歌词", "旋律", "乐队", "说唱",
    ),
    "food": (
        "food", "eat", "eating", "ate", "hungry", "dinner", "lunch", "breakfast", "snack",
        "pizza", "ramen", "noodles", "sushi", "burger", "cook", "cooking", "recipe",
        "dessert", "cake", "coffee", "tea", "delicious", "tasty",
        "吃", "美食", "饿", "晚饭", "午饭", "早饭", "火锅", "奶茶", "面条", "烧烤", "做饭",
        "甜点", "蛋糕", "咖啡", "好吃", "外卖", "零食",
    ),
    "tech": (
        "tech", "technology", "computer", "pc", "laptop", "phone", "code", "coding",
        "program", "programming", "python", "ai", "robot", "gpu", "cpu", "software",
        "app", "linux", "keyboard", "internet", "chatgpt", "llm",
        "科技", "电脑", "手机", "编程", "代码", "程序", "人工智能", "机器人", "显卡", "芯片",
        "软件", "键盘", "数码", "网络",
    ),
})

# Prompt-injection markers. Phrases match whole words; compact forms match with all
# spacing/punctuation removed (beats "s y s t e m prompt"); raw forms match the text as is.
INJECTION_PHRASES: tuple[str, ...] = (
    "ignore previous", "ignore all previous", "ignore the above", "ignore above",
    "ignore your", "ignore all instructions", "ignore prior", "disregard", "system prompt",
    "system message", "you are now", "you re now", "act as", "pretend to be",
    "pretend you are", "roleplay as", "developer mode", "dan mode", "new instructions",
    "forget your", "forget all", "forget everything", "reveal your", "your instructions",
    "your prompt", "your rules", "initial prompt", "prompt injection", "override",
    "repeat after me", "say after me", "跟我说", "跟我念", "重复我的话",
    "你现在是", "你现在扮演", "忽略之前", "忽略以上", "忽略上面", "忽略前面", "忽略所有",
    "忽略你的", "无视之前", "无视以上", "无视所有", "忘记之前", "忘记你的", "忘掉之前",
    "系统提示", "系统指令", "提示词", "新的指令", "你的指令", "请扮演", "假装你是", "越狱",
    "开发者模式", "从现在开始你是", "从现在起你是", "你的设定",
)
INJECTION_COMPACT: tuple[str, ...] = (
    "systemprompt", "ignoreprevious", "ignoreallprevious", "previousinstructions",
    "jailbreak", "developermode", "imstart", "imend",
)
INJECTION_RAW: tuple[str, ...] = ("system:", "[system]", "<|", "|>", "<<sys>>", "[inst]")

# Words never used as {topic}: function words, trigger words, and injection vocabulary.
_EN_STOPWORD_TEXT = """
a an the and or but if then than so of to in on at by for with from into onto about as
is am are was were be been being do does did done have has had having will would can
could should shall may might must i me my mine we us our you your yours he him his she
her it its they them their this that these those there here what which who whom whose
why how when where all any some no not nor only own same too very just also really
still even ever much many more most such one two lol haha hahaha lmao omg wow yes yeah
yep nope ok okay oh ah um uh hmm please thanks thank thx love like likes liked want
wants think know knew going gonna wanna get got make made let lets say said tell see
look play playing played today tonight now stream streamer chat everyone everybody guys
hello hey hiya howdy greetings good great nice cool best awesome amazing cute pretty
beautiful hungry delicious tasty ignore ignored previous prior instructions instruction
system prompt prompts disregard pretend jailbreak developer mode reveal forget above
rules override roleplay assistant thought thoughts stuff thing things something
anything everything people guy time new
"""
EN_STOPWORDS: frozenset[str] = frozenset(_EN_STOPWORD_TEXT.split())

# Chinese function words split a comment into candidate topic spans; longest first.
ZH_STOPWORDS: tuple[str, ...] = tuple(sorted((
    "喜欢", "觉得", "什么", "怎么", "为什么", "可以", "一下", "一起", "今天", "现在", "大家",
    "主播", "我们", "你们", "他们", "这个", "那个", "这么", "那么", "真的", "非常", "特别",
    "有点", "还是", "就是", "但是", "因为", "所以", "如果", "已经", "没有", "不是", "知道",
    "你好", "哈哈", "谢谢", "好吃", "好听", "好看", "想要",
    "的", "了", "吗", "呢", "啊", "吧", "呀", "哦", "嘛", "哈", "我", "你", "他", "她", "它",
    "是", "在", "也", "都", "很", "就", "和", "与", "还", "又", "被", "把", "给", "这", "那",
    "么", "玩", "听", "吃", "看", "想", "爱", "要", "会", "有", "太", "最", "去", "来", "个",
    "好", "嗯", "啦",
), key=len, reverse=True))


# Openers: what a role says at once while a model writes the rest of its reply, by what the
# comment is ({user} is the viewer).  Short (under a second of speech) and varied; they end in
# a dash or a mark so that the model's first sentence follows on.
OPENERS: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "en": MappingProxyType({
        "greeting": ("Hey {user}!", "Oh, hi {user}!", "Welcome, {user}!", "Hello hello, {user}!"),
        "question": ("Ooh, good one, {user} —", "Hmm, good question, {user} —", "Okay, {user}, so —",
                     "Oh, let me think, {user} —", "Great question, {user}!"),
        "compliment": ("Aww, {user}!", "Oh stop it, {user}!", "Thank you, {user}!"),
        "gift": ("Wow, {user}, thank you!", "Oh my, {user}!", "{user}, you're amazing!"),
        "merged": ("Okay, chat, I hear you —", "Whoa, so many of you —", "Alright, everyone —"),
        "deflect": ("Ha, nice try, {user}!", "Hmm, {user}, no —"),
        "generic": ("Oh, {user} —", "Ha, {user}, you know what —", "Okay, {user} —", "Ooh, {user} —",
                    "Right, {user} —", "So, {user} —"),
    }),
    "zh": MappingProxyType({
        "greeting": ("{user}，你好呀！", "欢迎{user}！", "哈喽{user}！"),
        "question": ("好问题！", "嗯，这个嘛——", "{user}问得好！", "让我想想——"),
        "compliment": ("哎呀，{user}！", "谢谢{user}！", "好开心！"),
        "gift": ("哇，谢谢{user}！", "{user}太好了！", "感谢{user}！"),
        "merged": ("好多人都这么说——", "大家的意思我懂——"),
        "deflect": ("哈哈，{user}，别闹啦！", "嗯，{user}，这个不行——"),
        "generic": ("嗯，{user}——", "哈哈，{user}——", "{user}说得对——", "是呀，{user}——"),
    }),
})
