"""The Studio: a local web UI and JSON API over a real store (the ``plait[studio]`` extra).

:func:`create_app` builds the ASGI app (FastAPI) over a checkpointer and, optionally, the
graphs whose threads it may edit and run; ``plait studio`` serves it with uvicorn, and an app
that mounts it (``plait serve`` at ``/studio``) runs its startup and shutdown with
:func:`studio_lifespan`. Nothing in ``import plait`` imports this package: it needs FastAPI,
uvicorn and Jinja2.
"""

from plait.server.app import StudioConfig, create_app, studio_lifespan

__all__ = ["StudioConfig", "create_app", "studio_lifespan"]
