"""The ``plait store`` commands: read and edit the long-term memory (:class:`plait.Store`) kept
in a checkpoint database (``ls``, ``get``, ``put``, ``search``, ``rm``).

A namespace is written with its labels joined by dots (``users.u1.memories``): a label can
never hold a dot, so the spelling is unambiguous and is the one LangGraph's stores print. A
label holding odd characters can be given as a JSON list instead (``'["users", "u 1"]'``).

Reads here never extend an item's time to live (``refresh_ttl=False``): an operator looking
at memory should not keep it alive. Semantic search (``--query``) needs the embed function
that indexed the items, which lives in the application: ``--index MODULE:ATTR`` names the
index config (or the :class:`plait.Store`) the application builds.
"""

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from plait.cli.arguments import check_positive, confirm, parse_json, parse_sets, plural
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, Yes
from plait.cli.output import note
from plait.errors import ArgumentError
from plait.store import NOT_GIVEN, Item, SearchItem, Store

__all__ = ["cmd_get", "cmd_ls", "cmd_put", "cmd_rm", "cmd_search", "item_json", "parse_namespace", "register"]

VALUE_WIDTH = 60
"""Characters of an item's value a table shows (the rest: ``plait store get``)."""


def parse_namespace(text: str | None, what: str, *, prefix: bool = False) -> tuple[str, ...]:
    """``users.u1`` (or ``'["users", "u1"]'``) as a namespace tuple; a prefix may be empty
    (``""`` or left out: every namespace). The store checks each label's characters."""
    if text is None or text == "":
        if prefix:
            return ()
        raise ArgumentError(what, f"{what} is a namespace such as users.u1 (labels joined by dots); got nothing")
    if text.startswith("["):
        labels = parse_json(text, what)
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ArgumentError(what, f'{what} as JSON is a list of labels, like \'["users", "u1"]\'; got {text!r}')
        found = tuple(labels)
    else:
        found = tuple(text.split("."))
        if "" in found:
            raise ArgumentError(
                what, f"{what} {text!r} has an empty label: write labels joined by single dots, like users.u1"
            )
    if not found and not prefix:
        raise ArgumentError(what, f"{what} needs at least one label, like users.u1")
    return found


def shown(namespace: tuple[str, ...]) -> str:
    """A namespace as this command line spells it."""
    return ".".join(namespace)


def item_json(item: Item) -> dict[str, Any]:
    """An item as every ``--json`` output gives it (times ISO 8601 UTC with microseconds;
    a search's items add ``score``)."""
    record: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at.isoformat(timespec="microseconds"),
        "updated_at": item.updated_at.isoformat(timespec="microseconds"),
    }
    if isinstance(item, SearchItem):
        record["score"] = item.score
    return record


def _store(inv: Invocation, index: str | None, *, create: bool = False) -> Store:
    """The memory store of ``--db``, with the application's index (and ttl options) when
    ``--index`` names them."""
    checkpointer = inv.checkpointer(create=create)
    if index is None:
        return checkpointer.store
    from plait.cli.loading import load_target

    found = load_target(index)
    if isinstance(found, Store):
        return found.over(checkpointer)
    if isinstance(found, Mapping):
        return Store(checkpointer, index=found)
    raise ArgumentError(
        "--index",
        f"--index {index} is a {type(found).__name__}; name the index config your application gives "
        "Store(index=...) (a dict with dims, embed and fields), or the plait.Store itself",
    )


def _missing(inv: Invocation, namespace: tuple[str, ...], key: str) -> ArgumentError:
    return ArgumentError(
        "KEY",
        f"no item {key!r} in namespace {shown(namespace)} of {inv.shown_db} (or it expired); "
        f"list its items with: plait store ls {_q(shown(namespace))} --items{inv.flags()}",
    )


def _brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def _when(item: Item) -> str:
    return item.updated_at.strftime("%Y-%m-%d %H:%M:%S")


