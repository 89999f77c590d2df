"""The registry's REST API (FastAPI): the app, its error handlers, and the objects routes depend on."""

from __future__ import annotations

from starlette.types import ASGIApp

from shared.runtime.admission import Admission
from shared.runtime.api import rest_app
from shared.runtime.config import Settings

from .catalog import Catalog
from .errors import add_error_handlers, upload_limit
from .routes import router
from .uploads import FORM_OVERHEAD


def create_app(settings: Settings, catalog: Catalog) -> ASGIApp:
    """The API over `catalog`; routes find it, the settings and the admission on app.state."""
    app = rest_app(
        title="Switchyard adapter registry",
        version="0.1.0",
        description="LoRA adapters: upload, versions, aliases, tenant visibility",
    )
    app.state.settings = settings
    app.state.catalog = catalog
    app.state.admission = Admission(settings)
    add_error_handlers(app)
    app.include_router(router)
    return upload_limit(app, settings.adapter_max_bytes + FORM_OVERHEAD)
