"""The page: server-rendered HTML (Jinja2, autoescaped), readable without JavaScript.

``/`` lists threads, ``/threads/{id}`` shows one (``?checkpoint=`` selects a checkpoint: a
deep link), ``/diff?a=&b=`` compares two checkpoints of one thread or two, ``/runs`` lists the
run queue's runs and ``/runs/{id}`` shows one, ``/memory`` shows the memory store (its
namespaces as a tree, the items under one, an item's value). The forms post to
``/threads/{id}/do/{action}`` (a run's Cancel to ``/runs/{id}/cancel``, the Memory page's to
``/memory/do/{action}``) and redirect back (POST, redirect, GET) with a confirmation of what
was done; one that fails answers with its page again, the error beside the field it is about
and the input kept (:mod:`plait.server.forms`).

Every path here is the Studio's own (``/threads/ID``); what the page and its redirects carry
is that path under the Studio's mount path (:func:`~plait.server.http.root_of`: ``""`` at the
root of its own server, ``/studio`` under ``plait serve``). The templates write ``{{ root }}``
before every URL, and the URLs the script uses come from the page (``data-sse``,
``data-lazy``), so the script needs no prefix of its own.

``static/studio.js`` adds the live parts (SSE), keyboard navigation, lazy values and
confirmations; without it every page still reads and every form still works.
"""

from __future__ import annotations

import datetime
import functools
import json
import uuid
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from plait import inspect as ins
from plait.checkpoint.model import STATUSES, Checkpoint
from plait.errors import ArgumentError, PlaitError, RunNotFoundError, RunsError, StoreUnsupportedError
from plait.server import memory as mem
from plait.server.chat import asked, chat_of, question_of
from plait.server.forms import FormError, field_error, kept, shown_again
from plait.server.graphs import graph_svg
from plait.server.http import read_form, root_of, route_path, status_of
from plait.server.paths import THREAD_ID, thread_target, thread_url
from plait.server.queue import error_summary
from plait.server.render import change_html, shown_id, state_html, tree_html
from plait.server.studio import Studio, check_write, studio_of
from plait.server.subgraphs import subgraph_links
from plait.server.timings import step_timing
from plait.server.traces import queued_run_traces, trace_of

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

TEMPLATES = Path(__file__).parent / "templates"

_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True))
_env.filters["when"] = lambda ts: datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
_env.filters["shown"] = shown_id
_env.filters["short"] = lambda cid: cid[:12] if cid else ""
_env.filters["q"] = lambda s: quote(str(s), safe="")
_env.filters["graph_name"] = lambda graph: str(graph).rsplit("/", 1)[-1]
_env.globals["change_html"] = change_html
_env.globals["error_summary"] = error_summary
_env.globals["tree"] = tree_html
_env.globals["run_url"] = lambda run_id: f"/runs/{quote(run_id, safe='')}"
_env.globals["statuses"] = STATUSES
_env.globals["step_timing"] = step_timing
_env.globals["trace_of"] = trace_of
_env.globals.update(asked=asked, question_of=question_of, field_error=field_error, kept=kept, form_error=None)

PAGE_METHODS = ["GET", "HEAD"]
"""A page answers HEAD as GET does (a link checker's or a proxy's look), not with a 405."""
HISTORY_PAGE = 100
MEMORY_PAGE = 50
"""Items a page of the Memory page lists."""
MEMORY_TREE = 1000
"""Namespaces the Memory page's tree shows (past them it says to narrow by a prefix)."""


def _render(request: Request, template: str, code: int = 200, **context: Any) -> HTMLResponse:
    studio = studio_of(request)
    flash = studio.flashes.pop(request.query_params.get("flash", ""), None)
    html = _env.get_template(template).render(
        root=root_of(request.scope),
        csrf=studio.guard.csrf,
        store=studio.config.store_name,
        flash=flash,
        graphs=studio.graphs,
        **context,
    )
    return HTMLResponse(html, status_code=code)


