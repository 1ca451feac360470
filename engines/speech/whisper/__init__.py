"""Whisper (faster-whisper, CTranslate2): one speech-model family."""