def _items_table(inv: Invocation, title: str, items: list[SearchItem], *, scores: bool) -> None:
    columns = ["namespace", "key", *(["score"] if scores else []), "updated (UTC)", "value"]
    rows = [
        [
            shown(i.namespace),
            i.key,
            *([f"{i.score:.3f}" if i.score is not None else "-"] if scores else []),
            _when(i),
            _brief(i.value),
        ]
        for i in items
    ]
    inv.out.table(title, columns, rows)


def _check_page(limit: int, offset: int) -> None:
    check_positive(limit, "--limit")
    if offset < 0:
        raise ArgumentError("--offset", f"--offset is how many to skip, 0 or more; got {offset}")


def _more(count: int, limit: int, offset: int) -> None:
    if count == limit:
        note(f"(showing {count}; more with --offset {offset + limit})")


def cmd_ls(
    inv: Invocation,
    prefix_text: str | None,
    *,
    suffix_text: str | None,
    max_depth: int | None,
    limit: int,
    offset: int,
    items: bool,
) -> None:
    _check_page(limit, offset)
    prefix = parse_namespace(prefix_text, "PREFIX", prefix=True)
    suffix = None if suffix_text is None else parse_namespace(suffix_text, "--suffix")
    store = _store(inv, None)
    under = f" under {shown(prefix)}" if prefix else ""
    if items:
        if max_depth is not None or suffix is not None:
            raise ArgumentError(
                "--items", "--items lists the items under PREFIX; --max-depth and --suffix list namespaces"
            )
        found = store.search(prefix, limit=limit, offset=offset, refresh_ttl=False)
        if inv.out.json:
            inv.out.emit({"store": inv.shown_db, "prefix": list(prefix), "items": [item_json(i) for i in found]})
        elif not found:
            inv.out.line(f"no items in {inv.shown_db}{under}")
        else:
            _items_table(inv, f"items{under} (newest first)", found, scores=False)
            _more(len(found), limit, offset)
        return
    namespaces = store.list_namespaces(
        prefix=prefix or None, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
    )
    if inv.out.json:
        inv.out.emit({"store": inv.shown_db, "prefix": list(prefix), "namespaces": [list(ns) for ns in namespaces]})
        return
    if not namespaces:
        inv.out.line(f"no namespaces in {inv.shown_db}{under}")
        return
    for ns in namespaces:
        inv.out.line(shown(ns))
    _more(len(namespaces), limit, offset)


def cmd_get(inv: Invocation, namespace_text: str, key: str) -> None:
    namespace = parse_namespace(namespace_text, "NAMESPACE")
    item = _store(inv, None).get(namespace, key, refresh_ttl=False)
    if item is None:
        raise _missing(inv, namespace, key)
    if inv.out.json:
        inv.out.emit(item_json(item))
        return
    created = item.created_at.strftime("%Y-%m-%d %H:%M:%S")
    inv.out.value(f"{shown(namespace)} {key} (created {created}, updated {_when(item)} UTC)", item.value)


def _value(fields: list[str], value_text: str | None) -> dict[str, Any]:
    """The value of a put: ``--value`` (JSON, ``@file``, ``-`` for stdin), then the fields."""
    value: dict[str, Any] = {}
    if value_text is not None:
        given = parse_json("@-" if value_text == "-" else value_text, "--value")
        if not isinstance(given, dict):
            raise ArgumentError("--value", f'--value is a JSON object, like \'{{"name": "Ada"}}\'; got {given!r:.60}')
        value.update(given)
    value.update(parse_sets(fields, "FIELD"))
    if not value and value_text is None:
        raise ArgumentError(
            "FIELD",
            "give the item's value: fields (name=Ada age:=36 tags:='[\"a\"]'), --value JSON, "
            "--value @file.json, or --value - to read it from stdin",
        )
    return value


