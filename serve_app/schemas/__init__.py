"""Pydantic v2 request/response models mirroring the spec's field names exactly."""