def _thread_url(thread: str, namespace: str = "", suffix: str = "", **params: str | None) -> str:
    return thread_url(thread, suffix, api=False, **{"namespace": namespace or None, **params})


def _problem(request: Request, exc: PlaitError | ValueError, back: str = "/") -> HTMLResponse:
    code = status_of(exc) if isinstance(exc, PlaitError) else 400
    return _render(request, "error.html", code, kind=type(exc).__name__, message=str(exc), back=back)


@router.api_route("/", methods=PAGE_METHODS, response_class=HTMLResponse)
async def threads_page(
    request: Request,
    status: str | None = None,
    q: str | None = None,
    metadata: str | None = None,
    cursor: str | None = None,
    namespace: str | None = None,
) -> HTMLResponse:
    studio = studio_of(request)
    try:
        meta = None
        if metadata:
            key, sep, value = metadata.partition("=")
            if not sep:
                raise ValueError(f"metadata filter {metadata!r}: write key=value (a JSON value, or text)")
            meta = {key.strip(): _json_or_text(value)}
        page = await ins.list_threads(
            studio.checkpointer,
            namespace=namespace or None,
            status=(status or None),  # type: ignore[arg-type]  # checked by the store
            prefix=q or None,
            metadata=meta,
            limit=50,
            before=cursor or None,
        )
    except (PlaitError, ValueError) as exc:
        return _problem(request, exc)
    more = None
    if page.next_cursor:
        more = "/?" + urlencode(
            {k: v for k, v in {"status": status, "q": q, "metadata": metadata, "cursor": page.next_cursor}.items() if v}
        )
    return _render(
        request,
        "threads.html",
        threads=page.threads,
        more=more,
        status=status or "",
        q=q or "",
        metadata=metadata or "",
        url=_thread_url,
        events="/api/events" + (f"?status={status}" if status in STATUSES else ""),
    )


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@router.api_route(f"/threads/{THREAD_ID}", methods=PAGE_METHODS, response_class=HTMLResponse)
async def thread_page(
    request: Request,
    thread_id: str,
    namespace: str = "",
    checkpoint: str | None = None,
    before: str | None = None,
) -> HTMLResponse:
    return await _thread_html(request, thread_id, namespace, checkpoint, before)


async def _thread_html(
    request: Request,
    thread_id: str,
    namespace: str,
    checkpoint: str | None,
    before: str | None,
    failed: FormError | None = None,
    code: int = 200,
) -> HTMLResponse:
    studio = studio_of(request)
    try:
        summary = await ins.thread_summary(studio.checkpointer, thread_id, namespace=namespace)
        page, older = await ins.history(
            studio.checkpointer, thread_id, namespace=namespace, limit=HISTORY_PAGE, before=before or None
        )
        selected = await ins.get_checkpoint(studio.checkpointer, thread_id, checkpoint or None, namespace=namespace)
        change = await ins.changes(studio.checkpointer, thread_id, selected.id, namespace=namespace)
        subgraphs = await subgraph_links(studio.checkpointer, selected)
    except (PlaitError, ValueError) as exc:
        return _problem(request, exc)
    graph_name, svg, nodes = await _graph_part(studio, summary.head, thread_id, namespace)
    queue_runs, queue_problem = None, None
    try:
        queue_runs = await studio.queue.of_thread(thread_id, namespace)
    except RunsError as exc:  # the queue is there but unusable (another version, unreachable): say so
        queue_problem = str(exc)
    lazy_path, lazy_query = thread_target(
        thread_id, "/state", api=True, namespace=namespace or None, checkpoint_id=selected.id
    )
    return _render(
        request,
        "thread.html",
        code,
        s=summary,
        history=page,
        older=_thread_url(thread_id, namespace, before=older) if older else None,
        selected=selected,
        is_head=selected.id == summary.head.id,
        change=change,
        subgraphs=subgraphs,
        change_url=_api_url(request, thread_id, "/changes", namespace, selected.id),
        state=state_html(selected.values, root_of(request.scope) + lazy_path, lazy_query),
        graph_name=graph_name,
        svg=Markup(svg) if svg else None,
        nodes=nodes,
        runs=studio.studio_runs.of_thread(thread_id, namespace),
        queue_runs=queue_runs,
        queue_problem=queue_problem,
        thread_query=urlencode({"thread": thread_id, "namespace": namespace}),
        active=studio.studio_runs.active(thread_id, namespace),
        namespace=namespace,
        url=_thread_url,
        writes=_writes,
        fork_name=f"{thread_id}-fork-{uuid.uuid4().hex[:4]}",
        events=thread_url(thread_id, "/events", api=True, namespace=namespace or None),
        chat=chat_of(selected.values),
        traces=studio.traces,
        form_error=failed,
    )


