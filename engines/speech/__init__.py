"""Speech engines: from an audio file or a live stream's buffer to segments with words, times and a language.

- ``pipeline``: one file or one live step end to end; ``audio`` (decoding to 16 kHz mono), ``windows`` (long audio
  cut in silence);
- ``routing``: which model serves each language; ``recognition``: what every recognizer hands the pipeline;
- ``language_choice``: auto-detection's decisions (a served language, or none);
- Whisper: ``whisper`` (the recognizer), ``whisper_adapter`` (faster-whisper beyond its documented API),
  ``whisper_batching`` (windows of concurrent requests decoded together), ``whisper_layout`` (decodes and threads
  on the machine), ``whisper_weights`` (the offline default model);
- CTC: ``ctc`` (the recognizer), ``ctc_runtimes``, ``ctc_decoding``, ``ctc_guards``; a model directory's files
  are told apart by ``engines/models/ctc_layout.py``, below the engines, as the model registry reads them too;
- ``guards``: hallucination guards; ``timeline``: words with speakers, speech, music and silence; ``diarise``:
  who spoke when; ``music``: music-on-hold detection.
"""
