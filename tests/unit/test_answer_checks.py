"""The checks behind grounded answers, without Ray: sentences and their facts, the grounding check of a generated
sentence, the guard that shows only checked text, the extractive answerer's choice, and repetition loops."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.llm import REFUSAL
from engines.llm.repetition import loop_start
from engines.search import extractive, grounding
from engines.search import sentences as text

CLINIC = (
    "Mamelodi East Community Health Centre is open from Monday to Friday, 07:00 to 16:00. On Saturdays the clinic "
    "opens at 08:00 and closes at 13:00. It is closed on Sundays and public holidays. The facility manager is "
    "Sister Nomvula Khoza."
)
GRANTS = "The child support grant is R560 per child per month. The older persons grant is R2,315 per month."
QUESTION = "What time does the Mamelodi clinic close on Saturdays?"


def test_sentences_keep_their_citations_and_skip_abbreviations() -> None:
    found = [s.text for s in text.split("It closes at 13:00 [1]. See e.g. the notice. Done. [2]\n| a | b |")]
    assert found == ["It closes at 13:00 [1].", "See e.g. the notice.", "Done. [2]", "| a | b |"]
    assert text.cited("Open at 08:00 [1, 3].") == {1, 3}


def test_facts_are_normalised_the_same_way_on_both_sides() -> None:
    assert {"2315", "13:00", "13", "8:00", "8", "5"} <= text.numbers("R2,315; 13h00 and 08:00 within five days")
    assert text.names("Amanzi azovalwa e-KwaMashu. NgoMgqibelo yaseMamelodi, the SASSA office.") == {
        "mashu",
        "mgqibelo",
        "mamelodi",
        "sassa",
    }


@pytest.mark.parametrize(
    ("sentence", "supported"),
    [
        ("The clinic closes at 13:00 on Saturdays [1].", True),
        ("The clinic closes at 13:30 on Saturdays [1].", False),  # the wrong time
        ("Sister Nomvula Khoza manages it.", True),
        ("The facility manager is Dr Khumalo.", False),  # a name the passage does not have
        ("The clinic is not open on Saturdays.", False),  # a negation the passage does not state
        ("The recommended dosage of paracetamol for children is 10mg/kg.", False),
    ],
)
def test_a_sentence_is_checked_against_its_passage(sentence: str, supported: bool) -> None:
    assert grounding.check(sentence, [CLINIC, GRANTS], [0]).supported is supported


SOSHANGUVE = (
    "Soshanguve Block L Clinic is open from Monday to Friday, 07:30 to 16:30. Its maternity section is open 24 "
    "hours a day, every day of the year. Family planning is offered on Mondays and Wednesdays."
)
PAYDAYS = "Older persons and disability grants are paid from the 2nd working day of each month."
SRD = "The Social Relief of Distress grant (SRD) is R370 per month for unemployed people aged 18 to 59."


@pytest.mark.parametrize(
    ("sentence", "supported"),
    [
        # every value is in the passages, but stated of something else
        ("The maternity section of Soshanguve Block L Clinic is open Monday to Friday, 07:30 to 16:30.", False),
        ("The maternity section of Soshanguve Block L Clinic is open 24 hours a day.", True),  # "Its" read back
        ("Sister Nomvula Khoza is the facility manager of Soshanguve Block L Clinic.", False),
        ("Sister Nomvula Khoza is the facility manager of Mamelodi East.", True),
        ("The SRD grant is R560 per month.", False),
        ("The SRD grant is R370 per month.", True),
        ("The child support grant is R1,250 per month.", False),  # the foster child grant's amount
        ("Older persons grants are paid within 2 working days.", False),  # an ordinal is not a count
        ("Older persons grants are paid from the 2nd working day of the month.", True),
        # words of two passage sentences pieced together: "closed on Sundays" after "is open from Monday"
        ("The clinic is open on Sundays and public holidays.", False),
        ("It is closed on Sundays and public holidays.", True),
    ],
)
def test_a_value_must_be_stated_of_what_the_sentence_binds_it_to(sentence: str, supported: bool) -> None:
    passages = [f"{CLINIC}\n\n{SOSHANGUVE}", f"{GRANTS} {PAYDAYS}\n\n{SRD}"]
    assert grounding.check(sentence, passages).supported is supported


def test_a_name_written_with_its_prefix_is_not_a_word_of_what_is_said() -> None:
    passage = "Ukugoma kwezingane kwenziwa njalo ngoLwesibili. Letha incwadi yomntwana yempilo."
    assert grounding.check("Ukugoma kwezingane kwenziwa njalo ngoLwesibili [1].", [passage]).supported
    # Afrikaans and isiZulu words strung together: only "kwenziwa njalo" and the day are the passage's
    assert not grounding.check("Munisipale kuya kwenziwa njalo ngoLwesibili [1].", [passage]).supported


@pytest.mark.parametrize("said", ["(clinics.txt) [1]", "The answer is [1]:", "13 [1].", "Where is it [1]?"])
def test_what_states_nothing_is_not_a_statement(said: str) -> None:
    assert grounding.check(said, [f"{CLINIC} See clinics.txt for more."]).reason == grounding.NO_WORDS


def test_markdown_blocks_are_sentences_and_wrapped_prose_is_joined() -> None:
    doc = (
        "# Limits\n\nA chunk holds at most\n800 characters. The overlap is 120.\n\n- a list item that\n  goes on\n"
        "- another\n| `SETTING` | 0.79 | the refusal rule |\n|---|---|---|\n```bash\ncurl -s http://x\n```\nDone."
    )
    found = text.split(doc)
    assert [s.text for s in found] == [
        "# Limits",
        "A chunk holds at most 800 characters.",
        "The overlap is 120.",
        "- a list item that goes on",
        "- another",
        "| `SETTING` | 0.79 | the refusal rule |",
        "curl -s http://x",
        "Done.",
    ]
    assert doc[found[1].start : found[1].end] == "A chunk holds at most\n800 characters."
    assert text.numbers("the 2nd working day, the 7de") == {"#2", "#7"}


def test_a_wrong_citation_is_corrected_by_the_passage_that_supports_it() -> None:
    verdict = grounding.check("The child support grant is R560 per month [1].", [CLINIC, GRANTS], [0])
    assert verdict.sources == (1,)


def test_the_guard_shows_only_checked_text_and_records_every_sentence() -> None:
    guard = grounding.Guard(QUESTION, [CLINIC, GRANTS])
    shown = guard.feed("The clinic closes at 13:30 on Saturdays [1]. ")
    assert shown == []  # a sentence is shown only once the next one starts
    shown = guard.feed("It is closed on Sundays [1]. The paracetamol dose")
    assert [c.origin for c in shown] == ["extracted", "generated"]
    assert shown[0].text == "On Saturdays the clinic opens at 08:00 and closes at 13:00 [1]."
    assert "13:30" not in " ".join(c.text for c in shown)
    rest = guard.finish(cut=True)
    assert [c.origin for c in rest] == ["withheld"] and rest[0].text == ""
    assert [c.origin for c in guard.record] == ["extracted", "generated", "withheld"]


def test_the_guard_withholds_what_nothing_answers_and_keeps_a_refusal() -> None:
    guard = grounding.Guard("What is the paracetamol dose for children?", [CLINIC])
    checked = guard.feed("The dose is 10 ml. ") + guard.finish()
    assert [c.origin for c in checked] == ["withheld"] and "a number" in (checked[0].note or "")
    refusal = grounding.Guard(QUESTION, [CLINIC])
    assert [c.text for c in refusal.feed(f"{REFUSAL} ") + refusal.finish()] == [REFUSAL]


def test_a_number_alone_or_a_question_is_withheld_and_a_lost_model_is_noticed() -> None:
    guard = grounding.Guard(QUESTION, [CLINIC])
    checked = guard.feed("It closes at 13:00 on Saturdays [1]. 13 [1]. 16 [1]. 8 [1]. ") + guard.finish()
    assert [c.origin for c in checked] == ["generated", "withheld", "withheld", "withheld"]
    # three withheld: not yet stalled; a question (the model repeating the one it was asked) is the fourth
    assert all(c.note and grounding.NO_WORDS in c.note for c in checked[1:])  # not replaced by a passage sentence
    assert not guard.stalled
    guard.feed("What time does the Mamelodi clinic close on Saturdays [1]? ")
    guard.finish()
    assert guard.stalled  # four withheld in a row: the generation can stop


def test_a_repeated_sentence_is_shown_once() -> None:
    guard = grounding.Guard(QUESTION, [CLINIC])
    said = "On Saturdays the clinic closes at 13:00 [1]. "
    checked = guard.feed(said + said) + guard.finish()
    assert [c.origin for c in checked] == ["generated", "withheld"]


def _embed(vocabulary: list[str]):  # a bag-of-words embedder: deterministic, no model
    def embed(texts: list[str]) -> np.ndarray:
        rows = np.array([[t.lower().count(w) for w in vocabulary] for t in texts], dtype=np.float32) + 0.01
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return embed


def test_the_extractive_answerer_quotes_the_sentence_that_answers() -> None:
    passages = [CLINIC, GRANTS]
    found = extractive.candidates(QUESTION, passages)
    embed = _embed(["saturday", "close", "clinic", "grant", "manager"])
    chosen = extractive.choose(QUESTION, passages, found, embed([QUESTION])[0], embed([c.text for c in found]))
    assert chosen[0].text == "On Saturdays the clinic opens at 08:00 and closes at 13:00."
    assert chosen[0].source == 0 and len(chosen) <= extractive.MAX_SENTENCES


def test_the_extractive_answerer_refuses_a_name_no_passage_mentions() -> None:
    question = "On which day is refuse collected in Soweto?"
    assert not extractive.answered(question, [CLINIC, GRANTS], 0.99)
    assert not extractive.answered("How much is the war veterans grant?", [GRANTS], 0.80)
    assert extractive.answered("How much is the child support grant?", [GRANTS], 0.80)


@pytest.mark.parametrize(
    ("generated", "kept"),
    [
        ("The source of the source of the source of ", "The source of "),
        ("The grant is R560 per month.\n\nThe grant is R560 per month.", "The grant is R560 per month.\n\n"),
        ("It opens at 08:00 and closes at 13:00 on Saturdays, and at 16:00 on weekdays.", None),
    ],
)
def test_a_repetition_loop_is_found_where_it_begins(generated: str, kept: str | None) -> None:
    cut = loop_start(generated)
    assert (generated[:cut] if cut is not None else None) == kept


def test_a_translation_that_changes_a_number_is_caught() -> None:
    from serve_app.services.answer_language import numbers_kept

    checked = "It closes at 13:00 on Saturdays [1]. The grant is R2,315 per month [2]."
    assert numbers_kept(checked, "Ivala ngo-13:00 ngoMgqibelo [1]. Isibonelelo yi-R2 315 ngenyanga [2].")
    assert not numbers_kept(checked, "Ivala ngo-13:30 ngoMgqibelo [1]. Isibonelelo yi-R2 315 ngenyanga [2].")
    assert not numbers_kept(checked, "Ivala ngoMgqibelo [1]. Isibonelelo yi-R2 315 ngenyanga [2].")