def _api_url(request: Request, thread_id: str, suffix: str, namespace: str, checkpoint_id: str) -> str:
    """An API URL of the thread's, under the mount path, with a query to add ``&key=`` to."""
    path, query = thread_target(thread_id, suffix, api=True, namespace=namespace or None, checkpoint_id=checkpoint_id)
    return root_of(request.scope) + path + "?" + urlencode(query)


def _writes(cp: Checkpoint) -> str:
    writes = cp.metadata.get("writes") or {}
    if not isinstance(writes, dict):
        return ""
    return "; ".join(f"{node}: {', '.join(map(str, keys))}" for node, keys in writes.items())


async def _graph_part(
    studio: Studio, head: Checkpoint, thread_id: str, namespace: str
) -> tuple[str | None, str | None, list[str]]:
    if not studio.graphs:
        return None, None, []
    try:
        name, app = studio.graph_for("drawing", head)
    except PlaitError:
        return None, None, []
    return name, await graph_svg(studio, app, thread_id, namespace), list(app.spec.nodes)


@router.api_route("/diff", methods=PAGE_METHODS, response_class=HTMLResponse)
async def diff_page(
    request: Request,
    a: str | None = None,
    b: str | None = None,
    pick: Annotated[list[str] | None, Query()] = None,
    namespace: str = "",
) -> HTMLResponse:
    studio = studio_of(request)
    picks = [p for p in (pick or []) if p]
    if picks and not (a or b):
        if len(picks) != 2:
            return _render(
                request,
                "diff.html",
                400,
                a="",
                b="",
                d=None,
                message=f"select two checkpoints to compare, not {len(picks)}",
            )
        b, a = picks  # the timeline lists newest first: compare older -> newer
    if not a or not b:
        return _render(request, "diff.html", a=a or "", b=b or "", d=None, message=None)
    try:
        d = await ins.diff_checkpoints(studio.checkpointer, ins.parse_ref(a, namespace), ins.parse_ref(b, namespace))
    except (PlaitError, ValueError) as exc:
        return _render(
            request,
            "diff.html",
            status_of(exc) if isinstance(exc, PlaitError) else 400,
            a=a,
            b=b,
            d=None,
            message=str(exc),
        )
    pinned = {"a": f"{d.a.thread_id}@{d.a.id}" if d.a else a, "b": f"{d.b.thread_id}@{d.b.id}", "namespace": namespace}
    lazy = root_of(request.scope) + "/api/diff?" + urlencode({k: v for k, v in pinned.items() if v})
    return _render(request, "diff.html", a=a, b=b, d=d, message=None, url=_thread_url, diff_url=lazy)


# -- the forms ---------------------------------------------------------------------------------


def _parse_json(form: dict[str, str], field: str, what: str, *, default: Any = None) -> Any:
    text = form.get(field, "").strip()
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ArgumentError(field, f"{what} must be JSON ({exc})") from None


