"""Live transcription, in one home: the two WebSocket protocols and what they share.

- ``state.py``: a stream's audio buffer, its committed segments, the speech withheld and its warnings
  (:class:`~serve_app.services.live.state.StreamState`);
- ``steps.py``: a live step through the Speech deployment (:func:`~serve_app.services.live.steps.live_step`): what
  is committed at a pause, what is dropped from the buffer, what stays as the next commit's context;
- ``deltas.py``: the Live API's append-only transcript deltas out of hypotheses that may still change;
- ``socket.py``: sending with backpressure, receiving within the time limits, and how a session ends on an
  error (one error message, then a close code);
- ``stream.py``: ``/ws/stream-transcribe`` (its protocol: :data:`~serve_app.services.live.stream.PROTOCOL`);
- ``realtime.py``: the Live API ``/v1/realtime`` (its protocol: :data:`~serve_app.services.live.realtime.PROTOCOL`),
  with its client secrets (``client_secrets.py``).

Both protocols step the same way:

- buffer the client's PCM (signed 16-bit little-endian mono, at the stream's own rate) and run a step
  (``steps.live_step``) after every ``state.PARTIAL_EVERY_SECONDS`` of new audio (every
  ``FIRST_STEPS_EVERY_SECONDS`` until the first words are committed, so the first words, which the Live
  API sends once two successive partials agree on them, come sooner), when the client pauses
  (``state.QUIET_STEP_SECONDS``), and once at the end;
- without a language from the client, settle the stream's language as soon as its speech is unmistakably in a
  served language, else on about 6 s of speech (the engine's rule), showing nothing before; then judge every
  committed segment's language on its own speech (``StreamRequest.judge``): a segment in a language without a
  speech model is withheld (``StreamStep.withheld``, sent as a notice, never as an error) and counted, once, in
  the session's warnings;
- once the language is known, commit at every pause the VAD finds (``stream_commit_silence_ms``): the segment
  before it is decoded exactly and its audio dropped, so a partial decodes only the uncommitted tail (greedily)
  and the end of a stream has only its last segment left; everything pending is committed when no pause came for
  ``steps.MAX_PENDING_SECONDS`` (Whisper's window is 30 s). The segment a step committed (up to
  ``steps.CONTEXT_SECONDS``) stays at the buffer's head with its text, as the context of the next commit
  (``StreamRequest.context_seconds``): a segment cut at a short pause is misheard on its own;
- when a step finds that the speech ended in a short silence (less than a commit pause), it decodes the
  uncommitted speech exactly (``StreamStep.exact_until``); the last step gets that back (``exact_tail``) and, with
  no speech after it, returns it without decoding again: the end of an utterance then waits only for the VAD;
- stop reading a client whose message is not taken within the send timeout (``socket.send``), close an idle or
  too-long session (``socket.receive``), and refuse more audio than ``max_request_mb`` (``StreamState.add_audio``);
- end on an error with one error message and a close code (``socket.guard``): 1008 bad input, 1009 too much audio,
  1011 server error, 4408 a time limit, each metered as a failed invocation with the audio received.
"""
