"""A live step through the Speech deployment (:func:`live_step`): decode the buffer, commit what ended in a pause,
drop the committed audio, keep the next commit's context."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.speech import Segment, SpeechClient, StreamRequest, StreamStep, Withheld
from serve_app.services.live.state import StreamState

MAX_PENDING_SECONDS = 28.0  # never keep more than this uncommitted (Whisper's window is 30 s)
CONTEXT_SECONDS = 4.0  # at most this much committed audio stays at the buffer's head, as the next commit's context


@dataclass
class StepOutcome:
    """One step's outcome: the segments committed by it (already in ``state.segments``, their audio dropped),
    the whole hypothesis of the buffer it decoded (committed and pending segments, in order) and the text that
    may still change. ``shown``: False while the stream's language is not settled: the hypothesis is then the
    step's candidate decode, to agree with later, never to show."""

    step: StreamStep
    committed: list[Segment]
    hypothesis: list[Segment]
    pending_text: str
    withheld: list[Withheld]
    shown: bool = True


async def live_step(client: SpeechClient, state: StreamState, final: bool) -> StepOutcome:
    """Decode the buffer once: keep the language once it is settled, commit what ended in a pause (once the
    language is settled; everything at the end of the stream, or after :data:`MAX_PENDING_SECONDS` without a
    pause) and drop the committed audio."""
    state.stepped()
    # what ended in a pause is committed once the language is settled (given, or settled by this very step)
    commit_before = None if final else state.pending_seconds
    # the last step may return the step before's exact decode, if made in the language still asked for
    reuse = final and state.exact_language == state.lang_code
    step = await client.live_step(
        StreamRequest(
            pcm=bytes(state.buffer),
            sample_rate=state.sample_rate,
            language=state.lang_code,
            offset=state.offset,
            commit_before=commit_before,
            final=final,
            context_seconds=state.context_seconds,
            context_text=state.context_text,
            exact_tail=state.exact_tail if reuse else [],
            exact_until=state.exact_until if reuse else 0.0,
            judge=state.judge,
        )
    )
    if not step.language_settled:  # nothing to show yet: the candidate decode is kept for the next agreement
        return StepOutcome(step, [], list(step.candidate), "", list(step.withheld), shown=False)
    if state.lang_code is None and step.language_code:
        state.lang_code = step.language_code  # the stream's language; each segment is still judged on its own
    state.warn(step.warnings)
    state.withheld += step.withheld
    committed = list(step.final)
    cut = step.cut_seconds
    if final or (not cut and state.pending_seconds - state.context_seconds > MAX_PENDING_SECONDS):
        committed += step.pending  # end of audio, or no pause for too long: take what we have
        cut, pending_text = state.pending_seconds, ""
        state.exact_tail, state.exact_until = [], 0.0
    else:
        pending_text = step.pending_text
        # the step's exact decode of the uncommitted speech, if it made one: the last step may return it as is
        state.exact_tail, state.exact_until = (list(step.pending), step.exact_until) if step.exact_until else ([], 0.0)
        state.exact_language = state.lang_code
    state.segments += committed
    if cut:
        # what this step committed stays at the buffer's head, with its text, as the next commit's context
        keep = cut - state.context_seconds if step.final and not final else 0.0
        keep = keep if keep <= CONTEXT_SECONDS else 0.0
        drop = min(len(state.buffer), int((cut - keep) * state.sample_rate) * 2)
        del state.buffer[:drop]
        state.offset += drop / state.bytes_per_second
        state.context_seconds = min(state.pending_seconds, keep)
        state.context_text = " ".join(s.text for s in step.final if s.text).strip() if keep else ""
    return StepOutcome(step, committed, list(step.final) + list(step.pending), pending_text, list(step.withheld))