@router.post(f"/threads/{THREAD_ID}/do/{{action}}", dependencies=[Depends(check_write)])
async def act(request: Request, thread_id: str, action: str, namespace: str = "") -> Response:
    studio = studio_of(request)
    form = await read_form(request)
    checkpoint = form.get("checkpoint_id") or None
    back = _thread_url(thread_id, namespace, checkpoint=checkpoint)
    graph = form.get("graph") or None
    try:
        if action == "update":
            values = _parse_json(form, "values", "the update")
            if not isinstance(values, dict) or not values:
                raise ArgumentError("values", "the update must be a JSON object of channel: value")
            cid, _ = await studio.update(thread_id, namespace, values, form.get("as_node") or None, graph)
            done = f"state updated: new checkpoint {cid[:12]} wrote {', '.join(sorted(values))}"
            target = _thread_url(thread_id, namespace)
        elif action == "fork":
            new = form.get("target", "").strip()
            if not new:
                raise ArgumentError("target", "name the new thread")
            edits = _parse_json(form, "edits", "the edits")
            if edits is not None and not isinstance(edits, dict):
                raise ArgumentError("edits", "the edits must be a JSON object of channel: value")
            cid = await studio.fork(thread_id, namespace, checkpoint, new, edits, graph)
            edited = f" with edits to {', '.join(sorted(edits))}" if edits else ""
            done = f"forked {thread_id} into {new}{edited} (checkpoint {cid[:12]})"
            target = _thread_url(new, namespace)
        elif action in ("resume", "continue", "replay"):
            resume = _parse_json(form, "resume", "the answer") if action == "resume" else None
            rec = await studio.run(
                thread_id, namespace, action, resume, checkpoint if action == "replay" else None, graph
            )
            done = {
                "resume": "answered the interrupt",
                "continue": "continued",
                "replay": "replaying from the checkpoint",
            }[action]
            done += f": run {rec.id} started"
            target = _thread_url(thread_id, namespace)
        elif action == "cancel":
            found = studio.studio_runs.get(form.get("run_id", ""))
            if found is None or found.thread_id != thread_id:
                raise ArgumentError("run_id", "no such run of this thread was started from this Studio")
            await studio.studio_runs.cancel(found)
            done, target = f"run {found.id} cancelled", back
        elif action == "delete":
            if form.get("confirm") != "yes":
                raise ArgumentError("confirm", "tick the box to confirm the deletion")
            n = await studio.delete(thread_id, namespace)
            done, target = f"deleted thread {thread_id} and its {n} checkpoints", "/"
        else:
            raise ArgumentError("action", f"unknown action {action!r}")
    except (PlaitError, ValueError) as exc:
        again = functools.partial(_thread_html, request, thread_id, namespace, checkpoint, None)
        return await shown_again(action, exc, form, again, functools.partial(_problem, request, exc, back))
    return _flashed(request, target, studio.flash(done))


# -- the run queue's runs ------------------------------------------------------------------------


