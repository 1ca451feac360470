"""Translation engines: NLLB-200 through CTranslate2 or transformers."""
