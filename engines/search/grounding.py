"""Whether a sentence of an answer is grounded in the passages it was given, and which passage sentence answers
instead when it is not.

A sentence is supported by a set of passages when:

- every number it states (time, date, amount, count, telephone number) appears in them, and every name (see
  ``engines.search.sentences``): a fact not in the passages is never shown as grounded;
- one passage sentence says it: its context (the sentence, the one before it and its paragraph's first sentence,
  where "It" and "Its" point) names every name of the sentence, and the passage sentence itself holds at least
  :data:`MIN_SUPPORT` of the sentence's other content words (the search tokenizer's, crudely stemmed): the
  lexical stand-in for entailment (no entailment model ships offline for our languages). A sentence pieced
  together from words of several passage sentences ("The clinic is open on Sundays" from "It is closed on
  Sundays" after "... is open from Monday to Friday") fails;
- every number it states is stated *of the same thing*: a passage sentence that holds the number holds
  :data:`MIN_CONTEXT` of those words (all of them: "support" is all that tells the child support grant's R560
  from the foster child grant's R1,250), and its context every name. A right value bound to something else ("the
  maternity section is open 07:30 to 16:30" where those are the clinic's hours and the maternity section's are
  24 hours; "the SRD grant is R560", the child support grant's amount) fails, and an ordinal is not a count
  (``the 2nd working day`` does not state ``2 working days``);
- it states something: a number, a file name or a citation alone (no content word, or fewer than
  :data:`MIN_WORDS` words and no number), a lead-in ending with ``:`` and a question (the model repeating the one
  it was asked) are withheld;
- it denies only what they deny: a negation (``not``, ``never``, ``nie``, ...) must appear in them too.

The check is deterministic and cheap (microseconds a sentence), so it runs on every sentence as it is generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts.llm import REFUSAL, SentenceOrigin
from engines.search import answering
from engines.search import sentences as text

_REFUSAL_KEY = "don't know from these documents"
MIN_SUPPORT = 0.75  # of a sentence's other content words that one passage sentence must hold
MIN_COVERAGE = 0.5  # of the question's content words (weighted by rarity) a replacement sentence must hold
MIN_CONTEXT = 1.0  # of a sentence's other content words found in the passage sentence that states its number
STALL = 4  # withheld sentences in a row after which a generation is stopped
MIN_WORDS = 3  # words of a sentence that states no number ("(compatibility.md)" states nothing)
NO_WORDS = "nothing it states (a number, a file name or a marker alone, a lead-in, or a question)"
_NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "cannot", "nie", "geen", "nooit", "akukho", "awukho"})


@dataclass(frozen=True)
class Verdict:
    """The check of one sentence: ``sources`` (indexes of the passages that support it, empty when it is not
    supported) and, when it is not, ``reason`` (what is missing, without repeating the unsupported value)."""

    sources: tuple[int, ...]
    reason: str | None = None

    @property
    def supported(self) -> bool:
        return bool(self.sources)


def _negated(words: set[str], raw: str) -> bool:
    return bool(words & _NEGATIONS) or "n't" in raw.lower() or "n’t" in raw.lower()


def unsupported(sentence: str, passage: str) -> str | None:
    """Why ``passage`` does not support ``sentence`` (None: it does)."""
    claim = text.without_markers(sentence)
    words = text.content(claim)
    short = len(text.words(claim)) < MIN_WORDS and not text.numbers(claim)
    if not words or short or claim.endswith(("?", ":")):
        return NO_WORDS
    missing = text.numbers(claim) - text.numbers(passage)
    if missing:
        return f"{'a number' if len(missing) == 1 else 'numbers'} not in the passages"
    names = text.names(claim)
    if names - text.words_of(passage):
        return "a name not in the passages"
    # the name's words as written too: ngoLwesibili is the name Lwesibili, not a word of what is said of it
    named = set(text.content(" ".join(w for w in text.words(claim) if text.name_key(w) in names)))
    plain = [w for w in dict.fromkeys(words) if w not in named]  # what the sentence says of its names
    places = text.contexts(passage)
    if not any(_supports(place, plain, names, MIN_SUPPORT) for place in places):
        return "words the passages do not support"
    for number in text.numbers(claim):
        if not any(number in place.numbers and _supports(place, plain, names, MIN_CONTEXT) for place in places):
            return "a value the passages state of something else"
    lower = {w.lower() for w in text.words_of(claim)}
    if _negated(lower, claim) and not _negated({w.lower() for w in text.words_of(passage)}, passage):
        return "a negation the passages do not state"
    return None


def _supports(place: text.Context, plain: Sequence[str], names: set[str], share: float) -> bool:
    """Whether one passage sentence says what a claim says: its context names every name of the claim (where "It"
    and "Its" point), and the sentence itself holds ``share`` of the claim's other content words (``plain``)."""
    if not names <= place.names:
        return False
    return sum(w in place.own for w in plain) >= share * len(plain)


def check(sentence: str, passages: Sequence[str], cites: Sequence[int] = ()) -> Verdict:
    """Check ``sentence`` against the passages it cites (indexes into ``passages``), together; where it cites
    none, or they do not support it, against each passage alone (the one that supports it becomes its
    citation)."""
    cited = [i for i in dict.fromkeys(cites) if 0 <= i < len(passages)]
    reason = None
    if cited:
        reason = unsupported(sentence, "\n\n".join(passages[i] for i in cited))
        if reason is None:
            return Verdict(tuple(cited))
    for index, passage in enumerate(passages):
        if index in cited:
            continue
        why = unsupported(sentence, passage)
        if why is None:
            return Verdict((index,))
        reason = reason or why
    return Verdict((), reason or "no passage")


def replacement(
    question: str, failed: str, passages: Sequence[str], prefer: Sequence[int] = (), used: Sequence[str] = ()
) -> tuple[int, str] | None:
    """The passage sentence that answers ``question`` in place of the ``failed`` one (``engines/search/
    answering.py``): it holds at least :data:`MIN_COVERAGE` of the question's words, weighted, and the places,
    people and days it names; the most of them wins, then the most words shared with the failed sentence, then a
    passage in ``prefer`` (the ones it cited). None when no sentence qualifies, or the question names something no
    passage holds (``used`` sentences are skipped: an answer says a thing once)."""
    if answering.unknown_names(question, answering.passage_words(passages)):
        return None
    said = set(text.content(failed))
    best: tuple[tuple[float, int, bool], int, str] | None = None
    for found in answering.sentences(question, passages):
        if found.place.sentence in used or found.coverage < MIN_COVERAGE:
            continue
        key = (found.coverage, len(said & found.place.own), found.source in prefer)
        if best is None or key > best[0]:
            best = (key, found.source, found.place.sentence)
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True)
class Checked:
    """A sentence of an answer as it may be shown: ``text`` with the citations of ``sources`` (indexes into the
    passages; "" when withheld), where it came from, and why it was replaced or withheld."""

    text: str
    origin: SentenceOrigin
    sources: tuple[int, ...] = ()
    note: str | None = None


def with_citations(sentence: str, sources: Sequence[int]) -> str:
    """``sentence`` with its markers replaced by those of ``sources`` (numbered from 1), before its final stop."""
    bare = text.without_markers(sentence)
    marker = f" [{', '.join(str(i + 1) for i in sources)}]" if sources else ""
    stop = len(bare) - len(bare.rstrip(".!?;:"))
    return f"{bare[: len(bare) - stop]}{marker}{bare[len(bare) - stop :]}" if stop else f"{bare}{marker}"


class Guard:
    """Checks an answer sentence by sentence as it is generated (:meth:`feed`, then :meth:`finish`): a supported
    sentence is shown as written, cited by the passages that support it; one that is not is replaced by the passage
    sentence that answers the question (:func:`replacement`) or withheld. Nothing is shown before its sentence is
    whole, and nothing shown is taken back. ``record`` keeps every sentence's fate, in order."""

    def __init__(self, question: str, passages: Sequence[str]) -> None:
        self.question = question
        self.passages = list(passages)
        self.buffer = ""
        self.record: list[Checked] = []
        self._said: set[str] = set()

    def feed(self, piece: str) -> list[Checked]:
        """The sentences that ``piece`` completes, checked (each one also in ``record``)."""
        self.buffer += piece
        spans = text.split(self.buffer)
        if len(spans) < 2:
            return []
        done = [self._check(span.text) for span in spans[:-1]]
        self.buffer = self.buffer[spans[-1].start :]
        return done

    def finish(self, cut: bool = False, why: str = "the model began repeating itself") -> list[Checked]:
        """The last sentence, checked; withheld when the generation was ``cut`` midway (``why``: a loop, or the
        guard :attr:`stalled`)."""
        rest = [span.text for span in text.split(self.buffer)]
        self.buffer = ""
        if cut and rest:
            last = Checked("", "withheld", note=f"cut short: {why}")
            self.record.append(last)
            return [self._check(t) for t in rest[:-1]] + [last]
        return [self._check(t) for t in rest]

    @property
    def stalled(self) -> bool:
        """The model has lost its way: its last :data:`STALL` sentences were all withheld (it will not come back
        to the passages; the generation can stop)."""
        return len(self.record) >= STALL and all(c.origin == "withheld" for c in self.record[-STALL:])

    @property
    def shown(self) -> list[Checked]:
        return [c for c in self.record if c.origin != "withheld"]

    def _check(self, sentence: str) -> Checked:
        key = " ".join(text.without_markers(sentence).lower().split())
        if key in self._said:
            checked = Checked("", "withheld", note="repeats an earlier sentence")
        else:
            checked = self._checked(sentence)
            self._said.add(key)
        if checked.text:
            self._said.add(" ".join(text.without_markers(checked.text).lower().split()))
        self.record.append(checked)
        return checked

    def _checked(self, sentence: str) -> Checked:
        if _REFUSAL_KEY in sentence.lower().replace("’", "'"):  # the model says the passages do not answer
            return Checked(REFUSAL, "generated")
        cites = [n - 1 for n in text.cited(sentence)]
        verdict = check(sentence, self.passages, cites)
        if verdict.supported:
            return Checked(with_citations(sentence, verdict.sources), "generated", verdict.sources)
        if verdict.reason == NO_WORDS:  # a stray number or marker: nothing was said that a passage could say
            return Checked("", "withheld", note=f"withheld: it had {NO_WORDS}")
        found = replacement(self.question, sentence, self.passages, cites, used=self._quoted())
        if found is not None:
            index, quoted = found
            note = f"the generated sentence had {verdict.reason}; the passage's own sentence instead"
            return Checked(with_citations(quoted, (index,)), "extracted", (index,), note)
        return Checked("", "withheld", note=f"withheld: it had {verdict.reason}")

    def _quoted(self) -> list[str]:
        return [text.without_markers(c.text) for c in self.record if c.origin == "extracted"]
