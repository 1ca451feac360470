"""The engines an ingress replica may run itself instead of calling their deployment, where the settings ask for it:
entity recognition with the offline recognisers (``text.ner_in_ingress``, off by default; docs/architecture.md,
engines served in the ingress). The routes and services do not change: they call the same typed handle, which
runs the engine in this process instead of calling the deployment. Built by whoever serves the app (the Serve
ingress, the benches' launcher), never by routes or services, which reach no engine."""

from __future__ import annotations

from contracts.settings import Settings
from contracts.text import EntitiesPass
from serve_app.context import Clients


def load_offline_entities() -> EntitiesPass:
    """spaCy and the language identifier, imported and loaded on the first NER request (not at start: an idle
    replica does not pay for them)."""
    from engines.text.entity_pass import OfflineEntityPass

    return OfflineEntityPass()


def serve_in_process(settings: Settings, clients: Clients) -> None:
    """Point the typed handles at in-process engines where the settings allow it."""
    if clients.text is not None and settings.text.ner_in_ingress and not settings.text.ner_model:
        clients.text.recognise_in_process(load_offline_entities)
