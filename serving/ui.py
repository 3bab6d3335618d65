"""The page at ``/`` and offline API docs at ``/docs`` and ``/redoc``.

The page (``serving/ui/``: plain HTML, CSS and JavaScript, no build step, nothing from a CDN) is a client of the
public REST API and nothing else: a shopping chat with item cards and a cart, a livestream overlay with a timeline
of what is on screen, and a trip planner. Swagger UI and ReDoc load their scripts from the ``fastapi-offline``
package, so both work on a machine with no network.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

PAGE_DIR = Path(__file__).parent / "ui"
DOCS_ASSETS = "/docs-assets"
UI_ASSETS = "/ui"


def docs_assets_dir() -> Path:
    """Swagger UI and ReDoc bundles shipped by ``fastapi-offline`` (a dependency): never a CDN."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def mount_ui(app: FastAPI) -> None:
    """Add the page, its assets and the offline docs to ``app`` (created with ``docs_url=None, redoc_url=None``)."""
    app.mount(UI_ASSETS, StaticFiles(directory=PAGE_DIR), name="ui")
    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE_DIR / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} API",
                                   oauth2_redirect_url=redirect_url,
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png")

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} API",
                              redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png", with_google_fonts=False)