def _local(path: str | None) -> str | None:
    """``path`` when it is a path on this Studio (a form's ``back``), else None: never a
    redirect to another site."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return None
    return path


def _run_url(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def _no_queue(request: Request, exc: RunsError) -> HTMLResponse:
    """The Runs pages on a store without a (usable) run queue: why, and how to enable it."""
    return _render(request, "runs.html", unavailable=exc)


@router.api_route("/runs", methods=PAGE_METHODS, response_class=HTMLResponse)
async def runs_page(
    request: Request,
    status: str | None = None,
    thread: str | None = None,
    graph: str | None = None,
    namespace: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    studio = studio_of(request)
    # No namespace: every namespace. An empty one counts with a thread (the thread page's link
    # names the thread's namespace, the default one included); alone it means no filter.
    ns = namespace if namespace or (namespace == "" and thread) else None
    filters = {"status": status or None, "thread": thread or None, "graph": graph or None, "namespace": ns}
    try:
        found, more = await studio.queue.page(
            status=filters["status"],
            thread_id=filters["thread"],
            namespace=ns,
            graph=filters["graph"],
            before=cursor or None,
        )
    except RunsError as exc:
        return _no_queue(request, exc)
    except ValueError as exc:
        return _problem(request, exc, "/runs")
    from plait.runs.records import RUN_STATUSES

    kept = {k: v for k, v in filters.items() if v is not None}
    watched = {k: v for k, v in {"status": status, "thread_id": thread, "namespace": ns}.items() if v is not None}
    return _render(
        request,
        "runs.html",
        unavailable=None,
        runs=found,
        more="/runs?" + urlencode({**kept, "cursor": more}) if more else None,
        run_statuses=RUN_STATUSES,
        status=status or "",
        thread=thread or "",
        graph=graph or "",
        namespace=ns,
        url=_thread_url,
        back=route_path(request.scope) + (f"?{request.url.query}" if request.url.query else ""),
        events="/api/events/runs" + (f"?{urlencode(watched)}" if watched else ""),
    )


@router.api_route("/runs/{run_id}", methods=PAGE_METHODS, response_class=HTMLResponse)
async def run_page(request: Request, run_id: str) -> HTMLResponse:
    studio = studio_of(request)
    try:
        run = await studio.queue.get(run_id)
    except RunNotFoundError as exc:
        return _problem(request, exc, "/runs")
    except RunsError as exc:
        return _no_queue(request, exc)
    return _render(
        request,
        "run.html",
        r=run,
        run_traces=await queued_run_traces(studio.checkpointer, run, HISTORY_PAGE),
        traces=studio.traces,
        url=_thread_url,
        back=_run_url(run_id),
        thread_query=urlencode({"thread": run.thread_id, "namespace": run.namespace}),
        events="/api/events/runs?" + urlencode({"thread_id": run.thread_id, "namespace": run.namespace}),
    )


@router.post("/runs/{run_id}/cancel", dependencies=[Depends(check_write)])
async def cancel_run(request: Request, run_id: str) -> Response:
    studio = studio_of(request)
    form = await read_form(request)
    back = _local(form.get("back")) or _run_url(run_id)
    try:
        cancelled, run = await studio.queue.cancel(run_id)
    except (PlaitError, ValueError) as exc:
        return _problem(request, exc, back)
    await studio.watcher.poke()
    if not cancelled:
        done = f"run {run_id} had ended already ({run.status}): nothing to cancel"
    elif run.done:
        done = f"run {run_id} cancelled: it is now {run.status}"
    else:
        done = f"run {run_id}: cancel asked; it is still {run.status}, its worker ends it when it hears of it"
    return _flashed(request, back, studio.flash(done))


def _flashed(request: Request, path: str, key: str) -> RedirectResponse:
    """Back to the Studio's ``path`` (under its mount path), which shows the confirmation ``key``."""
    target = root_of(request.scope) + path
    return RedirectResponse(target + ("&" if "?" in target else "?") + f"flash={key}", status_code=303)


# -- the memory store --------------------------------------------------------------------------


def _memory_url(namespace: str = "", **params: str | int | None) -> str:
    """The Memory page: the items under ``namespace``; ``item_ns`` and ``key`` select one,
    ``filter``, ``query`` and ``offset`` keep a search."""
    query = {k: v for k, v in {"namespace": namespace or None, **params}.items() if v}
    return "/memory" + (f"?{urlencode(query)}" if query else "")


_env.globals["memory_url"] = _memory_url
_env.globals["preview"] = mem.preview
_env.globals["ns_text"] = mem.namespace_text