def cmd_put(
    inv: Invocation,
    namespace_text: str,
    key: str,
    fields: list[str],
    *,
    value_text: str | None,
    ttl: float | None,
    index: str | None,
) -> None:
    namespace = parse_namespace(namespace_text, "NAMESPACE")
    value = _value(fields, value_text)
    if ttl is not None and not ttl > 0:
        raise ArgumentError("--ttl", f"--ttl is a positive number of minutes, got {ttl:g}")
    store = _store(inv, index, create=True)
    before = store.get(namespace, key, refresh_ttl=False)
    store.put(namespace, key, value, ttl=NOT_GIVEN if ttl is None else ttl)
    item = store.get(namespace, key, refresh_ttl=False)
    assert item is not None  # just written; it expires minutes from now at the earliest
    lives = store.default_ttl if ttl is None else ttl
    if inv.out.json:
        inv.out.emit({"store": inv.shown_db, "created": before is None, "ttl": lives, "item": item_json(item)})
        return
    how = "stored" if before is None else "replaced"
    expires = f"; it expires {lives:g} minutes after its last write" if lives is not None else ""
    inv.out.line(f"{how} {shown(namespace)} {key} in {inv.shown_db}{expires}")


def cmd_search(
    inv: Invocation,
    prefix_text: str | None,
    *,
    filters: list[str],
    filter_json: str | None,
    query: str | None,
    limit: int,
    offset: int,
    index: str | None,
) -> None:
    _check_page(limit, offset)
    prefix = parse_namespace(prefix_text, "PREFIX", prefix=True)
    conditions: dict[str, Any] = {}
    if filter_json is not None:
        given = parse_json(filter_json, "--filter-json")
        if not isinstance(given, dict):
            raise ArgumentError(
                "--filter-json", f'--filter-json is a JSON object, like \'{{"age": {{"$gt": 30}}}}\'; got {given!r:.60}'
            )
        conditions.update(given)
    conditions.update(parse_sets(filters, "--filter"))
    if query is not None and index is None:
        raise ArgumentError(
            "--query",
            "--query ranks items by meaning with the embed function that indexed them, which lives in your "
            "application: add --index MODULE:ATTR naming the index config it gives Store(index=...) (a dict "
            "with dims and embed) or its plait.Store; or search by value with --filter key=value",
        )
    store = _store(inv, index)
    found = store.search(prefix, query=query, filter=conditions or None, limit=limit, offset=offset, refresh_ttl=False)
    if inv.out.json:
        inv.out.emit(
            {
                "store": inv.shown_db,
                "prefix": list(prefix),
                "query": query,
                "filter": conditions,
                "items": [item_json(i) for i in found],
            }
        )
        return
    under = f" under {shown(prefix)}" if prefix else ""
    if not found:
        inv.out.line(f"no items match in {inv.shown_db}{under}")
        return
    order = "closest first" if query is not None else "newest first"
    _items_table(inv, f"{plural(len(found), 'item')}{under} ({order})", found, scores=query is not None)
    _more(len(found), limit, offset)


def cmd_rm(inv: Invocation, namespace_text: str, key: str, yes: bool) -> None:
    namespace = parse_namespace(namespace_text, "NAMESPACE")
    store = _store(inv, None)
    if store.get(namespace, key, refresh_ttl=False) is None:
        raise _missing(inv, namespace, key)
    confirm(f"delete item {key!r} of namespace {shown(namespace)} from {inv.shown_db}?", f"rm {key}", yes)
    store.delete(namespace, key)
    if inv.out.json:
        inv.out.emit({"store": inv.shown_db, "namespace": list(namespace), "key": key, "deleted": True})
    else:
        inv.out.line(f"deleted {shown(namespace)} {key}")


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


# -- registration ----------------------------------------------------------------------------

Limit = Annotated[int, typer.Option("--limit", "-n", metavar="N", help="At most N.")]
Offset = Annotated[int, typer.Option("--offset", metavar="N", help="Skip the first N (paging).")]
Index = Annotated[
    str | None,
    typer.Option(
        "--index",
        metavar="MODULE:ATTR",
        help="Your application's index config (a dict with dims, embed, fields) or its plait.Store: "
        "needed for --query, and to embed what put stores.",
    ),
]
NamespaceArg = Annotated[
    str, typer.Argument(metavar="NAMESPACE", help="Labels joined by dots: users.u1.", show_default=False)
]
Key = Annotated[str, typer.Argument(metavar="KEY", help="The item's key.", show_default=False)]
Prefix = Annotated[
    str | None,
    typer.Argument(metavar="PREFIX", help="Only namespaces starting with these labels (users.u1); default: all."),
]


