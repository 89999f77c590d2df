"""The one way a service builds its REST app: FastAPI with Swagger UI and ReDoc served from the
installed `fastapi-offline` package, so /docs and /redoc work on a machine without internet
(FastAPI's default pages load their scripts from a CDN and stay blank offline)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

# Where the Swagger UI and ReDoc assets are served; plain static files, not an admin path.
DOCS_STATIC_URL = "/static-offline-docs"


def rest_app(**kwargs: Any) -> FastAPI:
    """A FastAPI app whose /docs and /redoc need no network (same arguments as FastAPI)."""
    return FastAPIOffline(static_url=DOCS_STATIC_URL, **kwargs)
