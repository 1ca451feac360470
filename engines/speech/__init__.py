"""Speech engines: recognition, language decisions, guards, diarisation, music, the timeline."""
