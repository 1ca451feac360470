"""Sentences of passages and answers, and the facts a sentence states.

Text is read as Markdown or plain text. A sentence ends at ``.``, ``!`` or ``?`` followed by a space (a known
abbreviation such as ``e.g.`` or ``Dr.`` does not end one) and at a paragraph's end (a blank line). A single line
break inside a paragraph continues its sentence (hard-wrapped prose), except where the next line starts a block of
its own: a table row, a list item, a heading and a line of a code block are each whole (a fact in a table row or a
list item is quoted with its row or item). The citation markers an answer puts after a sentence (``It closes at
13:00 [1].``, ``... 13:00. [1]``) stay with it.

The facts of a sentence are what an answer must never invent: its numbers (times, dates, amounts, counts,
telephone numbers; thousands separators dropped, ``13h00`` read as ``13:00``, English number words as digits) and
its names (a capitalised word after the first, or a word with a capital inside it such as ``eThekwini`` or
``SASSA``; a lower-case class prefix glued to a name is dropped: ``yaseMamelodi`` -> ``mamelodi``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from engines.search.lexical import tokenize

MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_MARKERS_AFTER = r"(?:\s*\[\d+(?:\s*,\s*\d+)*\])*"
# a sentence ends after . ! ? (and the citation markers that follow it), where whitespace comes next
_END = re.compile(r"[.!?]+[\"')\]]*" + _MARKERS_AFTER + r"(?=\s|$)")
_ABBREVIATIONS = frozenset({"e.g", "i.e", "dr", "mr", "mrs", "ms", "prof", "no", "nr", "st", "etc", "vs", "cf", "bl"})
_THOUSANDS = re.compile(r"(?<![\d.,])(\d{1,3})((?:[ ,\u00a0]\d{3})+)(?![\d])")
_TIME = re.compile(r"(?<!\d)(\d{1,2})[:hH](\d{2})(?!\d)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# an ordinal (2nd, 4th, 7de, 1ste) is not the count it is written with: ``#2`` for ``2nd``, never ``2``
_ORDINAL = re.compile(r"(?<![\d.,])(\d+)(?:st|nd|rd|th|ste|de)\b", re.IGNORECASE)
_NUMBER_WORDS = {
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "fifteen": "15",
    "twenty": "20",
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "ninety": "90",
    "hundred": "100",
    "thousand": "1000",
}
_WORD = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)
# a class prefix glued to a name: yaseMamelodi, e-API, eThekwini (lower case), NgoMgqibelo, KwaMashu (capitalised)
_PREFIXED = re.compile(r"^[a-z]{1,4}-?(?=[A-Z])|^[A-Z][a-z]{1,3}-?(?=[A-Z][a-z])")


# a line that is a block of its own: a table row, a heading, a list item (``-``, ``*``, ``+``, ``1.``, ``1)``)
_TABLE_ROW = re.compile(r"^\s*\|")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S")
_FENCE = re.compile(r"^\s*(?:```|~~~)")


@dataclass(frozen=True)
class Span:
    """A sentence: ``text[start:end]`` of the text it came from, and ``text``, that slice with each run of
    whitespace (a line break of hard-wrapped prose) as one space."""

    start: int
    end: int
    text: str


BlockKind = Literal["prose", "item", "row", "heading", "code"]


@dataclass(frozen=True)
class Block:
    """A paragraph (``prose``), list item, table row, heading or code line: ``text[start:end]``. A row, a heading
    and a code line are one sentence each."""

    start: int
    end: int
    kind: BlockKind = "prose"
    paragraph: int = 0  # its paragraph's number: blocks between two blank lines share one

    @property
    def whole(self) -> bool:
        return self.kind in ("row", "heading", "code")


def blocks(text: str) -> list[Block]:
    """The blocks of ``text`` in order (see the module's docstring)."""
    found: list[Block] = []
    open_start: int | None = None  # the prose block (paragraph or list item) being continued
    open_end = 0
    open_kind: BlockKind = "prose"
    paragraph = 0
    lines = text.split("\n")
    in_code = _starts_in_code(lines)

    def close() -> None:
        nonlocal open_start
        if open_start is not None:
            found.append(Block(open_start, open_end, open_kind, paragraph))
            open_start = None

    line_start = 0
    for content in lines:
        line_end = line_start + len(content)
        line = (line_start, line_end)
        line_start = line_end + 1
        if _FENCE.match(content):
            close()
            in_code = not in_code
            continue
        if not content.strip():
            close()
            paragraph += 1
            continue
        whole = "code" if in_code else _whole_line(content)
        if whole is not None:
            close()
            found.append(Block(*line, whole, paragraph))
            continue
        if _LIST_ITEM.match(content):
            close()
        if open_start is None:
            open_start = line[0]
            open_kind = "item" if _LIST_ITEM.match(content) else "prose"
        open_end = line[1]
    close()
    return found


def _whole_line(line: str) -> BlockKind | None:
    """The kind of a line that is a block of its own (a table row, a heading), else None."""
    if _TABLE_ROW.match(line):
        return "row"
    return "heading" if _HEADING.match(line) else None


def _starts_in_code(lines: list[str]) -> bool:
    """Whether the text begins inside a code block (a passage cut from the middle of one): its first fence is a
    bare one with a blank line or nothing after it, which closes a block rather than opening one."""
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            after = lines[number + 1] if number + 1 < len(lines) else ""
            return line.strip() in ("```", "~~~") and not after.strip()
    return False


def split(text: str) -> list[Span]:
    """The sentences of ``text`` with their offsets (whitespace around them left out)."""
    return [span for block in blocks(text) for span in block_sentences(text, block)]


def block_sentences(text: str, block: Block) -> list[Span]:
    """The sentences of one block of ``text``."""
    spans: list[Span] = []
    piece = text[block.start : block.end]
    start = 0
    if not block.whole:
        for end in _ends(piece):
            _add(spans, text, block.start + start, block.start + end)
            start = end
    _add(spans, text, block.start + start, block.end)
    return spans


def _ends(line: str) -> list[int]:
    ends = []
    for match in _END.finditer(line):
        before = line[: match.start()].rsplit(None, 1)
        word = before[-1].lower().rstrip(".") if before else ""
        if match.group().startswith(".") and (word in _ABBREVIATIONS or len(word) == 1):
            continue  # e.g. / Dr. / an initial
        ends.append(match.end())
    return ends


def _add(spans: list[Span], text: str, start: int, end: int) -> None:
    piece = text[start:end]
    stripped = piece.strip()
    if any(ch.isalnum() for ch in stripped):
        lead = len(piece) - len(piece.lstrip())
        spans.append(Span(start + lead, start + lead + len(stripped), " ".join(stripped.split())))


def cited(sentence: str) -> set[int]:
    """The source numbers a sentence cites: ``[1]``, ``[2, 3]``."""
    return {int(n) for group in MARKER.findall(sentence) for n in group.split(",")}


def without_markers(sentence: str) -> str:
    return re.sub(r"\s+([.!?])", r"\1", MARKER.sub("", sentence)).strip()


def numbers(text: str) -> set[str]:
    """The numbers ``text`` states, normalised: ``R2,315`` -> ``2315``, ``08:00``/``8h00`` -> ``8:00`` (and the
    hour ``8`` a time also states), ``five`` -> ``5``, the ordinal ``2nd``/``2de`` -> ``#2``."""
    text = _THOUSANDS.sub(lambda m: m.group(1) + re.sub(r"\D", "", m.group(2)), text)
    found: set[str] = set()
    for hour, minute in _TIME.findall(text):
        found |= {f"{int(hour)}:{minute}", str(int(hour))}
    text = _TIME.sub(" ", text)
    found |= {f"#{int(n)}" for n in _ORDINAL.findall(text)}
    text = _ORDINAL.sub(" ", text)
    for number in _NUMBER.findall(text):
        found.add(re.sub(r"^0+(?=\d)", "", number))
    found |= {_NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in _NUMBER_WORDS}
    return found


def names(text: str) -> set[str]:
    """The names ``text`` states (lower-cased, class prefixes dropped): capitalised words after a sentence's
    first word, and words with a capital inside them anywhere."""
    found = set()
    for index, match in enumerate(_WORD.finditer(text)):
        word = match.group().rstrip("'’-")
        inner = any(ch.isupper() for ch in word[1:])
        at_start = index == 0 or text[: match.start()].rstrip().endswith((".", "!", "?", ":", "\n"))
        if len(word) > 1 and (inner or (word[:1].isupper() and not at_start)):
            found.add(name_key(word))
    found.discard("")
    return found


def name_key(word: str) -> str:
    """How a name is compared: without its class prefix, lower-cased, a plural or possessive ``s`` dropped."""
    while (bare := _PREFIXED.sub("", word)) != word:
        word = bare
    word = word.lower()
    for suffix in ("'s", "’s", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    """The words of ``text`` as written."""
    return [w.rstrip("'’-") for w in _WORD.findall(text)]


def words_of(text: str) -> set[str]:
    """Every word of ``text`` by :func:`name_key` (what a name in an answer is looked up in)."""
    return {name_key(w.rstrip("'’-")) for w in _WORD.findall(text)}


def content(text: str) -> list[str]:
    """The content words of ``text`` (the search tokenizer's, numbers left out), each cut to a crude stem."""
    return [stem(t) for t in tokenize(MARKER.sub(" ", text)) if not t[0].isdigit()]


def stem(token: str) -> str:
    """A crude stem that joins inflections of one word (``closes``/``close``, ``pipes``/``pipe``,
    ``immunised``/``immunisations``): an English ending dropped, then the first five letters."""
    for ending in ("ing", "ed", "s"):
        if token.endswith(ending) and len(token) - len(ending) >= 3:
            token = token[: -len(ending)]
            break
    return token[:5]


@dataclass(frozen=True)
class Context:
    """A sentence of a passage in its context: ``around`` is the paragraph's first sentence, the sentence before it
    and itself (where "It" and "Its" point; a passage cut from the middle of a paragraph starts one), ``words`` its
    content words; ``position`` counts the passage's sentences; ``heading`` says it states no fact (a heading, or
    a title: a paragraph of one line with no final stop)."""

    sentence: str
    around: str
    words: frozenset[str]
    position: int
    heading: bool
    own: frozenset[str] = frozenset()  # the sentence's own content words
    names: frozenset[str] = frozenset()  # every word of its context by name key
    numbers: frozenset[str] = frozenset()  # the sentence's own numbers


@functools.lru_cache(maxsize=256)  # an answer's sentences are checked against the same few passages
def contexts(passage: str) -> tuple[Context, ...]:
    """Each sentence of ``passage`` in its context, in order."""
    out: list[Context] = []
    found = blocks(passage)
    first, previous, paragraph = "", "", -1
    for number, block in enumerate(found):
        if block.paragraph != paragraph:
            paragraph, first, previous = block.paragraph, "", ""
        spans = block_sentences(passage, block)
        alone = all(other.paragraph != paragraph for other in found[max(0, number - 1) : number + 2] if other != block)
        title = block.kind == "prose" and alone and len(spans) == 1 and not spans[0].text.endswith((".", "!", "?", ":"))
        for span in spans:
            first = first or span.text
            around = " ".join(dict.fromkeys((first, previous, span.text)))
            heading = block.kind == "heading" or title
            out.append(
                Context(
                    span.text,
                    around,
                    frozenset(content(around)),
                    len(out),
                    heading,
                    frozenset(content(span.text)),
                    frozenset(words_of(around)),
                    frozenset(numbers(span.text)),
                )
            )
            previous = span.text
    return tuple(out)
