"""Text engines: language identification, named entities, sentiment, intent classification."""
