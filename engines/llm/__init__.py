"""The language model behind the ask route and the chat completions: prompts, tokenizer, generators."""