def register(app: typer.Typer) -> None:
    """The ``store`` group."""
    store_app = typer.Typer(
        help="The long-term memory (plait.Store) in a store's database: ls, get, put, search, rm.",
        no_args_is_help=True,
    )
    app.add_typer(store_app, name="store")

    @store_app.command("ls")
    def ls(
        prefix: Prefix = None,
        items: Annotated[
            bool, typer.Option("--items", "-i", metavar="", help="List the items under PREFIX, not namespaces.")
        ] = False,
        max_depth: Annotated[
            int | None, typer.Option("--max-depth", metavar="N", help="Cut namespaces to N labels (distinct).")
        ] = None,
        suffix: Annotated[
            str | None, typer.Option("--suffix", metavar="LABELS", help="Only namespaces ending with these labels.")
        ] = None,
        limit: Limit = 100,
        offset: Offset = 0,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the namespaces that hold memory (sorted), or with --items the items (newest first)."""
        run_command(
            lambda inv: cmd_ls(
                inv, prefix, suffix_text=suffix, max_depth=max_depth, limit=limit, offset=offset, items=items
            ),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @store_app.command("get")
    def get(namespace: NamespaceArg, key: Key, db: Db = None, as_json: Json = False, debug: Debug = False) -> None:
        """Show one item (exit 2 when there is none)."""
        run_command(lambda inv: cmd_get(inv, namespace, key), as_json=as_json, debug=debug, db=db)

    @store_app.command("put")
    def put(
        namespace: NamespaceArg,
        key: Key,
        fields: Annotated[
            list[str] | None,
            typer.Argument(metavar="FIELD...", help="name=Ada for a string, age:=36 (key:=JSON) for any JSON value."),
        ] = None,
        value: Annotated[
            str | None,
            typer.Option(
                "--value", metavar="JSON", help="The value as a JSON object, @file, or - for stdin (fields add to it)."
            ),
        ] = None,
        ttl: Annotated[
            float | None,
            typer.Option("--ttl", metavar="MINUTES", help="Minutes it lives after its last write (default: forever)."),
        ] = None,
        index: Index = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Store an item (a JSON object), replacing what the key held."""
        run_command(
            lambda inv: cmd_put(inv, namespace, key, fields or [], value_text=value, ttl=ttl, index=index),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @store_app.command("search")
    def search(
        prefix: Prefix = None,
        filter_: Annotated[
            list[str] | None,
            typer.Option(
                "--filter",
                "-f",
                metavar="KEY=VALUE",
                help="Keep items whose KEY (dotted for nested: profile.city) is VALUE; KEY:=json for JSON, "
                "or an operator object: 'age:={\"$gt\": 30}' (repeatable).",
            ),
        ] = None,
        filter_json: Annotated[
            str | None, typer.Option("--filter-json", metavar="JSON", help="The whole filter as a JSON object.")
        ] = None,
        query: Annotated[
            str | None, typer.Option("--query", "-q", metavar="TEXT", help="Rank by meaning (needs --index).")
        ] = None,
        limit: Limit = 10,
        offset: Offset = 0,
        index: Index = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Find items under PREFIX by value (--filter) or meaning (--query); newest or closest first."""
        run_command(
            lambda inv: cmd_search(
                inv,
                prefix,
                filters=filter_ or [],
                filter_json=filter_json,
                query=query,
                limit=limit,
                offset=offset,
                index=index,
            ),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @store_app.command("rm")
    def rm(
        namespace: NamespaceArg,
        key: Key,
        yes: Yes = False,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Delete an item (asks first; --yes for scripts)."""
        run_command(lambda inv: cmd_rm(inv, namespace, key, yes), as_json=as_json, debug=debug, db=db)
