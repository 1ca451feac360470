"""Translation engines: NLLB-200 (CTranslate2 or transformers) and MADLAD-400 (CTranslate2).

- ``translator.py``: the :class:`~engines.translation.translator.Translator` protocol, its results, and the base
  that splits texts into segments (``sentences.py``), decodes them in one model call and joins them back;
- ``ct2.py``: what the CTranslate2 families share (tokenizer, vocabulary, the model and its beam search);
- ``nllb.py`` and ``madlad.py``: the two families; ``load.py``: the translator of an installed model.
"""