@router.api_route("/memory", methods=PAGE_METHODS, response_class=HTMLResponse)
async def memory_page(
    request: Request,
    namespace: str = "",
    item_ns: str | None = None,
    key: str | None = None,
    filter: str | None = None,
    query: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> HTMLResponse:
    return await _memory_html(request, namespace, item_ns, key, filter, query, offset)


async def _memory_html(
    request: Request,
    namespace: str,
    item_ns: str | None,
    key: str | None,
    filter: str | None,
    query: str | None,
    offset: int,
    failed: FormError | None = None,
    failed_code: int = 200,
) -> HTMLResponse:
    try:
        store = mem.store_of(request)
    except StoreUnsupportedError as exc:  # a store without memory: say so, as the Runs page does
        return _render(request, "memory.html", unavailable=exc)
    selected = mem.namespace_of(namespace)
    listed = await store.alist_namespaces(limit=MEMORY_TREE + 1)
    items: list[Any] = []
    more, problem, item, code = None, None, None, 200
    try:
        items, more = await mem.search_page(
            store, selected, filter=mem.parse_filter_text(filter), query=query, limit=MEMORY_PAGE, offset=offset
        )
        if key:
            item = await store.aget(mem.namespace_of(item_ns), key, refresh_ttl=False)
            if item is None:
                problem, code = f"no item {key!r} in namespace {item_ns or ''!r}: deleted, expired, or never put", 404
    except (PlaitError, ValueError) as exc:
        problem, code = str(exc), 400
    if failed is not None and item is None and failed.action == "delete-item":  # no item left to show it by
        problem = failed.message
    search = {"filter": filter, "query": query}
    return _render(
        request,
        "memory.html",
        failed_code if failed else code,
        form_error=failed,
        unavailable=None,
        ns_tree=mem.namespace_tree(listed[:MEMORY_TREE]),
        tree_cut=len(listed) > MEMORY_TREE,
        namespace=namespace,
        selected=selected,
        items=items,
        more=_memory_url(namespace, **search, offset=more) if more is not None else None,
        newer=_memory_url(namespace, **search, offset=max(0, offset - MEMORY_PAGE)) if offset else None,
        item=item,
        item_json=json.dumps(item.value, indent=2, ensure_ascii=False) if item is not None else "",
        problem=problem,
        filter=filter or "",
        query=query or "",
        has_index=store.index is not None,
        search=search,
        offset=offset,
    )


@router.post("/memory/do/{action}", dependencies=[Depends(check_write)])
async def memory_act(request: Request, action: str) -> Response:
    studio = studio_of(request)
    form = await read_form(request)
    listed = form.get("back", "")
    ns_text, key = form.get("namespace", "").strip(), form.get("key", "")
    back = _memory_url(listed)
    try:
        store = mem.store_of(request)
        ns = mem.namespace_of(ns_text)
        if action == "delete":
            if form.get("confirm") != "yes":
                raise ArgumentError("confirm", "tick the box to confirm the deletion")
            if await store.aget(ns, key, refresh_ttl=False) is None:
                raise ArgumentError("key", f"no item {key!r} in namespace {ns_text!r}: deleted already, or expired")
            await store.adelete(ns, key)
            done, target = f"deleted item {key} of namespace {ns_text}", back
        elif action == "put":
            value = _parse_json(form, "value", "the value")
            if not isinstance(value, dict):
                raise ArgumentError("value", "the value must be a JSON object")
            await store.aput(ns, key, value)
            done = f"saved item {key} in namespace {ns_text}"
            target = _memory_url(listed, item_ns=ns_text, key=key)
        else:
            raise ArgumentError("action", f"unknown action {action!r}")
    except (PlaitError, ValueError) as exc:
        selected = (ns_text, key) if action == "delete" else (None, None)  # the item a deletion was of
        again = functools.partial(_memory_html, request, listed, selected[0], selected[1], None, None, 0)
        form_of = {"put": "put", "delete": "delete-item"}.get(action, "")
        return await shown_again(form_of, exc, form, again, functools.partial(_problem, request, exc, back))
    return _flashed(request, target, studio.flash(done))
