"""The OpenAPI document as clients need it, and `/docs` served from the package (no CDN).

What FastAPI cannot infer is filled in here, once for every route, so a generated client knows
that a token is needed, which operations it calls by which name, and the answers it may get:
- the bearer scheme (declared by `api.http.get_principal`, so exactly the operations that
  resolve a principal carry it);
- operation ids from the handler names (`submit_job`, not `submit_job_v1_jobs_post`);
- the answers any operation may give besides its own: 503 with `Retry-After` when the service
  is overloaded or its database unreachable, and 500.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

SWAGGER_ASSETS = "/docs/assets"
_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer"},
    }
}
_COMMON_RESPONSES: dict[str, dict[str, Any]] = {
    "503": {
        "description": "Overloaded or the database is unreachable: try again after Retry-After.",
        "headers": _RETRY_AFTER,
        "content": {"application/json": {"schema": _ERROR_REF}},
    },
    "500": {
        "description": "An unexpected error; it has been logged.",
        "content": {"application/json": {"schema": _ERROR_REF}},
    },
}


def operation_id(route: APIRoute) -> str:
    return route.name


def install_openapi(app: FastAPI) -> None:
    """Call after every router is included (the document is built once, on first request)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]  # FastAPI's documented override point
    _install_docs(app)


def _document(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for code, response in _COMMON_RESPONSES.items():
                responses.setdefault(code, response)
    return document


def _install_docs(app: FastAPI) -> None:
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]  # no stubs

    app.mount(SWAGGER_ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{SWAGGER_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )
