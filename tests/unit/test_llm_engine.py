"""The language model's engine without Ray: the tokenizer and chat template read from a converted directory, prompt
assembly within the context window, and CTranslate2's generator behind its batch scheduler, on a tiny random
Llama-architecture model converted to int8 (its words are gibberish: these tests check the plumbing)."""

from __future__ import annotations

import random
import shutil
import threading
from pathlib import Path

import pytest

from contracts.llm import REFUSAL, ChatMessage, GenerationRequest, PromptTooLong, Sampling, Source
from engines.llm.ct2 import CT2Generator, Job, SamplingKey, _first_stop, _partial_stop
from engines.llm.prompt import MIN_SOURCE_TOKENS, assemble, grounded_messages
from engines.llm.tokenizer import ChatTokenizer

WORDS = ["the", "clinic", "opens", "at", "eight", "on", "weekdays", "water", "is", "off", "ward", "twelve", "tuesday"]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


@pytest.fixture(scope="module")
def tokenizer(tiny_llm) -> ChatTokenizer:
    return ChatTokenizer(tiny_llm.ct2, context_limit=4096)


@pytest.fixture(scope="module")
def generator(tiny_llm, tokenizer: ChatTokenizer):
    engine = CT2Generator(tiny_llm.ct2, tokenizer, threads=1, max_batch_size=8, batch_wait_s=0.05)
    yield engine
    engine.close()


def _ask(question: str, sources: list[Source], max_tokens: int | None = None) -> GenerationRequest:
    return GenerationRequest(
        messages=[ChatMessage(role="user", content=question)],
        sources=sources,
        grounded=True,
        answer_language="zul",
        sampling=Sampling(max_tokens=max_tokens),
    )


# --- tokenizer and template --------------------------------------------------------------------------------------


def test_the_chat_template_and_the_window_come_from_the_directory(tokenizer: ChatTokenizer, tiny_llm) -> None:
    assert tokenizer.has_template and tokenizer.end_tokens == ["<|im_end|>"]
    assert tokenizer.context_window == 512  # recorded from max_position_embeddings at conversion
    assert ChatTokenizer(tiny_llm.ct2, context_limit=300).context_window == 300  # the operator's cap
    messages = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Sawubona!")]
    text = tokenizer.render(messages)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSawubona!<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.encode(messages)
    assert tokenizer.tokenizer.decode(ids, skip_special_tokens=False) == text  # special tokens are single tokens
    assert tokenizer.tokenizer.token_to_id("<|im_start|>") in ids


def test_a_model_without_a_template_gets_the_plain_layout(tiny_llm, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tiny_llm.ct2, plain)
    (plain / "chat_template.jinja").unlink()
    tokenizer = ChatTokenizer(plain, 4096)
    assert not tokenizer.has_template
    text = tokenizer.render([ChatMessage(role="system", content="S"), ChatMessage(role="user", content="Q?")])
    assert text == "System: S\n\nUser: Q?\n\nAssistant:"
    assert "\nUser:" in tokenizer.stops  # a base model's next turn ends its answer


# --- prompt assembly -----------------------------------------------------------------------------------------------


def test_the_grounded_prompt_instructs_numbers_and_asks(tokenizer: ChatTokenizer) -> None:
    request = _ask("When does the clinic open?", [Source(text="Opens at 8.", title="a.md"), Source(text="Shut.")])
    system, user = grounded_messages(request, request.sources)
    assert system.role == "system" and REFUSAL in system.content and "Write the answer in Zulu." in system.content
    assert "[1] (a.md)\nOpens at 8." in user.content and "[2]\nShut." in user.content
    assert user.content.endswith("Question: When does the clinic open?")


