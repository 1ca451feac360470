"""Cluster-side pieces: object storage (S3 / local SeaweedFS) and the Ray fan-out of batch transcription."""
