"""Speech engines: from an audio file or a live stream's buffer to segments with words, times and a language.

- ``pipeline``: :class:`TranscriptionPipeline`, composing ``file_transcription`` (one file end to end),
  ``live_step`` (one step of a live stream) and ``listing`` (the languages of ``/api/v1/models``);
- the families, one folder each behind one interface (``recognition``: ``Recognizer``, ``LanguageDetector``, the
  ``Route`` a language takes): ``whisper/`` (faster-whisper: ``recognizer``, ``models``, ``languages``,
  ``detector``, ``adapter`` for faster-whisper beyond its documented API, ``batching``, ``placement`` for decodes
  and threads on the machine, ``weights`` for the offline default model, ``guards`` for the hallucination guards)
  and ``ctc/`` (``models``, ``recognizer``, ``runtimes``, ``decoding``, ``layout`` for a model directory's files,
  ``guards`` for the letter-soup guards); ``families`` lists them and builds their recognizers;
- ``routing``: which recognizer serves each language; ``language_choice`` and ``first_language``: auto-detection's
  decisions (a served language, or none);
- shared by every family: ``vad`` (where the speech is), ``audio`` (decoding to 16 kHz mono), ``windows`` (long
  audio cut in silence), ``screening`` (what the guards share), ``timeline`` (words with speakers, speech, music
  and silence), ``diarise`` (who spoke when), ``music`` (music-on-hold detection).
"""
