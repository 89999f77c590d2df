"""The OpenAI-compatible REST API (FastAPI), assembled: state, error handlers, routers.

Kafka stays behind `Backend.submit`; each resource's routes are in <resource>/router.py and its
logic in <resource>/serving.py; admission is in deps.py (dependencies reading `app.state`).
"""

from __future__ import annotations

from fastapi import FastAPI

from shared.batches.celery_app import make_celery
from shared.batches.store import BatchStore
from shared.model_tokenizer import ModelTokenizers
from shared.runtime.api import rest_app
from shared.runtime.storage import open_store

from .backend import Backend
from .batches.router import router as batches_router
from .batches.serving import BatchServing
from .chat.router import router as chat_router
from .completions.router import router as completions_router
from .completions.serving import CompletionServing
from .deps import Gate
from .errors import add_error_handlers
from .files.router import router as files_router
from .files.serving import FileServing
from .models.router import router as models_router
from .models.serving import ModelCatalog
from .requests.router import router as requests_router
from .requests.serving import AsyncRequests
from .rollouts.router import router as rollouts_router
from .rollouts.serving import RolloutServing
from .tokenize.router import router as tokenize_router
from .tokenize.serving import TokenizeServing


def create_app(backend: Backend) -> FastAPI:
    s = backend.settings
    app = rest_app(
        title="Switchyard gateway",
        version="0.1.0",
        description="OpenAI-compatible API of the Switchyard pipeline",
    )
    add_error_handlers(app)
    gate = Gate(backend)
    models = ModelCatalog(backend)
    batch_store = BatchStore(open_store(s))  # /v1/files, /v1/batches (services/batch runs them)
    state = app.state
    state.gate, state.models = gate, models
    state.completions = CompletionServing(backend, gate, models)
    state.requests = AsyncRequests(backend, gate, models)
    state.rollouts = RolloutServing(backend, gate, models)
    state.files = FileServing(s, batch_store)
    state.batches = BatchServing(s, batch_store, make_celery(s))
    state.tokenize = TokenizeServing(backend, models, ModelTokenizers(s))
    for router in (
        chat_router,
        completions_router,
        models_router,
        requests_router,
        rollouts_router,
        files_router,
        batches_router,
        tokenize_router,
    ):
        app.include_router(router)
    return app