@pytest.mark.parametrize("seed", range(6))
def test_assembly_keeps_every_prompt_within_the_window(tokenizer: ChatTokenizer, seed: int) -> None:
    rng = random.Random(seed)
    sources = [Source(text=_text(rng, rng.randint(5, 120)), title=f"d{i}.txt") for i in range(rng.randint(1, 12))]
    wanted = rng.choice([None, 16, 64, 200])
    request = _ask(_text(rng, rng.randint(3, 30)), sources, wanted)
    assembled = assemble(tokenizer, request, max_answer_tokens=128)
    assert len(assembled.prompt_ids) + assembled.max_tokens <= tokenizer.context_window
    base = len(tokenizer.encode(grounded_messages(request, [])))  # the answer gets what the question leaves
    assert assembled.max_tokens == min(wanted or 128, 128, tokenizer.context_window - base)
    assert assembled.used == list(range(len(assembled.used)))  # a prefix, in rank order
    assert set(assembled.truncated) <= set(assembled.used[-1:])  # only the last one may be cut
    assert assembled.prompt_ids == tokenizer.encode(assembled.messages)
    prompt = assembled.messages[-1].content
    for number, index in enumerate(assembled.used, 1):
        if index in assembled.truncated:
            cut = prompt.split(f"[{number}] (d{index}.txt)\n", 1)[1].split("\n\nQuestion:", 1)[0]
            assert cut.endswith(" ...") and sources[index].text.startswith(cut[: -len(" ...")])
        else:
            assert f"[{number}] (d{index}.txt)\n{sources[index].text}" in prompt
    left_out = len(assembled.used)
    if left_out < len(sources) and not assembled.truncated:  # the next one, whole, would not have fitted
        bigger = grounded_messages(request, sources[: left_out + 1])
        assert len(tokenizer.encode(bigger)) + assembled.max_tokens > tokenizer.context_window


def test_long_sources_are_cut_or_left_out(tokenizer: ChatTokenizer) -> None:
    rng = random.Random(1)
    sources = [Source(text=_text(rng, 400), title=f"d{i}.txt") for i in range(3)]
    assembled = assemble(tokenizer, _ask("When?", sources), max_answer_tokens=64)
    assert assembled.used == [0] and assembled.truncated == [0]  # the best one, cut; the others left out
    assert len(assembled.prompt_ids) + 64 <= 512
    # a question that leaves less than MIN_SOURCE_TOKENS for sources gets none rather than a scrap
    question = "When?"
    while True:
        base = len(tokenizer.encode(grounded_messages(_ask(question, []), [])))
        if 512 - 64 - base < MIN_SOURCE_TOKENS:
            break
        question += " clinic"
    assert assemble(tokenizer, _ask(question, sources), max_answer_tokens=64).used == []


def test_a_question_or_conversation_that_does_not_fit_is_refused(tokenizer: ChatTokenizer) -> None:
    huge = " ".join(["clinic"] * 600)
    with pytest.raises(PromptTooLong, match="context window is 512"):
        assemble(tokenizer, _ask(huge, [Source(text="x")]), max_answer_tokens=64)
    chat = GenerationRequest(messages=[ChatMessage(role="user", content=huge)])
    with pytest.raises(PromptTooLong) as raised:
        assemble(tokenizer, chat, max_answer_tokens=64)
    assert "field 'messages'" in raised.value.detail and "'question'" in raised.value.for_field("question").detail
    short = GenerationRequest(messages=[ChatMessage(role="user", content="Hi")], sampling=Sampling(max_tokens=4000))
    fitted = assemble(tokenizer, short, max_answer_tokens=10_000)
    assert len(fitted.prompt_ids) + fitted.max_tokens == 512  # the answer gets what the window leaves


# --- the generator -------------------------------------------------------------------------------------------------


def _run(generator: CT2Generator, tokenizer: ChatTokenizer, jobs_args: list[dict]) -> list[dict]:
    """Submit jobs at once and wait for all of them; each result: text pieces, the finish, tokens, error."""
    results: list[dict] = []
    for args in jobs_args:
        result: dict = {"pieces": [], "ended": threading.Event()}
        results.append(result)

        def end(reason, tokens, error, result=result) -> None:
            result.update(reason=reason, tokens=tokens, error=error)
            result["ended"].set()

        messages = [ChatMessage(role="user", content=args.pop("question"))]
        job = Job(
            prompt=tokenizer.tokens(tokenizer.encode(messages)),
            sampling=args.pop("sampling", SamplingKey()),
            stops=args.pop("stops", ()),
            on_text=result["pieces"].append,
            on_end=end,
            **args,
        )
        result["job"] = job
        generator.submit(job)
    for result in results:
        assert result["ended"].wait(timeout=120)
    return results


def test_a_generation_streams_its_text_to_its_allowance(generator, tokenizer) -> None:
    (result,) = _run(generator, tokenizer, [{"question": "When does the clinic open?", "max_tokens": 12}])
    assert result["error"] is None and result["reason"] == "length" and result["tokens"] == 12
    job = result["job"]
    assert len(job.ids) == 12 and "".join(result["pieces"]) == tokenizer.decode(job.ids)
    assert len(result["pieces"]) > 1  # streamed, not handed over at the end


def test_concurrent_generations_share_a_batch_and_each_gets_its_own_tokens(generator, tokenizer) -> None:
    questions = ["When does the clinic open?", "Water off in ward twelve?", "Sawubona", "Who manages it on tuesday?"]
    alone = [_run(generator, tokenizer, [{"question": q, "max_tokens": 10}])[0]["job"].ids for q in questions]
    before = generator.batches
    together = _run(generator, tokenizer, [{"question": q, "max_tokens": 10} for q in questions])
    assert [r["job"].ids for r in together] == alone  # greedy: the batch changes nothing in any answer
    assert generator.batches - before < len(questions) and generator.largest_batch >= 2


def test_different_allowances_in_one_batch(generator, tokenizer) -> None:
    results = _run(generator, tokenizer, [{"question": "a", "max_tokens": 3}, {"question": "b", "max_tokens": 9}])
    assert [r["tokens"] for r in results] == [3, 9] and all(r["reason"] == "length" for r in results)


def test_a_stop_string_ends_the_answer_before_it(generator, tokenizer) -> None:
    (free,) = _run(generator, tokenizer, [{"question": "When does the clinic open?", "max_tokens": 20}])
    text = "".join(free["pieces"])
    at = next(k for k in range(3, len(text) - 2) if text.find(text[k : k + 2]) == k and "\ufffd" not in text[k : k + 2])
    (stopped,) = _run(
        generator,
        tokenizer,
        [{"question": "When does the clinic open?", "max_tokens": 20, "stops": (text[at : at + 2],)}],
    )
    assert stopped["reason"] == "stop" and "".join(stopped["pieces"]) == text[:at]


def test_a_cancelled_job_stops(generator, tokenizer) -> None:
    started = threading.Event()
    ended: dict = {}
    finished = threading.Event()
    prompt = tokenizer.tokens(tokenizer.encode([ChatMessage(role="user", content="Go on")]))
    job = Job(
        prompt=prompt,
        max_tokens=400,
        sampling=SamplingKey(),
        stops=(),
        on_text=lambda _: started.set(),
        on_end=lambda reason, tokens, error: (ended.update(tokens=tokens, error=error), finished.set()),
    )
    generator.submit(job)
    assert started.wait(60)
    job.cancel()
    assert finished.wait(60) and ended["error"] is None and ended["tokens"] < 400


def test_text_waits_for_whole_characters_and_stop_strings() -> None:
    assert _partial_stop("answer\nUs", ("\nUser:",)) == 3 and _partial_stop("answer", ("\nUser:",)) == 0
    assert _first_stop("one\nUser: two", ("\nUser:",), 0) == 3 and _first_stop("one", ("x",), 0) is None
    pieces: list[str] = []
    job = Job(prompt=[], max_tokens=5, sampling=SamplingKey(), stops=("STOP",), on_text=pieces.append, on_end=print)
    job.text = "Sawubona \ufffd"  # half a character decoded so far
    CT2Generator._flush(job, final=False)
    assert pieces == []
    job.text = "Sawubona ü ST"
    CT2Generator._flush(job, final=False)
    assert pieces == ["Sawubona ü "]  # "ST" may begin the stop string


def test_a_replaced_generator_finishes_its_queue_then_refuses(tiny_llm, tokenizer) -> None:
    from contracts.errors import Unavailable

    engine = CT2Generator(tiny_llm.ct2, tokenizer, threads=1, max_batch_size=1, batch_wait_s=0)
    ended: list[tuple] = []
    prompt = tokenizer.tokens(tokenizer.encode([ChatMessage(role="user", content="Sawubona")]))
    for _ in range(3):  # batches of one: two of them wait while the first runs
        engine.submit(Job(prompt, 6, SamplingKey(), (), on_text=lambda _: None, on_end=lambda *end: ended.append(end)))
    engine.close(drain=True)  # a reload: what was asked of the old model finishes on it
    assert ended == [("length", 6, None)] * 3 and engine.batches == 3
    with pytest.raises(Unavailable, match="being replaced"):
        engine.submit(Job(prompt, 6, SamplingKey(), (), on_text=print, on_end=print))
