"""A language model's tokenizer and chat template, read from its directory without transformers: ``tokenizer.json``
(the ``tokenizers`` library) and the Jinja chat template of ``tokenizer_config.json`` or ``chat_template.jinja``,
rendered in a sandbox the way transformers renders it. A model without a template (a base model) gets a plain
``System:``/``User:``/``Assistant:`` layout.

The context window is the smallest of: what ``khuluma models pull|add`` recorded from the checkpoint's
``max_position_embeddings`` (:data:`CONTEXT_FILE`), the tokenizer's ``model_max_length`` when it is a real value,
and the operator's limit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts.errors import ModelMissing
from contracts.llm import ChatMessage
from engines.models.install import LLM_CONTEXT_FILE as CONTEXT_FILE

PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
PLAIN_STOPS = ("\nUser:", "\nSystem:")  # a base model continues the layout: its next turn ends the answer
_UNREAL_LENGTH = 1_000_000  # tokenizers without a limit say 1e30


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ChatTokenizer:
    """Encodes chat messages into a model's prompt tokens and decodes its answer."""

    def __init__(self, path: Path | str, context_limit: int) -> None:
        from tokenizers import Tokenizer

        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise ModelMissing(
                f"{path} has no tokenizer.json: a language model directory needs its Hugging Face tokenizer "
                "(`khuluma models pull|add` copies it)."
            )
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        config = _read_json(path / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        self.has_template = isinstance(template, str) and bool(template.strip())
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self._template = _compile(template if isinstance(template, str) and self.has_template else PLAIN_TEMPLATE)
        self.stops: tuple[str, ...] = () if self.has_template else PLAIN_STOPS
        self.end_tokens = self._end_tokens(path, config)
        self.context_window = self._context_window(path, config, context_limit)

    def _end_tokens(self, path: Path, config: dict[str, Any]) -> list[str]:
        """Tokens that end an answer: the generation config's ``eos_token_id`` (one or several) and the
        tokenizer's end-of-sequence token."""
        ids = _read_json(path / "generation_config.json").get("eos_token_id")
        ids = ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else []
        tokens = [t for t in (self.tokenizer.id_to_token(i) for i in ids) if t]
        if self.eos_token:
            tokens.append(self.eos_token)
        return list(dict.fromkeys(tokens))

    @staticmethod
    def _context_window(path: Path, config: dict[str, Any], limit: int) -> int:
        candidates = [limit]
        # recorded beside a converted model; a Hugging Face directory (vLLM) says it in its config.json
        for recorded in (
            _read_json(path / CONTEXT_FILE).get("context_window"),
            _read_json(path / "config.json").get("max_position_embeddings"),
        ):
            if isinstance(recorded, int) and recorded > 0:
                candidates.append(recorded)
        declared = config.get("model_max_length")
        if isinstance(declared, int | float) and 0 < declared < _UNREAL_LENGTH:
            candidates.append(int(declared))
        return min(candidates)

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text: the chat template applied, ready for the assistant's turn."""
        return self._template.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    def encode(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Token ids of the rendered prompt (special tokens in the template text count as themselves)."""
        return list(self.tokenizer.encode(self.render(messages), add_special_tokens=False).ids)

    def count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of ``ids`` (what CTranslate2 takes)."""
        return [self.tokenizer.id_to_token(i) or "" for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def _compile(source: str) -> Any:
    """A chat template compiled as transformers compiles it (sandboxed, trimmed blocks, its helper functions)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)
