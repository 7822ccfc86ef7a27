"""A form's error shown next to the field it is about, on the page the form is on.

A Studio form that fails (JSON that does not parse, a fork into a thread that exists, a
deletion not confirmed) answers with the same page again, its status the error's (400, 404,
409, 422 as before), the message beside the field and what the user typed kept in it, so a
typo costs one correction, not a round trip through an error page and a retyped form.

:func:`form_error` decides which field an error is about; the templates ask
:func:`field_error` for the message and :func:`kept` for the field's value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from markupsafe import Markup

from plait.errors import (
    ArgumentError,
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    InvalidNamespaceError,
    PlaitError,
    StoreUnsupportedError,
    ThreadExistsError,
)
from plait.server.http import status_of

__all__ = ["FIELDS", "FormError", "field_error", "form_error", "kept", "shown_again"]

R = TypeVar("R")

FIELDS: dict[str, tuple[str, ...]] = {
    "update": ("values", "as_node"),
    "fork": ("target", "edits"),
    "resume": ("resume",),
    "delete": ("confirm",),
    "put": ("value", "namespace", "key"),
    "delete-item": ("confirm", "key"),
}
"""Each form (by its action) and its fields, the one an error is about by default first."""

TARGET_TAKEN = (ThreadExistsError, ConcurrentUpdateError)
"""A fork's errors that are about its target: the thread exists (or was just made)."""
NOT_THE_INPUTS = (StoreUnsupportedError, CheckpointNotFoundError)
"""Errors no field caused (no memory store; the thread or checkpoint is gone): the error
page says them, as there may be no page with the form to show them on."""


@dataclass(frozen=True, slots=True)
class FormError:
    """What failed in which form, and the form as it was sent."""

    action: str
    field: str
    kind: str
    """The error's class name (``ArgumentError``, ``ThreadExistsError``)."""
    message: str
    sent: Mapping[str, str]

    def at(self, action: str, name: str) -> bool:
        return self.action == action and self.field == name


def form_error(action: str, exc: PlaitError | ValueError, sent: Mapping[str, str]) -> FormError | None:
    """The error as one of ``action``'s form's fields' (None: the action has no form here,
    so the error page says it)."""
    fields = FIELDS.get(action)
    if not fields or isinstance(exc, NOT_THE_INPUTS):
        return None
    name = fields[0]
    if isinstance(exc, ArgumentError) and exc.option in fields:
        name = exc.option
    elif action == "fork" and isinstance(exc, TARGET_TAKEN):
        name = "target"
    elif isinstance(exc, InvalidNamespaceError) and "namespace" in fields:
        name = "namespace"
    return FormError(action=action, field=name, kind=type(exc).__name__, message=str(exc), sent=dict(sent))


async def shown_again(
    action: str,
    exc: PlaitError | ValueError,
    sent: Mapping[str, str],
    again: Callable[[FormError, int], Awaitable[R]],
    otherwise: Callable[[], R],
) -> R:
    """The form's page ``again``, the error beside the field it is about, with the error's
    status (a ``ValueError``: 400); ``otherwise()`` (the error page) when ``action`` has no
    form to show it by."""
    failed = form_error(action, exc, sent)
    if failed is None:
        return otherwise()
    return await again(failed, status_of(exc) if isinstance(exc, PlaitError) else 400)


def field_error(error: FormError | None, action: str, name: str) -> Markup:
    """The message beside the field (nothing when the error is not this field's)."""
    if error is None or not error.at(action, name):
        return Markup("")
    return Markup('<p class="field-error" role="alert" id="{}-{}-error"><b>{}</b>: {}</p>').format(
        action, name, error.kind, error.message
    )


def kept(error: FormError | None, action: str, name: str, default: str = "") -> str:
    """The field's value: what the user sent when this form failed, else ``default``."""
    if error is None or error.action != action:
        return default
    return error.sent.get(name, default)
