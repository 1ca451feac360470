"""A live stream's forward passes reused: each step of a stream decodes its uncommitted speech again, one step's
audio the last one's plus what came since. A CTC model's output frame depends on the audio around it only, so the
frames of the audio both steps share are taken from the last step (every frame where a step's audio was all heard
before: a stream's last step once its speech has ended), and only the new tail is passed through the model, with
:data:`OVERLAP_SECONDS` of what came before it for context. The two are joined at a frame both call the same (a
blank, mostly), in the middle of the overlap where each pass had half of it as context, so no letter is cut in two;
where the two read that middle differently, the model is not one whose frames hear only the audio around them, and
the step's audio is passed whole (and, when no join ever held, no tail is tried again).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engines.speech.ctc.decoding import SAMPLE_RATE, best_frames, frame_samples

OVERLAP_SECONDS = 1.0  # context given to the new tail's pass; the join is in its middle
MIN_SHARED_SECONDS = 2.0  # less shared audio than this is passed through the model whole
MIN_AGREEMENT = 0.8  # share of the overlap's middle frames both passes must read alike (mostly blanks)
GIVE_UP_AFTER = 3  # joins that failed in a row, none ever held: the model's frames are not local, stop trying
KEPT_PASSES = 16  # a few live streams' last passes (audio and frames): at most about 2 MB each


@dataclass(frozen=True)
class Frames:
    """A pass's frames: each one's likeliest token and its posterior, and the samples per frame."""

    best: np.ndarray
    posterior: np.ndarray
    stride: int


@dataclass(frozen=True)
class _Pass:
    key: str
    audio: np.ndarray
    frames: Frames


class PassReuse:
    """The last :data:`KEPT_PASSES` passes, and the frames of a new audio made from the one it shares most with."""

    def __init__(self, kept: int = KEPT_PASSES) -> None:
        self.kept = kept
        self._passes: OrderedDict[int, _Pass] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = 0
        self.samples_passed = 0  # audio passed through the model, for tests and benches
        self._joined_ever, self._failed_in_row = False, 0

    def frames(self, audio: np.ndarray, key: str, forward: Callable[[np.ndarray], np.ndarray]) -> Frames:
        """The frames of ``audio`` (``key``: the model and language its pass is for); ``forward`` gives the
        log-probabilities of the audio it is given."""
        earlier, shared = self._longest_shared(audio, key)
        stride = earlier.frames.stride if earlier is not None else 0
        overlap = int(OVERLAP_SECONDS * SAMPLE_RATE)
        if earlier is not None and audio.size - shared < stride:  # all heard before (the speech ended): no pass
            count = min(earlier.frames.best.size, audio.size // stride)
            frames = Frames(earlier.frames.best[:count], earlier.frames.posterior[:count], stride)
        elif earlier is None or shared < MIN_SHARED_SECONDS * SAMPLE_RATE or not self.joins:
            frames = self._whole(audio, forward)
        else:
            start = (shared - overlap) // stride * stride
            tail = self._whole(audio[start:], forward, stride)
            joined = _joined(earlier.frames, tail, start // stride, shared // stride)
            self._judge(joined is not None)
            frames = joined if joined is not None else self._whole(audio, forward)
        self._keep(_Pass(key, audio, frames))
        return frames

    @property
    def joins(self) -> bool:
        """Whether tails are joined: not once :data:`GIVE_UP_AFTER` joins in a row failed and none ever held."""
        return self._joined_ever or self._failed_in_row < GIVE_UP_AFTER

    def _judge(self, held: bool) -> None:
        with self._lock:
            self._joined_ever = self._joined_ever or held
            self._failed_in_row = 0 if held else self._failed_in_row + 1

    def _whole(self, audio: np.ndarray, forward: Callable[[np.ndarray], np.ndarray], stride: int = 0) -> Frames:
        log_probs = forward(audio)
        self.samples_passed += audio.size
        best, posterior = best_frames(log_probs)
        return Frames(best, posterior, stride or frame_samples(audio.size, best.size))

    def _longest_shared(self, audio: np.ndarray, key: str) -> tuple[_Pass | None, int]:
        with self._lock:
            passes = [p for p in self._passes.values() if p.key == key]
        found, longest = None, 0
        for earlier in passes:
            n = min(earlier.audio.size, audio.size)
            if n <= longest or earlier.audio[0] != audio[0]:
                continue
            differ = np.flatnonzero(earlier.audio[:n] != audio[:n])
            shared = int(differ[0]) if differ.size else n
            if shared > longest:
                found, longest = earlier, shared
        return found, longest

    def _keep(self, new: _Pass) -> None:
        with self._lock:
            self._ids += 1
            self._passes[self._ids] = new
            while len(self._passes) > self.kept:
                self._passes.popitem(last=False)


def _joined(earlier: Frames, tail: Frames, tail_start: int, shared_end: int) -> Frames | None:
    """``earlier``'s frames up to a join, then ``tail``'s (whose first frame is frame ``tail_start``); the join is a
    frame both call the same nearest the middle of the overlap, before ``shared_end``. None where the two passes
    disagree on the middle of the overlap (:data:`MIN_AGREEMENT`): the model's frames depend on more than the audio
    around them, and the audio is passed whole."""
    middle = (tail_start + shared_end) // 2
    low, high = tail_start + 1, min(shared_end, earlier.best.size, tail_start + tail.best.size) - 1
    if high - low < 4:
        return None
    quarter = (high - low) // 4
    centre = np.arange(low + quarter, high - quarter + 1)
    same = earlier.best[centre] == tail.best[centre - tail_start]
    if same.mean() < MIN_AGREEMENT:
        return None
    join = int(min(centre[same], key=lambda f: abs(int(f) - middle)))
    best = np.concatenate([earlier.best[:join], tail.best[join - tail_start :]])
    posterior = np.concatenate([earlier.posterior[:join], tail.posterior[join - tail_start :]])
    return Frames(best, posterior, earlier.stride)
